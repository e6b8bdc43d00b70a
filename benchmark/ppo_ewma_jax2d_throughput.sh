#!/usr/bin/env bash
# Throughput and memory of ppo_ewma_jax2d.py: random-action rollout SPS vs training SPS at the
# same num_envs, and the memory of the compiled 256-step training program for a num_envs sweep.
#   bash benchmark/ppo_ewma_jax2d_throughput.sh [--num-envs 128 512] [--mem-envs 2048 8192]
# Takes the machine's quiet lock (/tmp/cleanrl_quiet) for at most 8 minutes (run it once without the lock first to fill the compilation cache); /usr/bin/time -v reports peak RSS.
set -euo pipefail
cd "$(dirname "$0")/.."
until mkdir /tmp/cleanrl_quiet 2>/dev/null; do echo "waiting for /tmp/cleanrl_quiet"; sleep 20; done
trap 'rmdir /tmp/cleanrl_quiet' EXIT
export JAX_COMPILATION_CACHE_DIR=${JAX_COMPILATION_CACHE_DIR:-$PWD/.jax_cache}
TIME=(); [[ -x /usr/bin/time ]] && TIME=(/usr/bin/time -v)
timeout 480 "${TIME[@]}" "${PYTHON:-python}" benchmark/ppo_ewma_jax2d_throughput.py "$@"
