# Sourced by the Jax2D benchmark/beukman2026_fig*.sh scripts: the launcher call they share.
# Environment: RUNS_DIR, WORKERS (1), SEEDS ("1 2 3 4 5"), PYTHON (python), DRY_RUN=1 prints the commands.
# Finished runs are kept and reused (--skip-finished); rm -rf "$RUNS_DIR" to start afresh.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
WORKERS=${WORKERS:-1}
PYTHON=${PYTHON:-python}
read -r -a SEEDS <<< "${SEEDS:-1 2 3 4 5}"
EXTRA=(); [[ -n "${DRY_RUN:-}" ]] && EXTRA=(--dry-run)
launch() { "$PYTHON" -m cleanrl_scaling.utils.launcher cleanrl_scaling/ppo_ewma_jax2d.py --runs-dir "$RUNS_DIR" \
  --workers "$WORKERS" --skip-finished --seeds "${SEEDS[@]}" "${EXTRA[@]}" "$@"; }
