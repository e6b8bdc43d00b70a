#!/usr/bin/env bash
# Learning of ppo_atari_envpool.py against CleanRL's ppo_atari_envpool.py on one machine (CLEANRL=path to a
# checkout; its script is patched in OUT for envpool 1.x, never committed), every run on one thread, at most
# --parallel K at once (default: the cores), on the CPU (--cuda: both programs on the GPU).
#   bash benchmark/ppo_atari_learning.sh            # the Breakout pilot: 1M steps, 3 seeds of ours (default mode),
#                                                   # ours --cleanrl-compat and CleanRL's script
#   bash benchmark/ppo_atari_learning.sh --study    # the five-game study: Breakout, SpaceInvaders, Amidar,
#                                                   # KungFuMaster, Qbert; seeds 11-20; OUT=runs/ppo_atari_study
# Rerun the same command to continue after an interruption (ours resume from their checkpoints, an unfinished
# CleanRL run starts again), add --summary-only for the tables and the verdicts; DRY_RUN=1 prints the commands.
# The rules (fixed before the runs) are in benchmark/ppo_atari_learning.py's header and on
# docs/ppo_atari_envpool.md#learning; the study's seeds per game: benchmark/ppo_atari_learning_design.py.
set -euo pipefail
cd "$(dirname "$0")/.."
python benchmark/ppo_atari_learning.py ${CLEANRL:+--cleanrl "$CLEANRL"} ${OUT:+--out "$OUT"} ${DRY_RUN:+--dry-run} "$@"
