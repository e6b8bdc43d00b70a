#!/usr/bin/env bash
# B26 Fig. 4 (Jax2D locomotion, ppo_ewma_jax2d.py). Learning rate x COM, each with and without annealing: the lr cannot fix a bad outer step size.
# Page: docs/ppo_ewma_jax2d.md. A GPU is assumed for the paper's budgets; on CPU lower TOTAL (and NUM_ENVS).
# Environment (see _beukman2026_common.sh): RUNS_DIR (runs/beukman2026_fig4), WORKERS (1), SEEDS ("1 2 3 4 5"), TOTAL (total timesteps), PYTHON (python).
RUNS_DIR=${RUNS_DIR:-runs/beukman2026_fig4}
source "$(dirname "$0")/_beukman2026_common.sh"
TOTAL=${TOTAL:-100000000}
launch --job-name beukman2026_fig4 --sweep learning-rate=0.0001,0.0003,0.001,0.003 --sweep ewma-com=2,8,32,128 \
  --sweep anneal-lr=true,false -- --total-timesteps "$TOTAL"
