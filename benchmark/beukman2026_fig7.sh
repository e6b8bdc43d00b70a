#!/usr/bin/env bash
# B26 Fig. 7 (Jax2D locomotion, ppo_ewma_jax2d.py). Envs x COM and envs x epsilon at a fixed number of update steps (x-axis: iteration): larger batches tolerate weaker regularisation (32 minibatches throughout).
# Page: docs/ppo_ewma_jax2d.md. A GPU is assumed for the paper's budgets; on CPU lower TOTAL (and NUM_ENVS).
# Environment (see _beukman2026_common.sh): RUNS_DIR (runs/beukman2026_fig7), WORKERS (1), SEEDS ("1 2 3 4 5"), TOTAL (total timesteps), PYTHON (python).
RUNS_DIR=${RUNS_DIR:-runs/beukman2026_fig7}
source "$(dirname "$0")/_beukman2026_common.sh"
ITERATIONS=${ITERATIONS:-200}
for n in 16 64 256 1024 2048 8192; do
  total=$((n * 256 * ITERATIONS))
  launch --job-name "beukman2026_fig7_com_n$n" --sweep ewma-com=2,8,32 -- --num-envs "$n" --total-timesteps "$total"
  launch --job-name "beukman2026_fig7_eps_n$n" --sweep clip-coef=0.1,0.2,0.4,0.6 -- --num-envs "$n" \
    --total-timesteps "$total"
done
