# Sourced by ppo_procgen_throughput.sh and ppo_procgen_learning.sh: CleanRL's ppo_procgen.py needs the old gym API
# (gym 0.23: 4-tuple step, its NormalizeReward wrapper); it runs, unpatched, in its own venv made here, outside the
# repository (default /tmp/cleanrl_procgen_venv), with the minimal set below (torch and numpy at our pins; procgen and
# gym3 come with procgen-mirror). CLEANRL=path of a CleanRL checkout (default /tmp/cleanrl); CLEANRL_VENV=the venv.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
CLEANRL=${CLEANRL:-/tmp/cleanrl}
VENV=${CLEANRL_VENV:-/tmp/cleanrl_procgen_venv}
if [[ ! -x "$VENV/bin/python" ]]; then
  python -m venv "$VENV"
  "$VENV/bin/pip" install -q torch==2.13.0 numpy==1.26.4 gym==0.23.1 procgen-mirror==0.10.7 tyro==1.0.16 tensorboard==2.21.0
fi
