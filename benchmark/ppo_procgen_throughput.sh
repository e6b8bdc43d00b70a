#!/usr/bin/env bash
# Throughput of ppo_procgen.py against CleanRL's ppo_procgen.py, envpool against procgen stepping, peak memory.
# CleanRL's script runs unpatched in its own venv (_cleanrl_procgen_venv.sh: CLEANRL, CLEANRL_VENV).
# Run with nothing else on the machine; compare ratios. Options: python benchmark/ppo_procgen_throughput.py -h
source "$(dirname "$0")/_cleanrl_procgen_venv.sh"
python benchmark/ppo_procgen_throughput.py --cleanrl "$CLEANRL" --cleanrl-python "$VENV/bin/python" "$@"
