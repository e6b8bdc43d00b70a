#!/usr/bin/env bash
# B26 Fig. 10's claim on MuJoCo (a substitute: Isaac Gym has no wheel here and needs a GPU). At the largest N,
# Singla et al.'s choice for many envs, a minibatch of 4 x N samples (few, very large minibatches), against B26's
# recipe, the minibatch size kept at what that rule gives at the 64-env base (4 x 64 = 256 samples) and more
# minibatches. The base itself (64 envs, where both choices are 256) runs as the reference.
# B26 Table 4 (Singla et al.'s Shadow/Allegro Hand settings) where it carries over to an MLP on MuJoCo: horizon
# T = 16, 5 epochs, max grad norm 1.0; gamma 0.99, GAE 0.95, clip 0.2 and entropy 0 are already CleanRL's MuJoCo
# defaults. Not carried over: lr 5e-4 under rl_games' KL-adaptive schedule (this script has none; CleanRL's annealed
# 3e-4 stays), the critic coefficient 4.0 (rl_games scales its value loss differently; 0.5 stays), the bounds loss
# (actions are clipped here), the LSTM.
# Figures: returns against steps (one line per choice at the largest N, and the base); the final-return table is
# in the CSV.
#   SCALE=laptop: N = 1024: 2 tasks x 3 seeds x (base + 2 choices) = 18 runs of 2.1M steps, measured on one core:
#   Ant 10-11 min each (base 11.2, singla 10.0, b26 10.5), Humanoid 16-29 (b26 18, singla 25, base 29); 5.2 CPU-hours
#   (~2.6 h with WORKERS=2).
#   SCALE=paper: N = 4096, 20M steps.
# Page: docs/reproducing/beukman2026_fig10_mujoco.md. Environment: see _mujoco_recipes_common.sh.
source "$(dirname "$0")/_mujoco_recipes_common.sh"
T=16
one_update_fits $((LARGEST * T))
COMMON="--num-steps $T --update-epochs 5 --max-grad-norm 1.0"
launch beukman2026_fig10_mujoco \
  --flag-set "--num-envs $BASE_ENVS --minibatch-size $((4 * BASE_ENVS)) --exp-name base" \
  --flag-set "--num-envs $LARGEST --minibatch-size $((4 * LARGEST)) --exp-name singla" \
  --flag-set "--num-envs $LARGEST --minibatch-size $((4 * BASE_ENVS)) --exp-name b26" -- $COMMON
# the N = 1024 arms in one panel, the 64-env base (on another scale) in its own
aggregate curves beukman2026_fig10_mujoco --filter "num_steps=$T" --filter update_epochs=5 --smooth 10 \
  --metric charts/episodic_return --group-by exp_name num_envs minibatch_size --panel-by num_envs --ncols 2 \
  --label "{exp_name}: N={num_envs}, minibatch {minibatch_size}" --x global_step --ylabel "episodic return" \
  --title "B26 Fig. 10 on MuJoCo: few large minibatches (Singla et al.) against B26's recipe (mean and range)"
