#!/usr/bin/env bash
# B26 Fig. 3a (Jax2D locomotion, ppo_ewma_jax2d.py): a run that plateaued at one COM, reloaded with another COM,
# moves to the new COM's level (up when the COM is raised, down when it is lowered). Page: docs/ppo_ewma_jax2d.md
# Phase 1 trains at COM 2 and 32 to TOTAL steps; phase 2 reloads the final checkpoint of every *finished* phase-1 run
# with the other COM, and with its own COM as the reference (the run continued unchanged, B26's full-length lines),
# and continues its step count to TOTAL2 (reloaded runs go to RUNS_DIR/reloaded; a reload that finished is not
# repeated). The figures: charts/solve_rate (and charts/train_solve_rate, _train) of both phases against steps; a
# reloaded run's line starts at the switch (the state it was reloaded from).
# Our choice, not the paper's: the COMs 2 and 32, the budgets (50M then 100M steps), 5 seeds.
#   SCALE=paper (default): B26 Table 2 on all 512 tasks, 50M then 100M steps, 5 seeds: GPU scale.
#   SCALE=laptop (docs/reproducing/beukman2026_jax2d_design.md): Fig. 5a's laptop setting
#   (benchmark/_beukman2026_jax2d_main.sh: 16 tasks of --task-seed 31, 64 envs x 128 steps, 32 minibatches x 8
#   epochs, Table 2, evaluation every 20 updates x 20 episodes per task, seeds 1 2 3); phase 1 at C_LOW (the pilot's
#   plateauing COM) and C_STAR for U/2 updates, phase 2 only the two switched reloads (com{C_LOW}_to_{C_STAR},
#   com{C_STAR}_to_{C_LOW}) to U; the runs continued unchanged are the Fig. 5a runs at the same COM and seed (FIG5A_DIR:
#   same flags, constant learning rate, so their first U/2 updates are phase 1: checked bit for bit in
#   tests/test_jax2d_placement.py). Phase 1 is not run when every Fig. 5a run at C_LOW and C_STAR (of U updates) kept
#   its state at update U/2 (Fig. 5a at SCALE=laptop passes --keep-checkpoints U/2): the reloads start from those.
#   C_LOW, C_STAR and U from the pilot's placement (PLACEMENT) or given. 2 x U/2 updates per seed = 1 run of U:
#   ~0.73 CPU-hours per seed at U = 200, 2.2 CPU-hours for 3 seeds (3.3 at U = 300); twice that if phase 1 must run.
#   RESUME=1 continues.
#   The rule, fixed before the main runs (benchmark/beukman2026_jax2d_rule.py fig3a prints it per seed): per run,
#   final = mean evaluation solve rate of its last three evaluations (updates U-40, U-20, U), averaged over the
#   seeds; raising holds if com{C_LOW}_to_{C_STAR} ends closer to C_STAR's reference than to C_LOW's, lowering if
#   com{C_STAR}_to_{C_LOW} ends closer to C_LOW's than to C_STAR's; not shown if the two references end within 0.05
#   of each other; else yes = both, partly = one, no = neither.
# Environment (see _beukman2026_common.sh): SCALE, RUNS_DIR (runs/beukman2026_fig3a), OUT_DIR, WORKERS, SEEDS, FLAGS,
# PYTHON, DRY_RUN, RESUME; TOTAL (phase-1 steps, 50000000), TOTAL2 (steps at the end of phase 2, 100000000) (paper);
# laptop: PLACEMENT, C_LOW, C_STAR, U, FIG5A_DIR.
RUNS_DIR=${RUNS_DIR:-runs/beukman2026_fig3a}
if [[ "${SCALE:-paper}" == laptop ]]; then
  source "$(dirname "$0")/_beukman2026_jax2d_main.sh"
  FLAGS=${FLAGS:-$JAX2D_SETTING --num-envs 64}
