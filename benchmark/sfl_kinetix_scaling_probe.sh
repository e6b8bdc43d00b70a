#!/usr/bin/env bash
# Host work per update of sfl_kinetix_jax.py against the number of envs, via
# sfl_kinetix_scaling_probe.py:
#   1. N = 1,024, 4,096, 16,384 envs (MLP, 's', 16-step rollouts, 8 forced CPU devices, each N its own process under
#      /usr/bin/time -v): wall, device (inside the compiled programs) and host (wall - device) time per update and peak
#      RSS; PASS when host time at 16k is within 1.5x of host time at 1k while device time grows;
#   2. the filtering share of wall time at the 2048, 8192, 65536 and 1m presets scaled down to 64 envs.
#   bash benchmark/sfl_kinetix_scaling_probe.sh [--num-envs 1024 4096 16384] [--skip-share] [--skip-scaling]
#       [--presets 2048 8192 65536 1m]
# On the shared 2-core machine with a warm compilation cache: part 1 about 45 minutes, part 2 about 70 (55 for the
# last three presets under load 9-15). Takes the machine's quiet lock
# (/tmp/cleanrl_quiet). Page: docs/sfl_kinetix_jax.md ("Host work at scale: the scaling probe")
set -euo pipefail
cd "$(dirname "$0")/.."
until mkdir /tmp/cleanrl_quiet 2>/dev/null; do echo "waiting for /tmp/cleanrl_quiet"; sleep 20; done
trap 'rmdir /tmp/cleanrl_quiet' EXIT
export JAX_COMPILATION_CACHE_DIR=${JAX_COMPILATION_CACHE_DIR:-$PWD/.jax_cache}
"${PYTHON:-python}" benchmark/sfl_kinetix_scaling_probe.py "$@"
