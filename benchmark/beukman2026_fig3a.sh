#!/usr/bin/env bash
# B26 Fig. 3a (Jax2D locomotion, ppo_ewma_jax2d.py): a run that plateaued at one COM, reloaded with another COM,
# moves to the new COM's level (up when the COM is raised, down when it is lowered). Page: docs/ppo_ewma_jax2d.md
# Phase 1 trains at COM 2 and 32 to TOTAL steps; phase 2 reloads the final checkpoint of every *finished* phase-1 run
# with the other COM, and with its own COM as the reference (the run continued unchanged, B26's full-length lines),
# and continues its step count to TOTAL2 (reloaded runs go to RUNS_DIR/reloaded; a reload that finished is not
# repeated). The figures: charts/solve_rate (and charts/train_solve_rate, _train) of both phases against steps.
# Our choice, not the paper's: the COMs 2 and 32, the budgets (50M then 100M steps), 5 seeds.
#   SCALE=paper (default): B26 Table 2 on all 512 tasks, 50M then 100M steps, 5 seeds: GPU scale.
#   SCALE=laptop: Fig. 5a's laptop setting (the 8 tasks of --task-seed 31, 64 envs x 128 steps, 8 minibatches x
#   8 epochs), 409,600 then 819,200 steps (50 + 50 updates), 2 seeds: 4 phase-1 runs and 8 reloads of 12-15 min
#   each on one core, ~2.7 CPU-hours (docs/reproducing/beukman2026_fig3a.md). Bands: the range of the seeds.
# Environment (see _beukman2026_common.sh): SCALE, RUNS_DIR (runs/beukman2026_fig3a), OUT_DIR, WORKERS, SEEDS, FLAGS,
# PYTHON, DRY_RUN; TOTAL (phase-1 steps, 50000000), TOTAL2 (steps at the end of phase 2, 100000000).
RUNS_DIR=${RUNS_DIR:-runs/beukman2026_fig3a}
if [[ "${SCALE:-paper}" == laptop ]]; then
  SEEDS=${SEEDS:-1 2}; BAND=${BAND:-minmax}; TOTAL=${TOTAL:-409600}; TOTAL2=${TOTAL2:-819200}
  FLAGS=${FLAGS:---task-seed 31 --num-tasks 8 --num-envs 64 --num-steps 128 --num-minibatches 8 --update-epochs 8 --eval-every 5 --diagnostics-every 5}
fi
LAPTOP_GRID=1
source "$(dirname "$0")/_beukman2026_common.sh"
TOTAL=${TOTAL:-50000000}
TOTAL2=${TOTAL2:-100000000}
COMS=(2 32)
positive_int TOTAL "$TOTAL"
positive_int TOTAL2 "$TOTAL2"
(( TOTAL2 > TOTAL )) || die "TOTAL2=$TOTAL2 must exceed TOTAL=$TOTAL (the reloaded runs continue phase 1's step count)"
one_update_fits TOTAL "$TOTAL" "$(flag_value num-envs 2048)"
not_in_flags ewma-com exp-name init-from resume seed total-timesteps

PHASE1=(); for com in "${COMS[@]}"; do PHASE1+=(--flag-set "--exp-name com$com --ewma-com $com"); done
launch --job-name beukman2026_fig3a_phase1 "${PHASE1[@]}" -- --total-timesteps "$TOTAL"

# Phase 2: one reload per finished phase-1 run and COM, its own included (interrupted runs are not reloaded)
mapfile -t RELOADS < <("$PYTHON" - "$RUNS_DIR" "${COMS[@]}" <<'PY'
import os, shlex, sys
from cleanrl_scaling.utils.rundirs import read_json, run_status
root, coms = sys.argv[1], sys.argv[2:]
for name in sorted(os.listdir(root)) if os.path.isdir(root) else []:
    path = os.path.join(root, name)
    config = read_json(os.path.join(path, "config.json"))
    ckpt = os.path.join(path, "checkpoints", "latest.ckpt")
    if not isinstance(config, dict) or run_status(path) != "finished" or not os.path.exists(ckpt):
        continue
    args = config.get("args", {})
    com = f"{float(args.get('ewma_com', 0)):g}"
    if args.get("init_from") or args.get("exp_name") != f"com{com}":
        continue
    for new in coms:  # its own COM too: the reference continuation the switched runs are compared with
        print(f"--init-from {shlex.quote(ckpt)} --ewma-com {new} --seed {args['seed']} --exp-name com{com}_to_{new}")
PY
)
if [[ -n "${DRAW_ONLY:-}" ]]; then
  :  # draw what exists, launch nothing
elif (( ${#RELOADS[@]} )); then
  PHASE2=(); for flags in "${RELOADS[@]}"; do PHASE2+=(--flag-set "$flags"); done
  "$PYTHON" -m cleanrl_scaling.utils.launcher cleanrl_scaling/ppo_ewma_jax2d.py --job-name beukman2026_fig3a_reload \
    --runs-dir "$RUNS_DIR/reloaded" --workers "$WORKERS" --skip-finished "${EXTRA[@]}" "${PHASE2[@]}" \
    -- --total-timesteps "$TOTAL2" "${FLAGS[@]}" --checkpoint-every "$CHECKPOINT_EVERY"
else
  echo "# phase 2: no finished phase-1 run in $RUNS_DIR yet; once there are, each is reloaded with the other COM"
fi

# legend as B26 Fig. 3a: COM (starting COM); the reloaded runs dashed
LEGEND=(--legend-title "COM (starting COM)")
for from in "${COMS[@]}"; do
  LEGEND+=(--relabel "com$from->$from")
  for to in "${COMS[@]}"; do LEGEND+=(--relabel "com${from}_to_$to->$to ($from)" --style "$to ($from)=--"); done
done
aggregate curves --band "$BAND" --metric charts/solve_rate --label "{exp_name}" --x global_step "${LEGEND[@]}" \
  --ylabel "solve rate" --title "B26 Fig. 3a: reloaded with another COM ($BAND_TEXT)" \
  --out "$OUT_DIR/beukman2026_fig3a"
# the same from every training episode (thousands per update; the evaluation above: --eval-attempts episodes per task)
aggregate curves --band "$BAND" --metric charts/train_solve_rate --label "{exp_name}" --x global_step "${LEGEND[@]}" \
  --ylabel "solve rate, training episodes" --title "B26 Fig. 3a from the training episodes ($BAND_TEXT)" \
  --out "$OUT_DIR/beukman2026_fig3a_train"
