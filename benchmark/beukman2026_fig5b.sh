#!/usr/bin/env bash
# B26 Fig. 5b (Jax2D locomotion, ppo_ewma_jax2d.py). Changing PPO's clipping epsilon: too large an epsilon plateaus early, too small learns slowly.
# Page: docs/ppo_ewma_jax2d.md. A GPU is assumed for the paper's budgets; on CPU lower TOTAL (and NUM_ENVS).
# Environment (see _beukman2026_common.sh): RUNS_DIR (runs/beukman2026_fig5b), WORKERS (1), SEEDS ("1 2 3 4 5"), TOTAL (total timesteps), PYTHON (python).
RUNS_DIR=${RUNS_DIR:-runs/beukman2026_fig5b}
source "$(dirname "$0")/_beukman2026_common.sh"
TOTAL=${TOTAL:-100000000}
launch --job-name beukman2026_fig5b --sweep clip-coef=0.05,0.1,0.2,0.4,0.6,0.8 -- --total-timesteps "$TOTAL"
