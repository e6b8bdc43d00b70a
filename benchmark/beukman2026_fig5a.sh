#!/usr/bin/env bash
# B26 Fig. 5a (Jax2D locomotion, ppo_ewma_jax2d.py). Changing the proximal policy's center of mass: too low a COM plateaus early, too high learns slowly.
# Page: docs/ppo_ewma_jax2d.md. A GPU is assumed for the paper's budgets; on CPU lower TOTAL (and NUM_ENVS).
# Environment (see _beukman2026_common.sh): RUNS_DIR (runs/beukman2026_fig5a), WORKERS (1), SEEDS ("1 2 3 4 5"), TOTAL (total timesteps), PYTHON (python).
RUNS_DIR=${RUNS_DIR:-runs/beukman2026_fig5a}
source "$(dirname "$0")/_beukman2026_common.sh"
TOTAL=${TOTAL:-100000000}
launch --job-name beukman2026_fig5a --sweep ewma-com=1,2,4,8,16,32,64 -- --total-timesteps "$TOTAL"
