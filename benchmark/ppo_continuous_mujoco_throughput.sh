#!/usr/bin/env bash
# Throughput of ppo_continuous_mujoco.py vs CleanRL's ppo_continuous_action.py and the component bound.
# Holds the machine's quiet lock (/tmp/cleanrl_quiet) while it runs, so that no other benchmark overlaps.
#   bash benchmark/ppo_continuous_mujoco_throughput.sh --cleanrl /path/to/cleanrl [--quick]
set -euo pipefail
cd "$(dirname "$0")/.."
LOCK=/tmp/cleanrl_quiet
until mkdir "$LOCK" 2>/dev/null; do
  echo "waiting for $LOCK (another benchmark is running)" >&2
  sleep 20
done
trap 'rmdir "$LOCK"' EXIT
python benchmark/ppo_continuous_mujoco_throughput.py "$@"
