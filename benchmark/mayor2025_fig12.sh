#!/usr/bin/env bash
# M25 Fig. 12 (§5.3): the discount factor swept under Fig. 1b's batch growth: do the gains of a larger N hold for
# every gamma? Our choice, not the paper's: the gamma values (our copy of M25 lost them; a grid bracketing
# CleanRL's 0.99) and the settings (Fig. 1b's base 8 x 128 against N x 8 = 64 x 128 and T x 8 = 8 x 1024).
# Runs with --cleanrl-compat (CleanRL's semantics, as M25 ran them); CLEANRL_COMPAT=0 runs the default mode.
#   SCALE=paper (default): Atari-10, 5 seeds, 100M steps, gamma in 0.95 0.97 0.99 0.995 0.999: GPU scale.
#   SCALE=laptop: Qbert-v5, 2 seeds, 500k steps, gamma in 0.95 0.99 0.999, 8 x 128 and 64 x 128: 12 runs,
#   about 4 hours on 2 cores.
RUNS_DIR=${RUNS_DIR:-runs/mayor2025_fig12}
SETTINGS=(--flag-set "--num-envs 8 --num-steps 128" --flag-set "--num-envs 64 --num-steps 128"
          --flag-set "--num-envs 8 --num-steps 1024")
if [[ "${SCALE:-paper}" == laptop ]]; then
  GAMES=${GAMES:-Qbert-v5}; SEEDS=${SEEDS:-1 2}; TOTAL=${TOTAL:-500000}; GAMMAS=${GAMMAS:-0.95,0.99,0.999}
  SETTINGS=(--flag-set "--num-envs 8 --num-steps 128" --flag-set "--num-envs 64 --num-steps 128")
fi
LAPTOP_GRID=1
LARGEST_BATCH=8192  # 64 x 128 and 8 x 1024
source "$(dirname "$0")/_mayor2025_common.sh"
GAMMAS=${GAMMAS:-0.95,0.97,0.99,0.995,0.999}
launch mayor2025_fig12 --sweep gamma="$GAMMAS" "${SETTINGS[@]}" -- --total-timesteps "$TOTAL"
figure fig12 "gamma num_envs num_steps" "gamma={gamma} N={num_envs} T={num_steps}"
