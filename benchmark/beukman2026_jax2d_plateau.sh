#!/usr/bin/env bash
# B26 Figs. 1a/5a's plateau tested where it can show (Jax2D locomotion, ppo_ewma_jax2d.py): the Fig. 5a laptop runs at
# COMs 16, 256 and 1024 continued from 200 to 400 updates. B26 §3, Fig. 1a's caption: too low a COM "leads to a
# suboptimal plateau"; §4.1: weak regularization "leads to premature plateaus". At 200 updates COM 16 was still
# rising in 2 of 3 seeds (docs/reproducing/beukman2026_fig1a_fig5a.md), so the plateau was not tested there.
# Page: docs/reproducing/beukman2026_jax2d_plateau.md. The figure: charts/solve_rate against environment steps, one
# line per COM, in the colours of the Fig. 5a page.
# SCALE=laptop only. Our choice, not the paper's: the COMs (C_low = 16, the 200-update runs' best COM 256, C* = 1024),
# the budget (400 updates, 3,276,800 steps), the window and margins of the rule below.
#   The runs: Fig. 5a's laptop setting (benchmark/_beukman2026_jax2d_main.sh: 16 tasks of --task-seed 31, 64 envs x
#   128 steps, 32 minibatches x 8 epochs, B26 Table 2 with its constant learning rate, evaluation every 20 updates x
#   20 episodes per task, diagnostics every 10, seeds 1 2 3) at COMS, UPDATES (400) updates each: 9 runs. A run
#   whose Fig. 5a run (FIG5A_DIR: same COM and seed, 200 updates, finished) kept checkpoints/latest.ckpt continues
#   from it (--init-from: parameters, Adam, theta_prox, RNG key, environments and update count; at the same COM bit
#   for bit the uninterrupted run, tests/test_jax2d_placement.py); without it the run starts over, and its first 200
#   updates repeat the Fig. 5a run's (a prefix of a run is the shorter run, same test).
#   Cost, from the Fig. 5a runs (2,900-3,700 s per 200 updates, one core each): 0.8-1.0 CPU-hours per run continued,
#   1.6-2.1 per run started over: 7-9 CPU-hours for the 9 continued, 14.5-18.5 started over. WORKERS=2 runs two at
#   once, one core each; RESUME=1 continues a stopped run. Every finished run keeps checkpoints/latest.ckpt at its
#   last update (a later extension starts there): keep it outside git (docs/reproducing/runs/README.md).
#   The rule, fixed before the runs (benchmark/beukman2026_jax2d_rule.py plateau prints it per seed): per run, two
#   measures of the gain over its last 80 updates (321-400), each = 80 x a least-squares slope against the update:
#   S_eval over the five evaluations at updates 320, 340, ..., 400 (320 episodes each; its SE from
#   charts/solve_rate_se is reported) and S_train over the pooled training solve rate of the windows 321-340, ...,
#   381-400. A run *plateaus* if both are <= 0.02 (a fall counts: it no longer improves), is *still rising* if both
#   are >= 0.05, else neither. final = mean evaluation of updates 360, 380, 400. COM 16 is *below* in a seed if its
#   final <= the higher of COM 256's and COM 1024's finals - 0.05. Verdict: yes = COM 16 plateaus in the seed mean
#   (both seed-mean gains <= 0.02) and in >= 2 of 3 seeds, and is below in the seed mean and in >= 2 of 3 seeds; no
#   (not shown: still rising) = COM 16 still rising in the seed mean and in >= 2 of 3 seeds (the plateau, if any, is
#   past 400 updates); no (contradicts B26: no premature plateau) = COM 16 plateaus but is not below in the seed
#   mean; otherwise not shown. COMs 256 and 1024's trends are reported, not judged. "Below in the seed mean" reads
#   two ways: the code (committed first) takes the seed mean of each seed's best other COM's final, this text the
#   higher of the two COMs' seed-mean finals (stricter); a verdict the readings disagree on is not shown (the
#   stricter decides: docs/reproducing/index.md).
# Environment (see _beukman2026_common.sh): RUNS_DIR (runs/beukman2026_jax2d_plateau), OUT_DIR, WORKERS, SEEDS, FLAGS,
# PYTHON, DRY_RUN, DRAW_ONLY, RESUME; COMS (16,256,1024: the first is C_low), UPDATES (400), FIG5A_DIR, PLACEMENT (the
# Fig. 5a grid whose colours the figure keeps).
[[ "${SCALE:-paper}" == laptop ]] || {
  echo "error: SCALE=${SCALE:-paper}: this extension runs SCALE=laptop only" >&2; exit 2; }
