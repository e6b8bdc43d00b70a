#!/usr/bin/env bash
# M25 Fig. 1a (ppo_atari_envpool.py): a fixed data budget N x T = 1024 per update, spent on more envs N with a
# shorter rollout T rather than CleanRL's default N=8, T=128. M25 §4. Page: docs/ppo_atari_envpool.md.
# Our choice, not the paper's: the N and T values (our copy of M25 lost them; N x T stays at CleanRL's 1024).
# Runs with --cleanrl-compat (CleanRL's semantics, as M25 ran them); CLEANRL_COMPAT=0 runs the default mode.
RUNS_DIR=${RUNS_DIR:-runs/mayor2025_fig1a}
source "$(dirname "$0")/_mayor2025_common.sh"
launch mayor2025_fig1a --flag-set "--num-envs 8 --num-steps 128" --flag-set "--num-envs 16 --num-steps 64" \
  --flag-set "--num-envs 32 --num-steps 32" -- --total-timesteps "$TOTAL"
figure fig1a "num_envs num_steps" "N={num_envs} T={num_steps}"
