#!/usr/bin/env bash
# Learning side by side on Procgen: ppo_procgen.py (seeds 1, 2) against CleanRL's ppo_procgen.py (seed 1), starpilot
# easy at 1M steps by default, both at CleanRL's defaults; final returns in one table (docs/ppo_procgen.md).
# CleanRL's script runs unpatched in its own venv (_cleanrl_procgen_venv.sh: CLEANRL, CLEANRL_VENV). Runs go to
# runs/ppo_procgen_learning; a stopped comparison continues where it stopped (ours from checkpoints).
# Cost: each run is hours on one CPU core (IMPALA CNN, 61 updates of 16,384 samples x 3 epochs).
# All runs start at once, one thread each; rerun the same command to continue, or add --summary-only for the table.
# Options: python benchmark/ppo_procgen_learning.py -h (--env-id, --total, --seeds, --cleanrl-seeds); OUT=run dir.
source "$(dirname "$0")/_cleanrl_procgen_venv.sh"
python benchmark/ppo_procgen_learning.py --cleanrl "$CLEANRL" --cleanrl-python "$VENV/bin/python" --out "${OUT:-runs/ppo_procgen_learning}" "$@"