RUNS_DIR=${RUNS_DIR:-runs/beukman2026_jax2d_plateau}
source "$(dirname "$0")/_beukman2026_jax2d_main.sh"
FLAGS=${FLAGS:-$JAX2D_SETTING --num-envs 64}
COMS=${COMS:-16,256,1024}; UPDATES=${UPDATES:-400}
LAPTOP_GRID=1
source "$(dirname "$0")/_beukman2026_common.sh"
[[ "$UPDATES" =~ ^[0-9]+$ && "$UPDATES" -ge 80 ]] || \
  die "UPDATES=$UPDATES: must be a whole number of updates, at least 80 (the rule reads the last 80)"
[[ "$COMS" =~ ^[0-9.]+(,[0-9.]+)+$ ]] || \
  die "COMS=$COMS: must be two or more comma-separated centers of mass, C_low first, e.g. 16,256,1024"
not_in_flags ewma-com seed total-timesteps init-from exp-name
IFS=, read -r -a C <<< "$COMS"
TOTAL=$(steps_of "$UPDATES")

# "COM SEED CHECKPOINT" of each Fig. 5a run (same flags, fewer updates, finished) that kept its final state
final_states() {
  "$PYTHON" - "$FIG5A_DIR" "$TOTAL" <<'PY'
import os, sys
from cleanrl_scaling.utils.rundirs import read_json, run_status
root, total = sys.argv[1], int(sys.argv[2])
for name in sorted(os.listdir(root)) if os.path.isdir(root) else []:
    path, config = os.path.join(root, name), read_json(os.path.join(root, name, "config.json"))
    args = config.get("args", {}) if isinstance(config, dict) else {}
    ckpt = os.path.join(path, "checkpoints", "latest.ckpt")
    if not args.get("init_from") and int(args.get("total_timesteps", total)) < total and \
            run_status(path) == "finished" and os.path.exists(ckpt):
        print(f"{float(args.get('ewma_com', 0)):g}", args.get("seed"), ckpt)
PY
}
declare -A START=()
while read -r com seed ckpt; do [[ -n "$com" ]] && START["$com $seed"]=$ckpt; done < <(final_states)
POINTS=()
for com in "${C[@]}"; do
  com=$(printf %g "$com")
  for seed in "${SEEDS[@]}"; do
    from=${START["$com $seed"]:-}
    POINTS+=(--flag-set "--ewma-com $com --seed $seed${from:+ --init-from $(printf %q "$from")}")
  done
done
if [[ -z "${DRAW_ONLY:-}" ]]; then
  "$PYTHON" -m cleanrl_scaling.utils.launcher "$SCRIPT" --job-name beukman2026_jax2d_plateau --runs-dir "$RUNS_DIR" \
    --workers "$WORKERS" --skip-finished "${EXTRA[@]}" "${POINTS[@]}" -- --total-timesteps "$TOTAL" "${FLAGS[@]}" \
    --checkpoint-every "$CHECKPOINT_EVERY"
fi
[[ -z "${DRY_RUN:-}" && -z "${SLURM:-}" ]] || exit 0
GRID=$COMS  # the colours of the Fig. 5a page: each COM's place in the placement's grid
[[ -f "$PLACEMENT" ]] && GRID=$("$PYTHON" benchmark/beukman2026_jax2d_rule.py grid "$PLACEMENT" COMS | cut -d= -f2)
PALETTE=$(tr , '\n' <<< "$GRID" | sort -g | xargs printf 'COM %g,' | sed 's/,$//')
aggregate curves --band "$BAND" --filter "total_timesteps=$TOTAL" --metric charts/solve_rate --group-by ewma_com \
  --label "COM {ewma_com}" --x global_step --join-init-from history --palette "$PALETTE" --ylabel "solve rate" \
  --title "B26 Figs. 1a/5a (Jax2D, laptop) at $UPDATES updates: does COM ${C[0]} plateau? ($BAND_TEXT)" \
  --out "$OUT_DIR/beukman2026_jax2d_plateau"
"$PYTHON" benchmark/beukman2026_jax2d_rule.py plateau "$RUNS_DIR" --low "${C[0]}" --others "${C[@]:1}" \
  --updates "$UPDATES" --out "$OUT_DIR/beukman2026_jax2d_plateau_rule"
