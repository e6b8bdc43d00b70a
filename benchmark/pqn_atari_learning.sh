#!/usr/bin/env bash
# Learning of pqn_atari.py against CleanRL's pqn_atari_envpool.py on one machine: Breakout-v5, 1M steps, 2 seeds of
# ours and 1 of CleanRL's (CLEANRL=path to a checkout; its script is patched in OUT for envpool 1.x, never committed),
# all started at once with one thread each. Rerun the same command to continue after an interruption, or add
# --summary-only to print the table. ~3.5 CPU-hours on the 2-core machine (docs/pqn_atari.md#learning).
set -euo pipefail
cd "$(dirname "$0")/.."
python benchmark/pqn_atari_learning.py ${CLEANRL:+--cleanrl "$CLEANRL"} --out "${OUT:-runs/pqn_learning}" "$@"
