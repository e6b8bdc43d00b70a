#!/usr/bin/env bash
# B26 on Jax2D, the laptop design's pilot (ppo_ewma_jax2d.py): a few short runs on a task set the main runs do not use, to
# place the main runs' COM grid (Figs. 5a/1a/2b/2c, 7a, 3a) so that it brackets the best COM under B26's inner loop,
# with a COM that plateaus (learns, then stops) below it and one still rising slowly at the end above it (B26 §4.1).
# Design and the main runs' rules: docs/reproducing/beukman2026_jax2d_design.md. The figure: charts/train_solve_rate
# (and the evaluation's charts/solve_rate, the KL to the behaviour policy) against environment steps, one line per arm.
# Every choice below is ours, not the paper's (B26 gives no COM grid, and runs 512 tasks, 2048 envs x 256 steps, 5
# seeds on a GPU):
#   - B26's inner loop: 32 minibatches x 8 epochs (256 minibatch steps per update, the unit of the COM), B26 Table 2's
#     other values (lr 3e-4 constant, gamma 0.995, lambda 0.9, clip 0.2, max grad norm 0.5, ent 0.01, vf 0.5).
#   - the first 16 tasks of --task-seed PILOT_TASK_SEED (152), chosen from the layouts before any run: the main runs
#     use seed 31's first 16 (whose first 8 are the earlier laptop pages'); among seeds 0-299, 152's first 16 tasks
#     start, on average, as far from their goals as 31's (2.242 against 2.243; the design page's criterion).
#   - 64 envs x 128 steps (8,192 steps per update, minibatches of 256).
#   - COMs 4, 16, 64, 256, 1024 (x4 apart): COM 256 is about one update old, as plain PPO's behaviour policy (128
#     minibatch steps old on average); the 8 x 8 laptop runs' collapse (COM 1), plateau (COM 4) and best (16-64, one
#     update = 64 steps there) map to about 4, 16 and 64-256 here; 1024 (four updates old) is the "too high" side.
#   - plain PPO (COM 0) at epsilon 0.2 (Table 2) and 0.8 (weak regularisation, Fig. 5b's plateau side): where PPO
#     sits on the COM scale, and whether one epsilon grid could be placed from the same pilot (B26 App. B).
#   - one seed; 1,638,400 steps (200 updates); evaluation every 40 updates with 10 sampled episodes per task
#     (--eval-attempts 10: 160 episodes, standard error <= 0.04; the decisions use the training episodes, pooled
#     over 20-update windows), diagnostics (KL to the behaviour policy, DDR, gradient norm) every 20 updates.
# Cost, measured on this 2-core machine under load 7-16 (docs/reproducing/beukman2026_jax2d_design.md#cost): a plain
# update 8.8 CPU-s, a probed (diagnostics) update +5-10 CPU-s, an evaluation 0.17 CPU-s per episode (~30 for 10
# attempts), start-up and compilation ~100 CPU-s: ~2,110 CPU-s (~0.6 CPU-hours) per run, 7 runs ~4.1 CPU-hours
# (EPSILONS=0.2: 3.5). WORKERS=2 (one core per run): four rounds of two, ~2.5 hours of wall time on an idle machine,
# about twice that beside the load measured.
# How its numbers place the main grid (the rule, written before the pilot runs): per run, the training solve rate
# over 20-update windows; W1 = updates 1-20, MID = 81-100, FINAL = 181-200, BEST = its highest window. C* = the COM
# with the highest FINAL. A COM below C* *plateaus* if BEST >= W1 + 0.03 (it learned), FINAL - MID <= 0.01 (it
# stopped), FINAL >= BEST - 0.05 (it did not fall back) and FINAL <= FINAL(C*) - 0.05; it *collapsed* if BEST < W1 +
# 0.03. A COM above C* is *too high* if FINAL <= FINAL(C*) - 0.05 and FINAL - MID > 0.01 (still rising). Main COM
# grid = x4 steps from the highest plateauing COM (C_low) to the lowest too-high COM (C_high); an end the pilot did
# not bracket (C* at the grid's top, or no COM too high; no COM plateaued) is extended by one x4 step (x2 above the
# highest collapsing COM when nothing plateaued), and the page says the pilot did not bracket it. Main budget = 200
# updates, 300 if C_low's FINAL - MID > 0.005 (still creeping at 200). Fig. 3a: C_low and C*. Fig. 5b (epsilons)
# runs only if epsilon 0.8 plateaus against epsilon 0.2 by the same test.
# After the figures, benchmark/beukman2026_jax2d_placement.py applies this rule to the runs and prints the placement
# ($OUT_DIR/beukman2026_jax2d_placement.md, .csv, and .json for the main figure scripts); until every run has
# finished 200 updates it prints why it cannot yet (the figures still stand).
# Environment (see _beukman2026_common.sh): SCALE (laptop only), RUNS_DIR (runs/beukman2026_jax2d_pilot), OUT_DIR,
# WORKERS, SEEDS (1), FLAGS, PYTHON, DRY_RUN, RESUME; TOTAL (steps per run), COMS and EPSILONS (comma-separated),
# PILOT_TASK_SEED.
[[ "${SCALE:-paper}" == laptop ]] || { echo "error: SCALE=${SCALE:-paper}: this pilot runs SCALE=laptop only" >&2; exit 2; }
RUNS_DIR=${RUNS_DIR:-runs/beukman2026_jax2d_pilot}
SEEDS=${SEEDS:-1}; BAND=${BAND:-none}; TOTAL=${TOTAL:-1638400}; COMS=${COMS:-4,16,64,256,1024}
EPSILONS=${EPSILONS-0.2,0.8}; PILOT_TASK_SEED=${PILOT_TASK_SEED:-152}
FLAGS=${FLAGS:---num-tasks 16 --num-envs 64 --num-steps 128 --num-minibatches 32 --update-epochs 8 --eval-every 40 --eval-attempts 10 --diagnostics-every 20}
LAPTOP_GRID=1
source "$(dirname "$0")/_beukman2026_common.sh"
positive_int TOTAL "$TOTAL"
[[ "$PILOT_TASK_SEED" =~ ^[0-9]+$ && "$PILOT_TASK_SEED" != 31 ]] || \
  die "PILOT_TASK_SEED=$PILOT_TASK_SEED: must be a task seed the main runs do not use (a whole number, not 31)"
