#!/usr/bin/env bash
# B26 Fig. 6 (Jax2D locomotion, ppo_ewma_jax2d.py). Epochs x COM (PPO-EWMA) and epochs x epsilon (PPO): more epochs plateau unless regularised more.
# Page: docs/ppo_ewma_jax2d.md. A GPU is assumed for the paper's budgets; on CPU lower TOTAL (and NUM_ENVS).
# Environment (see _beukman2026_common.sh): RUNS_DIR (runs/beukman2026_fig6), WORKERS (1), SEEDS ("1 2 3 4 5"), TOTAL (total timesteps), PYTHON (python).
RUNS_DIR=${RUNS_DIR:-runs/beukman2026_fig6}
source "$(dirname "$0")/_beukman2026_common.sh"
TOTAL=${TOTAL:-100000000}
launch --job-name beukman2026_fig6_com --sweep update-epochs=1,2,4,8,16,32 --sweep ewma-com=2,8,32 \
  -- --total-timesteps "$TOTAL"
launch --job-name beukman2026_fig6_eps --sweep update-epochs=1,2,4,8,16,32 --sweep clip-coef=0.0001,0.1,0.2,0.4 \
  -- --total-timesteps "$TOTAL"
