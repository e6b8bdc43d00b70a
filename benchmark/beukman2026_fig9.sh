#!/usr/bin/env bash
# B26 Figs. 9, 13, 14 (Jax2D locomotion, ppo_ewma_jax2d.py): the scaling recipes (docs/scaling.md) as num_envs grows from the
# 2048-env base: more minibatches (B26's advice) against larger minibatches and the sqrt lr rule. One set of runs,
# three figures: Fig. 9 charts/solve_rate against steps (one panel per num_envs), Fig. 13 steps per second (the last
# charts/SPS of each run) against num_envs, Fig. 14 the final solve rate against num_envs. Page: docs/ppo_ewma_jax2d.md
# Every run needs at least one update: TOTAL >= (largest num_envs) x 256 (--num-steps, or its value in FLAGS), which
# is checked before anything runs.
# Our choice, not the paper's: the env counts, the budget (200M steps), 5 seeds.
# Scale: the paper's budgets need a GPU; on a CPU lower TOTAL and NUM_ENVS_LIST.
# Environment (see _beukman2026_common.sh): RUNS_DIR (runs/beukman2026_fig9), OUT_DIR, WORKERS, SEEDS, FLAGS, PYTHON,
# DRY_RUN; TOTAL (steps per run, 200000000), NUM_ENVS_LIST ("512 1024 2048 4096 8192 16384").
RUNS_DIR=${RUNS_DIR:-runs/beukman2026_fig9}
source "$(dirname "$0")/_beukman2026_common.sh"
TOTAL=${TOTAL:-200000000}
read -r -a NUM_ENVS_LIST <<< "${NUM_ENVS_LIST:-512 1024 2048 4096 8192 16384}"
positive_int TOTAL "$TOTAL"
for n in "${NUM_ENVS_LIST[@]}"; do positive_int NUM_ENVS_LIST "$n"; done
one_update_fits TOTAL "$TOTAL" "${NUM_ENVS_LIST[@]}"
not_in_flags num-envs scaling-recipe base-num-envs total-timesteps
launch --job-name beukman2026_fig9 --sweep "num-envs=$(IFS=,; echo "${NUM_ENVS_LIST[*]}")" \
  --sweep scaling-recipe=more-minibatches,larger-minibatches,sqrt-lr -- --base-num-envs 2048 --total-timesteps "$TOTAL"
aggregate curves --metric charts/solve_rate --panel-by num_envs --group-by scaling_recipe --label "{scaling_recipe}" \
  --x global_step --ylabel "solve rate" --title "B26 Fig. 9: scaling recipes ($BAND_TEXT)" \
  --out "$OUT_DIR/beukman2026_fig9"
aggregate sweep --metric charts/SPS --stat last --x-key num_envs --group-by scaling_recipe --label "{scaling_recipe}" \
  --logx --xlabel "parallel environments" --ylabel "steps per second" \
  --title "B26 Fig. 13: training steps per second (the Fig. 9 runs)" --out "$OUT_DIR/beukman2026_fig13"
aggregate sweep --metric charts/solve_rate --stat final --x-key num_envs --group-by scaling_recipe \
  --label "{scaling_recipe}" --logx --xlabel "parallel environments" --ylabel "final solve rate" \
  --title "B26 Fig. 14: final solve rate against num_envs (the Fig. 9 runs)" --out "$OUT_DIR/beukman2026_fig14"
