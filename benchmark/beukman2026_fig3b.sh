#!/usr/bin/env bash
# B26 Fig. 3b: changing the step size mid-run moves noisy gradient descent to the plateau of the new step size:
# lowering it resumes progress, raising it falls back to the higher plateau. Page: docs/reproducing/beukman2026_fig3b.md
#   bash benchmark/beukman2026_fig3b.sh          # under a minute on 2 CPU cores
# DRY_RUN=1 prints the grid; SLURM=1 submits it as a Slurm array; DRAW_ONLY=1 draws without launching (knobs:
# benchmark/_slurm_common.sh, docs/cluster.md).
# Environment: RUNS_DIR (runs/beukman2026_fig3b), OUT_DIR (runs/figures), WORKERS (1), PYTHON (python).
# Finished runs are kept and reused (--skip-finished); rm -rf "$RUNS_DIR" to start afresh.
set -euo pipefail
cd "$(dirname "$0")/.."
source benchmark/_slurm_common.sh
RUNS_DIR=${RUNS_DIR:-runs/beukman2026_fig3b}
OUT_DIR=${OUT_DIR:-runs/figures}
WORKERS=${WORKERS:-1}
PYTHON=${PYTHON:-python}
HIGH=0.3
LOW=0.03
SWITCH=500

# Legend as in B26 Fig. 3: the step size at the end, and the one it started from; the switched runs are dashed,
# since each overlaps a fixed run (the same seeds) until the switch
[[ -n "${DRAW_ONLY:-}" ]] || "$PYTHON" -m cleanrl_scaling.utils.launcher cleanrl_scaling/noisy_sgd.py --job-name beukman2026_fig3b \
  --runs-dir "$RUNS_DIR" --workers "$WORKERS" --skip-finished "${SLURM_ARGS[@]}" ${DRY_RUN:+--dry-run} \
  --flag-set "--exp-name lr$HIGH --learning-rate $HIGH" \
  --flag-set "--exp-name lr$LOW --learning-rate $LOW" \
  --flag-set "--exp-name lr${LOW}_from_$HIGH --learning-rate $HIGH --switch-step $SWITCH --switch-learning-rate $LOW" \
  --flag-set "--exp-name lr${HIGH}_from_$LOW --learning-rate $LOW --switch-step $SWITCH --switch-learning-rate $HIGH" \
  -- --total-steps 1000 --num-seeds 5 --log-every 5
[[ -n "${DRY_RUN:-}${SLURM:-}" ]] && exit 0  # nothing to draw yet (after an array: DRAW_ONLY=1)

mapfile -t HLINES < <("$PYTHON" - "$HIGH" "$LOW" <<'PY'
import sys
from cleanrl_scaling.noisy_sgd import default_noise_std, plateau
for lr in map(float, sys.argv[1:]):
    print(f"--hline=-{plateau(lr, default_noise_std(50), 50)['distance']:.4f}:{lr:g}")
PY
)

"$PYTHON" -m cleanrl_scaling.utils.aggregate curves "$RUNS_DIR" --only-finished --metric charts/neg_distance \
  --x global_step --xlabel "gradient steps" --ylabel "-||x - x*||" --ylim -1.6 0.05 \
  --title "B26 Fig. 3b: step size switched at step $SWITCH (5 seeds, mean and 95% CI)" \
  --relabel "lr$HIGH->$HIGH" --relabel "lr$LOW->$LOW" --relabel "lr${LOW}_from_$HIGH->$LOW ($HIGH)" \
  --relabel "lr${HIGH}_from_$LOW->$HIGH ($LOW)" --legend-title "step size (starting step size)" \
  --style "$LOW ($HIGH)=--" --style "$HIGH ($LOW)=--" \
  "${HLINES[@]}" --hline-legend "closed-form plateau (dotted)" --out "$OUT_DIR/beukman2026_fig3b"
