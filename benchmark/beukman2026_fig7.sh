#!/usr/bin/env bash
# B26 Fig. 7 (Jax2D locomotion, ppo_ewma_jax2d.py): larger rollout batches tolerate weaker regularisation: (a) envs x
# COM, (b) envs x epsilon, at a fixed number of updates (the x axis is the update, B26), 32 minibatches throughout.
# Page: docs/ppo_ewma_jax2d.md. The figures: charts/solve_rate against the update, one panel per number of envs,
# one line per COM (7a) or epsilon (7b).
# The budget is ITERATIONS updates, so a run at N envs takes N x 256 x ITERATIONS steps (256 = --num-steps, or the
# value in FLAGS); TOTAL does not apply and is refused.
# Our choice, not the paper's: the env counts, COMs, epsilons, ITERATIONS (200), 5 seeds.
# Scale: the paper's budgets need a GPU; on a CPU lower ITERATIONS and NUM_ENVS_LIST.
# Environment (see _beukman2026_common.sh): RUNS_DIR (runs/beukman2026_fig7), OUT_DIR, WORKERS, SEEDS, FLAGS, PYTHON,
# DRY_RUN; ITERATIONS (updates per run, 200), NUM_ENVS_LIST ("16 64 256 1024 2048 8192").
RUNS_DIR=${RUNS_DIR:-runs/beukman2026_fig7}
source "$(dirname "$0")/_beukman2026_common.sh"
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
aggregate curves --filter ewma_com=2,8,32 --metric charts/solve_rate --panel-by num_envs --group-by ewma_com \
  --label "COM {ewma_com}" --x iteration --ylabel "solve rate" \
  --title "B26 Fig. 7a: PPO-EWMA, envs x COM ($BAND_TEXT)" --out "$OUT_DIR/beukman2026_fig7a"
aggregate curves --filter ewma_com=0 --metric charts/solve_rate --panel-by num_envs --group-by clip_coef \
  --label "ε = {clip_coef}" --x iteration --ylabel "solve rate" \
  --title "B26 Fig. 7b: PPO, envs x ε ($BAND_TEXT)" --out "$OUT_DIR/beukman2026_fig7b"
