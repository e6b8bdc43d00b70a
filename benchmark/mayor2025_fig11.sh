#!/usr/bin/env bash
# M25 Fig. 11 (§5.3): the learning rate scaled with N (sqrt and linear rules in the minibatch-size ratio, at a
# fixed number of minibatches) against the default lr.
# Our choice, not the paper's: the N values (our copy of M25 lost them).
# Runs with --cleanrl-compat (CleanRL's semantics, as M25 ran them); CLEANRL_COMPAT=0 runs the default mode.
RUNS_DIR=${RUNS_DIR:-runs/mayor2025_fig11}
LARGEST_BATCH=8192  # 64 x 128
source "$(dirname "$0")/_mayor2025_common.sh"
launch mayor2025_fig11 --sweep lr-scaling=none,sqrt,linear --sweep num-envs=16,32,64 -- --total-timesteps "$TOTAL"
figure fig11 "lr_scaling num_envs" "lr scaling={lr_scaling} N={num_envs}"
