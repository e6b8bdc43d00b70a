#!/usr/bin/env bash
# B26 Figs. 9, 13, 14 on MuJoCo (a substitute domain: B26 ran Jax2D; this is the continuous-control check B26 does not
# have): the scaling recipes (docs/scaling.md) as N grows from the 64-env base of _mujoco_recipes_common.sh.
#   more-minibatches    the base's 64-sample minibatches, N/64 times as many (B26's advice)
#   larger-minibatches  the base's 32 minibatches, each N/64 times larger, same lr
#   sqrt-lr             as larger-minibatches with lr x sqrt(N/64)
#   hybrid              minibatches x 2 (--minibatch-multiplier 2), N/128 times as many, lr x sqrt(2) (B26 App. D's
#                       shape; App. D's x16 would exceed N/64 below 1024 envs)
# --scaling-recipe none is not run apart: the base fixes 32 minibatches, so at every N it resolves to exactly
# larger-minibatches (same minibatch size, count and lr; the `resolved:` line of both shows it). At N = 64 every
# recipe is the base itself, which runs once ("none").
# Figures: returns against steps, one panel per N (Fig. 9); the final return (Fig. 14) and steps per second (Fig. 13,
# the run's last charts/SPS, measured with one core per run) against N, one line per recipe.
#   SCALE=laptop: N = 64 and 1024: 2 tasks x 3 seeds x (1 base + 4 recipes) = 30 runs of 2.1M steps, 12.1
#   CPU-hours measured (Ant 4.8, Humanoid 7.3; ~6 h with WORKERS=2). One core per run: Ant base ~21 min,
#   more-minibatches ~28, hybrid ~19, larger-minibatches and sqrt-lr ~14; Humanoid base ~35, more-minibatches ~35,
#   hybrid ~30, larger-minibatches and sqrt-lr ~21-24.
#   NUM_ENVS_LIST="64 256 1024" adds the middle N (54 runs, ~15 CPU-hours).
#   SCALE=paper: N up to 4096, 20M steps, 78 runs.
# Page: docs/reproducing/beukman2026_fig9_mujoco.md. Environment: see _mujoco_recipes_common.sh.
source "$(dirname "$0")/_mujoco_recipes_common.sh"
RECIPES=(more-minibatches larger-minibatches sqrt-lr hybrid)
one_update_fits $((LARGEST * BASE_STEPS))
SETS=(--flag-set "--num-envs $BASE_ENVS --num-steps $BASE_STEPS --num-minibatches 32")
for n in "${NUM_ENVS[@]:1}"; do
  for recipe in "${RECIPES[@]}"; do
    flags="--num-envs $n --num-steps $BASE_STEPS --num-minibatches 32 --base-num-envs $BASE_ENVS --scaling-recipe $recipe"
    [[ "$recipe" == hybrid ]] && flags+=" --minibatch-multiplier 2"
    SETS+=(--flag-set "$flags")
  done
done
launch beukman2026_fig9_mujoco "${SETS[@]}" --
FILTER=(--filter "num_steps=$BASE_STEPS" --filter "update_epochs=10")  # the Fig. 10 and Fig. 8 runs share RUNS_DIR
aggregate curves beukman2026_fig9_mujoco "${FILTER[@]}" --metric charts/episodic_return --panel-by num_envs --smooth 10 \
  --group-by scaling_recipe --label "{scaling_recipe}" --x global_step \
  --ylabel "episodic return" --title "B26 Fig. 9 on MuJoCo: scaling recipes (mean and range, 3 seeds)"
aggregate sweep beukman2026_fig14_mujoco "${FILTER[@]}" --metric charts/episodic_return --stat final --x-key num_envs \
  --group-by scaling_recipe --label "{scaling_recipe}" --reference-group none --logx --xlabel "parallel environments" \
  --ylabel "final return" --title "B26 Fig. 14 on MuJoCo: final return against N, every recipe from the base (N = 64)"
aggregate sweep beukman2026_fig13_mujoco "${FILTER[@]}" --metric charts/SPS --stat last --x-key num_envs \
  --group-by scaling_recipe --label "{scaling_recipe}" --reference-group none --logx --xlabel "parallel environments" \
  --ylabel "steps per second (one core)" \
  --title "B26 Fig. 13 on MuJoCo: training steps per second against N"