[[ "$COMS" =~ ^[0-9.]+(,[0-9.]+)+$ ]] || die "COMS=$COMS: must be two or more comma-separated centers of mass, e.g. 4,64,1024"
[[ "$EPSILONS" =~ ^([0-9]*\.?[0-9]+(,[0-9]*\.?[0-9]+)*)?$ ]] || die "EPSILONS=$EPSILONS: must be comma-separated clipping epsilons (or empty)"
one_update_fits TOTAL "$TOTAL" "$(flag_value num-envs 2048)"
not_in_flags ewma-com clip-coef task-seed total-timesteps
ARMS=(); IFS=, read -r -a C <<< "$COMS"; IFS=, read -r -a E <<< "$EPSILONS"
for com in "${C[@]}"; do ARMS+=(--flag-set "--ewma-com $com"); done
for eps in "${E[@]}"; do ARMS+=(--flag-set "--clip-coef $eps"); done  # COM 0: plain PPO
launch --job-name beukman2026_jax2d_pilot "${ARMS[@]}" -- --task-seed "$PILOT_TASK_SEED" --total-timesteps "$TOTAL"
LABEL=(--label "COM {ewma_com}, ε {clip_coef}")  # COM 0 is plain PPO: named so in the legend
for eps in "${E[@]}"; do LABEL+=(--relabel "COM 0, ε $(printf %g "$eps")->PPO, ε $(printf %g "$eps")"); done
aggregate curves --metric charts/train_solve_rate --group-by ewma_com clip_coef "${LABEL[@]}" --x global_step \
  --smooth 20 --ylabel "solve rate (training, 20-update mean)" \
  --title "B26 on Jax2D, pilot (task seed $PILOT_TASK_SEED): COM and ε" --out "$OUT_DIR/beukman2026_jax2d_pilot"
aggregate curves --metric charts/solve_rate --group-by ewma_com clip_coef "${LABEL[@]}" --x global_step \
  --ylabel "solve rate (evaluation)" --title "B26 on Jax2D, pilot: evaluation solve rate" \
  --out "$OUT_DIR/beukman2026_jax2d_pilot_eval"
aggregate curves --metric diagnostics/kl_behavior --group-by ewma_com clip_coef "${LABEL[@]}" --x global_step --logy \
  --ylabel "KL(behaviour || after the update)" --title "B26 on Jax2D, pilot: KL to the behaviour policy" \
  --out "$OUT_DIR/beukman2026_jax2d_pilot_kl"
[[ -n "${DRY_RUN:-}" || -n "${SLURM:-}" ]] && exit 0  # nothing ran yet: nothing to place
"$PYTHON" benchmark/beukman2026_jax2d_placement.py "$RUNS_DIR" --out "$OUT_DIR/beukman2026_jax2d_placement" || {
  status=$?  # 2: the runs cannot be placed yet (the line above says why); anything else is a failure
  [[ $status == 2 ]] || exit $status
  echo "no placement yet; the figures above are drawn" >&2
}
