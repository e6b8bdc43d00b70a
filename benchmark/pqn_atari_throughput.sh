#!/usr/bin/env bash
# Throughput of pqn_atari.py: ours fp32/bf16 (with and without the evaluation envs), the purejaxql preset with its
# component bound and peak RSS at 128 x 32, and CleanRL's pqn_atari_envpool.py (given CLEANRL=path to a checkout,
# patched at run time in a temporary copy, never committed). Run with nothing else on the machine.
set -euo pipefail
cd "$(dirname "$0")/.."
python benchmark/pqn_atari_throughput.py ${CLEANRL:+--cleanrl "$CLEANRL"} "$@"
