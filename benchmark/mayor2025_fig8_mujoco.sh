#!/usr/bin/env bash
# M25 Fig. 8's claim on MuJoCo (a substitute: Isaac Gym has no wheel here and needs a GPU): more data per update
# helps, and most when it comes from more envs N rather than longer rollouts T. From the 64 x 32 base, the batch grows
# by each factor N/64 of NUM_ENVS_LIST through N (N x 32: 1024 x 32 for x16) or through T (64 x 32N/64: 64 x 512),
# each with the base's 32 minibatches (M25 keeps CleanRL's minibatch count) and the same lr. The N runs are exactly
# the larger-minibatches runs of beukman2026_fig9_mujoco.sh (same flags, same RUNS_DIR: each runs once).
# Figures: returns against steps, one line per N x T; the final return against the batch size, grown through N and
# grown through T.
#   SCALE=laptop: x16 only (NUM_ENVS_LIST "64 1024"): 2 tasks x 3 seeds x 3 settings = 18 runs of 2.1M steps (12
#   shared with Fig. 9); after Fig. 9, 2.25 CPU-hours more (measured: Ant 1.1, Humanoid 1.15; the 64 x 512 runs
#   ~22 min on one core, Humanoid ~20-25); alone, add the base and 1024 x 32 runs of Fig. 9 (about 5 CPU-hours).
#   NUM_ENVS_LIST="64 256 1024" adds the x4 point.
#   SCALE=paper: up to 4096 x 32 and 64 x 2048, 20M steps.
# Page: docs/reproducing/mayor2025_fig8_mujoco.md. Environment: see _mujoco_recipes_common.sh.
source "$(dirname "$0")/_mujoco_recipes_common.sh"
SETS=(--flag-set "--num-envs $BASE_ENVS --num-steps $BASE_STEPS --num-minibatches 32")
STEPS=()
for n in "${NUM_ENVS[@]:1}"; do
  t=$((BASE_STEPS * n / BASE_ENVS)); STEPS+=("$t")
  SETS+=(--flag-set "--num-envs $n --num-steps $BASE_STEPS --num-minibatches 32 --base-num-envs $BASE_ENVS --scaling-recipe larger-minibatches")
  SETS+=(--flag-set "--num-envs $BASE_ENVS --num-steps $t --num-minibatches 32")
done
one_update_fits $((LARGEST * BASE_STEPS))
launch mayor2025_fig8_mujoco "${SETS[@]}" --
ARMS=(--filter "scaling_recipe=none,larger-minibatches" --filter update_epochs=10)  # not Fig. 9's other recipes, not Fig. 10
aggregate curves mayor2025_fig8_mujoco "${ARMS[@]}" --filter "num_steps=$BASE_STEPS,$(IFS=,; echo "${STEPS[*]}")" \
  --metric charts/episodic_return --smooth 10 --group-by num_envs num_steps --label "N={num_envs} x T={num_steps}" \
  --x global_step --title "M25 Fig. 8 on MuJoCo: the batch grown through N or T (mean and range, 3 seeds)"
# both arms on one axis, each line starting from the shared base (N = $BASE_ENVS, T = $BASE_STEPS)
aggregate sweep mayor2025_fig8_mujoco_by_batch "${ARMS[@]}" --metric charts/episodic_return --stat final \
  --x-key batch_size --series "num_steps=$BASE_STEPS:grown through N (T = $BASE_STEPS)" \
  --series "num_envs=$BASE_ENVS:grown through T (N = $BASE_ENVS)" --logx --xlabel "batch N x T" --ylabel "final return" \
  --title "M25 Fig. 8 on MuJoCo: the batch grown through N or through T (mean and range)"
