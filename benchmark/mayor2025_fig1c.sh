#!/usr/bin/env bash
# M25 Fig. 1c: more epochs hurt, more envs make up for it (epochs x N, at T = 128). M25 §4.
# Our choice, not the paper's: the epoch counts and N values (our copy of M25 lost them).
# Runs with --cleanrl-compat (CleanRL's semantics, as M25 ran them); CLEANRL_COMPAT=0 runs the default mode.
RUNS_DIR=${RUNS_DIR:-runs/mayor2025_fig1c}
LARGEST_BATCH=4096  # 32 x 128
source "$(dirname "$0")/_mayor2025_common.sh"
launch mayor2025_fig1c --sweep update-epochs=4,8,16 --sweep num-envs=8,16,32 -- --total-timesteps "$TOTAL"
figure fig1c "update_epochs num_envs" "epochs={update_epochs} N={num_envs}"
