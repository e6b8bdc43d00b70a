#!/usr/bin/env bash
# Throughput of ppo_procgen.py against CleanRL's ppo_procgen.py, envpool against procgen stepping, peak memory.
# CleanRL's script needs the old gym API (gym 0.23: 4-tuple step, its NormalizeReward wrapper); it runs, unpatched,
# in its own venv that this script makes outside the repository (default /tmp/cleanrl_procgen_venv) with the
# minimal set below (torch and numpy at our pins; procgen and gym3 come with procgen-mirror).
# CLEANRL=path of a CleanRL checkout (default /tmp/cleanrl); CLEANRL_VENV=where the venv goes.
# Run with nothing else on the machine; compare ratios. Options: python benchmark/ppo_procgen_throughput.py -h
set -euo pipefail
cd "$(dirname "$0")/.."
CLEANRL=${CLEANRL:-/tmp/cleanrl}
VENV=${CLEANRL_VENV:-/tmp/cleanrl_procgen_venv}
if [[ ! -x "$VENV/bin/python" ]]; then
  python -m venv "$VENV"
  "$VENV/bin/pip" install -q torch==2.13.0 numpy==1.26.4 gym==0.23.1 procgen-mirror==0.10.7 tyro==1.0.16 tensorboard==2.21.0
fi
python benchmark/ppo_procgen_throughput.py --cleanrl "$CLEANRL" --cleanrl-python "$VENV/bin/python" "$@"
