#!/usr/bin/env bash
# B26 Fig. 7 (Jax2D locomotion, ppo_ewma_jax2d.py): larger rollout batches tolerate weaker regularisation: (a) envs x
# COM, (b) envs x epsilon, at a fixed number of updates (the x axis is the update, B26), 32 minibatches throughout.
# Page: docs/ppo_ewma_jax2d.md. The figures: charts/solve_rate against the update, one panel per number of envs on one
# y scale, one line per COM (7a) or epsilon (7b).
# The budget is ITERATIONS updates, so a run at N envs takes N x 256 x ITERATIONS steps (256 = --num-steps, or the
# value in FLAGS); TOTAL does not apply and is refused.
# Our choice, not the paper's: the env counts, COMs, epsilons, ITERATIONS (200), 5 seeds.
# Scale: the paper's budgets need a GPU; on a CPU lower ITERATIONS and NUM_ENVS_LIST.
#   SCALE=laptop (docs/reproducing/beukman2026_jax2d_design.md): Fig. 7a only, N = 16 envs (2,048 steps
#   per update, 32 minibatches of 64) against N = 64 (the Fig. 5a laptop runs, read from FIG5A_DIR, not rerun), at a
#   weak COM C_STAR/4 and a strong one C_STAR, U updates each (C_STAR and U from the pilot's placement, PLACEMENT, or
#   given); Fig. 5a's setting otherwise (benchmark/_beukman2026_jax2d_main.sh), seeds 1 2 3; x axis = the update.
#   New runs: 2 COMs x 3 seeds at N = 16, ~0.38 CPU-hours each at U = 200 (the evaluation, which does not shrink
#   with N, is ~40% of it): ~2.3 CPU-hours (3.3 at U = 300). Fig. 7b (epsilon) and N = 256 are left out. RESUME=1.
#   The rule, fixed before the main runs (benchmark/beukman2026_jax2d_rule.py fig7a prints it per seed): per run,
#   final = mean evaluation solve rate of its last three evaluations; per seed, gap(N) = final(C_STAR) -
#   final(C_STAR/4) at N envs and d = gap(16) - gap(64); yes if d >= 0.05 in the seed mean and in >= 2 of 3 seeds
#   (the smaller batch is hurt more by the weak COM); no (against B26) if the mean d <= -0.05; otherwise not shown.
# Environment (see _beukman2026_common.sh): SCALE, RUNS_DIR (runs/beukman2026_fig7), OUT_DIR, WORKERS, SEEDS, FLAGS,
# PYTHON, DRY_RUN, RESUME; ITERATIONS (updates per run, 200), NUM_ENVS_LIST ("16 64 256 1024 2048 8192"); laptop:
# PLACEMENT, C_STAR, U, FIG5A_DIR.
RUNS_DIR=${RUNS_DIR:-runs/beukman2026_fig7}
if [[ "${SCALE:-paper}" == laptop ]]; then
  source "$(dirname "$0")/_beukman2026_jax2d_main.sh"
  FLAGS=${FLAGS:-$JAX2D_SETTING}  # --num-envs is the grid's
fi
LAPTOP_GRID=1
source "$(dirname "$0")/_beukman2026_common.sh"
if [[ "$SCALE" == laptop ]]; then
  jax2d_grid C_STAR U
  not_in_flags num-envs ewma-com clip-coef total-timesteps
  WEAK=$(awk "BEGIN {printf \"%g\", $C_STAR / 4}")  # the weak COM: a quarter of C* (our choice)
  launch --job-name beukman2026_fig7_com --sweep "ewma-com=$WEAK,$C_STAR" -- --num-envs 16 \
    --total-timesteps "$((16 * $(flag_value num-steps 256) * U))"
  [[ -z "${DRY_RUN:-}" && -z "${SLURM:-}" ]] || exit 0
  [[ -d "$FIG5A_DIR" ]] || { echo "# Fig. 7a: its N = 64 arms are Fig. 5a's runs, and FIG5A_DIR=$FIG5A_DIR does not exist \
yet; draw again (DRAW_ONLY=1) once they have finished"; exit 0; }
  "$PYTHON" -m cleanrl_scaling.utils.aggregate curves "$RUNS_DIR" "$FIG5A_DIR" --only-finished --band "$BAND" \
    --filter "ewma_com=$WEAK,$C_STAR" --filter num_envs=16,64 --metric charts/solve_rate --panel-by num_envs --sharey \
    --group-by ewma_com --label "COM {ewma_com}" --x iteration --ylabel "solve rate" \
    --title "B26 Fig. 7a (Jax2D, laptop): envs x COM ($BAND_TEXT)" --out "$OUT_DIR/beukman2026_fig7a"
  "$PYTHON" benchmark/beukman2026_jax2d_rule.py fig7a "$RUNS_DIR" "$FIG5A_DIR" --weak "$WEAK" --strong "$C_STAR" \
    --out "$OUT_DIR/beukman2026_fig7a_rule"
  exit 0
fi
[[ -z "${TOTAL:-}" ]] || die "TOTAL=$TOTAL does not apply: Fig. 7 fixes the number of updates; set ITERATIONS instead"
ITERATIONS=${ITERATIONS:-200}
read -r -a NUM_ENVS_LIST <<< "${NUM_ENVS_LIST:-16 64 256 1024 2048 8192}"
positive_int ITERATIONS "$ITERATIONS"
not_in_flags num-envs ewma-com clip-coef total-timesteps
STEPS=$(flag_value num-steps 256)
BUDGETS=(); for n in "${NUM_ENVS_LIST[@]}"; do
  positive_int NUM_ENVS_LIST "$n"
  BUDGETS+=(--flag-set "--num-envs $n --total-timesteps $((n * STEPS * ITERATIONS))")
done
launch --job-name beukman2026_fig7_com "${BUDGETS[@]}" --sweep ewma-com=2,8,32 -- --num-minibatches 32
launch --job-name beukman2026_fig7_eps "${BUDGETS[@]}" --sweep clip-coef=0.1,0.2,0.4,0.6 -- --num-minibatches 32
aggregate curves --filter ewma_com=2,8,32 --metric charts/solve_rate --panel-by num_envs --sharey --group-by ewma_com \
  --label "COM {ewma_com}" --x iteration --ylabel "solve rate" \
  --title "B26 Fig. 7a: PPO-EWMA, envs x COM ($BAND_TEXT)" --out "$OUT_DIR/beukman2026_fig7a"
aggregate curves --filter ewma_com=0 --metric charts/solve_rate --panel-by num_envs --sharey --group-by clip_coef \
  --label "ε = {clip_coef}" --x iteration --ylabel "solve rate" \
  --title "B26 Fig. 7b: PPO, envs x ε ($BAND_TEXT)" --out "$OUT_DIR/beukman2026_fig7b"
