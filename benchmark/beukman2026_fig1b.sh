#!/usr/bin/env bash
# B26 Fig. 1b: noisy convex optimisation (App. A). Too large a step size plateaus at a suboptimal level, too small
# a one does not converge within the budget. Page: docs/reproducing/beukman2026_fig1b.md
#   bash benchmark/beukman2026_fig1b.sh          # under a minute on 2 CPU cores
# DRY_RUN=1 prints the grid; SLURM=1 submits it as a Slurm array; DRAW_ONLY=1 draws without launching (knobs:
# benchmark/_slurm_common.sh, docs/cluster.md).
# Environment: RUNS_DIR (runs/beukman2026_fig1b), OUT_DIR (runs/figures), WORKERS (1), PYTHON (python).
# Finished runs are kept and reused (--skip-finished); rm -rf "$RUNS_DIR" to start afresh.
set -euo pipefail
cd "$(dirname "$0")/.."
source benchmark/_slurm_common.sh
RUNS_DIR=${RUNS_DIR:-runs/beukman2026_fig1b}
OUT_DIR=${OUT_DIR:-runs/figures}
WORKERS=${WORKERS:-1}
PYTHON=${PYTHON:-python}
STEP_SIZES=(0.3 0.03 0.003 0.0003)

[[ -n "${DRAW_ONLY:-}" ]] || "$PYTHON" -m cleanrl_scaling.utils.launcher cleanrl_scaling/noisy_sgd.py --job-name beukman2026_fig1b \
  --runs-dir "$RUNS_DIR" --workers "$WORKERS" --skip-finished "${SLURM_ARGS[@]}" ${DRY_RUN:+--dry-run} \
  --sweep "learning-rate=$(IFS=,; echo "${STEP_SIZES[*]}")" \
  -- --total-steps 1000 --num-seeds 5 --log-every 5
[[ -n "${DRY_RUN:-}${SLURM:-}" ]] && exit 0  # nothing to draw yet (after an array: DRAW_ONLY=1)

# The closed-form plateau of each step size that reaches it within the budget (docs/noisy_sgd.md)
mapfile -t HLINES < <("$PYTHON" - "${STEP_SIZES[@]:0:3}" <<'PY'
import sys
from cleanrl_scaling.noisy_sgd import default_noise_std, plateau
for lr in map(float, sys.argv[1:]):
    print(f"--hline=-{plateau(lr, default_noise_std(50), 50)['distance']:.4f}:step size {lr:g}")
PY
)

"$PYTHON" -m cleanrl_scaling.utils.aggregate curves "$RUNS_DIR" --only-finished --metric charts/neg_distance \
  --group-by learning_rate --label "step size {learning_rate}" --x global_step \
  --xlabel "gradient steps" --ylabel "-||x - x*||" \
  --title "B26 Fig. 1b: noisy convex optimisation (d=50, 5 seeds, mean and 95% CI)" \
  "${HLINES[@]}" --hline-legend "closed-form plateau (dotted)" --out "$OUT_DIR/beukman2026_fig1b"
