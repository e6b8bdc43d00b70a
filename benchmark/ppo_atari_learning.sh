#!/usr/bin/env bash
# Learning of ppo_atari_envpool.py against CleanRL's ppo_atari_envpool.py on one machine: Breakout-v5, 1M steps,
# CleanRL's defaults, 3 seeds each of ours (default mode), ours --cleanrl-compat and CleanRL's script
# (CLEANRL=path to a checkout; its script is patched in OUT for envpool 1.x, never committed), all started at once
# with one thread each. Rerun the same command to continue after an interruption (ours resume from their
# checkpoints, an unfinished CleanRL run starts again), or add --summary-only to print the table and the verdicts.
# The rule (fixed before the runs; benchmark/ppo_atari_learning.py and docs/ppo_atari_envpool.md#learning): final =
# mean full-game return of the games ending in the last 10% of the steps; an arm is at parity when the 95% bootstrap
# interval of mean(ours) - mean(CleanRL) over seeds contains 0, behind when it lies below 0 (then the ablation arms
# --arms no-compile no-channels-last run on the same seeds).
set -euo pipefail
cd "$(dirname "$0")/.."
python benchmark/ppo_atari_learning.py ${CLEANRL:+--cleanrl "$CLEANRL"} --out "${OUT:-runs/ppo_atari_learning}" "$@"