fi
LAPTOP_GRID=1
source "$(dirname "$0")/_beukman2026_common.sh"
COMS=(2 32); OWN=1  # OWN=1: phase 2 also reloads each run with its own COM (the reference)
if [[ "$SCALE" == laptop ]]; then
  [[ -z "${TOTAL2:-}" ]] || die "TOTAL2=$TOTAL2 does not apply at SCALE=laptop: phase 1 ends at U/2 updates, phase 2 at U"
  jax2d_grid C_LOW C_STAR U
  (( U % 2 == 0 )) || die "U=$U: must be even (phase 1 ends at U/2 updates)"
  TOTAL=$(steps_of $((U / 2))); TOTAL2=$(steps_of "$U"); COMS=("$C_LOW" "$C_STAR"); OWN=0
fi
TOTAL=${TOTAL:-50000000}
TOTAL2=${TOTAL2:-100000000}
positive_int TOTAL "$TOTAL"
positive_int TOTAL2 "$TOTAL2"
(( TOTAL2 > TOTAL )) || die "TOTAL2=$TOTAL2 must exceed TOTAL=$TOTAL (the reloaded runs continue phase 1's step count)"
one_update_fits TOTAL "$TOTAL" "$(flag_value num-envs 2048)"
not_in_flags ewma-com exp-name init-from resume seed total-timesteps

# The states phase 2 starts from, one per COM and seed ("COM SEED kept|phase1 CHECKPOINT"): at SCALE=laptop the state
# Fig. 5a's run at that COM and seed kept at update U/2 (--keep-checkpoints; a prefix of a run is bit for bit the
# shorter run, tests/test_jax2d_placement.py), else the final checkpoint of a *finished* phase-1 run
start_states() {
  "$PYTHON" - "$RUNS_DIR" "$KEPT_DIR" "$KEPT_ITERATION" "$KEPT_TOTAL" "${SEEDS[*]}" "${COMS[@]}" <<'PY'
import os, sys
from cleanrl_scaling.utils.rundirs import read_json, run_status
root, kept_dir, kept_it, kept_total, seeds, coms = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), \
    sys.argv[5].split(), sys.argv[6:]
def runs(where):
    for name in sorted(os.listdir(where)) if where and os.path.isdir(where) else []:
        config = read_json(os.path.join(where, name, "config.json"))
        if isinstance(config, dict) and not config.get("args", {}).get("init_from"):
            yield os.path.join(where, name), config["args"]
found = {}
for path, args in runs(kept_dir):  # Fig. 5a's runs of the same budget, finished or not: the state at U/2 is final
    ckpt = os.path.join(path, "checkpoints", f"iteration_{kept_it}.ckpt")
    if int(args.get("total_timesteps", -1)) == kept_total and os.path.exists(ckpt):
        found.setdefault((f"{float(args.get('ewma_com', 0)):g}", str(args.get("seed"))), ("kept", ckpt))
for path, args in runs(root):
    com = f"{float(args.get('ewma_com', 0)):g}"
    ckpt = os.path.join(path, "checkpoints", "latest.ckpt")
    if args.get("exp_name") == f"com{com}" and run_status(path) == "finished" and os.path.exists(ckpt):
        found.setdefault((com, str(args.get("seed"))), ("phase1", ckpt))
for (com, seed), (source, ckpt) in sorted(found.items()):
    if com in coms and seed in seeds:
        print(com, seed, source, ckpt)
PY
}
KEPT_DIR=; KEPT_ITERATION=0; KEPT_TOTAL=0; KEPT=0
if [[ "$SCALE" == laptop ]]; then
  KEPT_DIR=$FIG5A_DIR; KEPT_ITERATION=$((U / 2)); KEPT_TOTAL=$TOTAL2
  mapfile -t STARTS < <(start_states)
  KEPT=$(printf "%s\n" "${STARTS[@]}" | grep -c "^[^ ]* [^ ]* kept " || true)
