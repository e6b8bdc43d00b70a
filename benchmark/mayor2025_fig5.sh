#!/usr/bin/env bash
# M25 Fig. 5 (§5.2): a shared Nature-CNN encoder against separate actor and critic encoders, as N grows.
# Our choice, not the paper's: the N values (our copy of M25 lost them).
# Runs with --cleanrl-compat (CleanRL's semantics, as M25 ran them); CLEANRL_COMPAT=0 runs the default mode.
RUNS_DIR=${RUNS_DIR:-runs/mayor2025_fig5}
LARGEST_BATCH=8192  # 64 x 128
source "$(dirname "$0")/_mayor2025_common.sh"
launch mayor2025_fig5 --sweep separate-encoders=false,true --sweep num-envs=8,32,64 -- --total-timesteps "$TOTAL" \
  --diagnostics-every 10
figure fig5 "separate_encoders num_envs" "separate={separate_encoders} N={num_envs}"
