#!/usr/bin/env bash
# Throughput of ppo_atari_envpool.py: component bound, ours fp32/bf16, CleanRL (given CLEANRL=path to a checkout),
# SPS against --num-envs and peak memory at 256 x 64. Run with nothing else on the machine.
set -euo pipefail
cd "$(dirname "$0")/.."
python benchmark/ppo_atari_throughput.py ${CLEANRL:+--cleanrl "$CLEANRL"} "$@"