fi
if [[ "$SCALE" == laptop ]] && (( KEPT == ${#COMS[@]} * ${#SEEDS[@]} )); then
  echo "# phase 1: not run; every COM and seed starts from the state its Fig. 5a run kept at update $((U / 2)) ($FIG5A_DIR)"
else
  PHASE1=(); for com in "${COMS[@]}"; do PHASE1+=(--flag-set "--exp-name com$com --ewma-com $com"); done
  launch --job-name beukman2026_fig3a_phase1 "${PHASE1[@]}" -- --total-timesteps "$TOTAL"
  mapfile -t STARTS < <(start_states)
fi

# Phase 2: one reload per start state and COM, its own included (OWN=1; interrupted runs are not reloaded)
RELOADS=()
for start in "${STARTS[@]}"; do
  read -r com seed _ ckpt <<< "$start"
  for new in "${COMS[@]}"; do  # its own COM too (OWN): the reference continuation the switched runs are compared with
    [[ "$new" != "$com" || "$OWN" == 1 ]] && \
      RELOADS+=("--init-from $(printf %q "$ckpt") --ewma-com $new --seed $seed --exp-name com${com}_to_$new")
  done
done
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

if [[ "$SCALE" == laptop ]]; then  # the references are Fig. 5a's runs; the phase-1 runs are their first halves
  [[ -z "${DRY_RUN:-}" && -z "${SLURM:-}" ]] || exit 0
  [[ -d "$RUNS_DIR/reloaded" && -d "$FIG5A_DIR" ]] || { echo "# Fig. 3a draws once the reloads ($RUNS_DIR/reloaded) \
and Fig. 5a's runs (FIG5A_DIR=$FIG5A_DIR) exist"; exit 0; }
  LEGEND=(--legend-title "COM (starting COM)" --relabel "ppo_ewma_jax2d $C_LOW->$C_LOW" --relabel "ppo_ewma_jax2d $C_STAR->$C_STAR"
          --relabel "com${C_LOW}_to_$C_STAR $C_STAR->$C_STAR ($C_LOW)" --style "$C_STAR ($C_LOW)=--"
          --relabel "com${C_STAR}_to_$C_LOW $C_LOW->$C_LOW ($C_STAR)" --style "$C_LOW ($C_STAR)=--")
  for metric in solve_rate train_solve_rate; do
    "$PYTHON" -m cleanrl_scaling.utils.aggregate curves "$RUNS_DIR/reloaded" "$FIG5A_DIR" --only-finished \
      --band "$BAND" --filter "ewma_com=$C_LOW,$C_STAR" --metric "charts/$metric" --group-by ewma_com \
      --label "{exp_name} {ewma_com}" --x global_step --join-init-from switch "${LEGEND[@]}" \
      --ylabel "solve rate$([[ $metric == train_solve_rate ]] && echo ", training episodes")" \
      --title "B26 Fig. 3a (Jax2D, laptop): reloaded with another COM ($BAND_TEXT)" \
      --out "$OUT_DIR/beukman2026_fig3a$([[ $metric == train_solve_rate ]] && echo _train)"
  done
  "$PYTHON" benchmark/beukman2026_jax2d_rule.py fig3a "$FIG5A_DIR" --switched "$RUNS_DIR/reloaded" --low "$C_LOW" \
    --star "$C_STAR" --out "$OUT_DIR/beukman2026_fig3a_rule"
  exit 0
fi

# legend as B26 Fig. 3a: COM (starting COM); the reloaded runs dashed
LEGEND=(--legend-title "COM (starting COM)")
for from in "${COMS[@]}"; do
  LEGEND+=(--relabel "com$from->$from")
  for to in "${COMS[@]}"; do LEGEND+=(--relabel "com${from}_to_$to->$to ($from)" --style "$to ($from)=--"); done
done
aggregate curves --band "$BAND" --metric charts/solve_rate --label "{exp_name}" --x global_step "${LEGEND[@]}" \
  --join-init-from switch \
  --ylabel "solve rate" --title "B26 Fig. 3a: reloaded with another COM ($BAND_TEXT)" \
  --out "$OUT_DIR/beukman2026_fig3a"
# the same from every training episode (thousands per update; the evaluation above: --eval-attempts episodes per task)
aggregate curves --band "$BAND" --metric charts/train_solve_rate --label "{exp_name}" --x global_step "${LEGEND[@]}" \
  --join-init-from switch \
  --ylabel "solve rate, training episodes" --title "B26 Fig. 3a from the training episodes ($BAND_TEXT)" \
  --out "$OUT_DIR/beukman2026_fig3a_train"
