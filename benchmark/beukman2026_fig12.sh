#!/usr/bin/env bash
# B26 Fig. 12 (Jax2D locomotion, ppo_ewma_jax2d.py). COM x epsilon grid: most COMs have an epsilon that performs well; extreme epsilons are unstable.
# Page: docs/ppo_ewma_jax2d.md. A GPU is assumed for the paper's budgets; on CPU lower TOTAL (and NUM_ENVS).
# Environment (see _beukman2026_common.sh): RUNS_DIR (runs/beukman2026_fig12), WORKERS (1), SEEDS ("1 2 3 4 5"), TOTAL (total timesteps), PYTHON (python).
RUNS_DIR=${RUNS_DIR:-runs/beukman2026_fig12}
source "$(dirname "$0")/_beukman2026_common.sh"
TOTAL=${TOTAL:-100000000}
launch --job-name beukman2026_fig12 --sweep ewma-com=1,2,4,8,16,32,64 --sweep clip-coef=0.05,0.1,0.2,0.4,0.8 \
  -- --total-timesteps "$TOTAL"
