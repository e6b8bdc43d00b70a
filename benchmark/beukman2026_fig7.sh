#!/usr/bin/env bash
# B26 Fig. 7 (Jax2D locomotion, ppo_ewma_jax2d.py). Envs x COM and envs x epsilon at a fixed number of update steps (x-axis: iteration): larger batches tolerate weaker regularisation (32 minibatches throughout).
# Page: docs/ppo_ewma_jax2d.md. A GPU is assumed for the paper's budgets; on CPU lower TOTAL (and NUM_ENVS).
# Environment: RUNS_DIR (runs/beukman2026_fig7), WORKERS (1), SEEDS ("1 2 3 4 5"), TOTAL (total timesteps), PYTHON (python).
# Finished runs are kept and reused (--skip-finished); rm -rf "$RUNS_DIR" to start afresh. DRY_RUN=1 prints the commands.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS_DIR=${RUNS_DIR:-runs/beukman2026_fig7}
WORKERS=${WORKERS:-1}
PYTHON=${PYTHON:-python}
read -r -a SEEDS <<< "${SEEDS:-1 2 3 4 5}"
EXTRA=(); [[ -n "${DRY_RUN:-}" ]] && EXTRA=(--dry-run)
launch() { "$PYTHON" -m cleanrl_scaling.utils.launcher cleanrl_scaling/ppo_ewma_jax2d.py --runs-dir "$RUNS_DIR" \
  --workers "$WORKERS" --skip-finished --seeds "${SEEDS[@]}" "${EXTRA[@]}" "$@"; }
ITERATIONS=${ITERATIONS:-200}
for n in 16 64 256 1024 2048 8192; do
  total=$((n * 256 * ITERATIONS))
  launch --job-name "beukman2026_fig7_com_n$n" --sweep ewma-com=2,8,32 -- --num-envs "$n" --total-timesteps "$total"
  launch --job-name "beukman2026_fig7_eps_n$n" --sweep clip-coef=0.1,0.2,0.4,0.6 -- --num-envs "$n" \
    --total-timesteps "$total"
done
