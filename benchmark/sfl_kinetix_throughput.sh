#!/usr/bin/env bash
# Throughput, filtering cost, compile time and memory of sfl_kinetix_jax.py:
#   1. sfl_kinetix_throughput.py: random-action rollout SPS vs training SPS at the same num_envs (MLP network,
#      target ratio >= 0.70), compile times, and the share of wall time SFL's filtering takes at the 2048 preset
#      (extrapolated from measured per-level and per-step costs);
#   2. --estimate-memory of the 65,536-env 'm' preset, observations kept as float32 and as bfloat16 (XLA's
#      compiled-memory analysis of one iteration, per device; the target is that it fits in 24 GiB);
#   3. real 2-iteration runs at REAL_ENVS ("256 1024 4096") envs with the 2048 preset's PPO (MLP, small SFL filtering:
#      N = num_envs, L = 64) and their peak RSS (/usr/bin/time -v): the largest that finishes within TIMEOUT (1800 s).
#      Levels are generated 128 per call (--level-batch, a compute knob: the same levels): on this CPU the generator
#      compiled for 128 in minutes and had not finished compiling for 1024 after 22 minutes.
#   bash benchmark/sfl_kinetix_throughput.sh [--num-envs 256 1024] [--env-size s]
# Takes the machine's quiet lock (/tmp/cleanrl_quiet); run it once without the lock first to fill the compilation
# cache (Kinetix's level generator alone takes minutes to compile on a loaded CPU). Page: docs/sfl_kinetix_jax.md
set -euo pipefail
cd "$(dirname "$0")/.."
until mkdir /tmp/cleanrl_quiet 2>/dev/null; do echo "waiting for /tmp/cleanrl_quiet"; sleep 20; done
trap 'rmdir /tmp/cleanrl_quiet' EXIT
export JAX_COMPILATION_CACHE_DIR=${JAX_COMPILATION_CACHE_DIR:-$PWD/.jax_cache}
PYTHON=${PYTHON:-python}
TIMEOUT=${TIMEOUT:-1800}
read -r -a REAL_ENVS <<< "${REAL_ENVS:-256 1024 4096}"
TIME=(); [[ -x /usr/bin/time ]] && TIME=(/usr/bin/time -v)
timeout "$TIMEOUT" "$PYTHON" benchmark/sfl_kinetix_throughput.py "$@"

for dtype in float32 bfloat16; do
  echo; echo "## --estimate-memory: --preset 65536 --env-size m --obs-dtype $dtype, $("$PYTHON" -c 'import jax; print(jax.device_count())') device(s)"
  timeout "$TIMEOUT" "$PYTHON" cleanrl_scaling/sfl_kinetix_jax.py --preset 65536 --env-size m --obs-dtype "$dtype" \
    --estimate-memory | grep -v '^{'
done

echo; echo "## real runs (2 iterations, --preset 2048 PPO, MLP, N = num_envs levels scored for 64 steps)"
echo "| num_envs | finished | wall s | peak RSS (GiB) |"; echo "|---:|---|---:|---:|"
runs_dir=$(mktemp -d)
for n in "${REAL_ENVS[@]}"; do
  log="$runs_dir/$n.log"; t0=$(date +%s); status=yes
  timeout "$TIMEOUT" "${TIME[@]}" "$PYTHON" cleanrl_scaling/sfl_kinetix_jax.py --preset 2048 --network mlp --num-envs "$n" \
    --total-timesteps $((2 * n * 256)) --sfl-num-levels "$n" --sfl-filter-batch "$n" --sfl-buffer-size $((n / 2)) \
    --sfl-rollout-length 64 --level-batch "$((n < 128 ? n : 128))" --eval-random-levels 0 --eval-attempts 1 \
    --diagnostics-every 0 --progress none --runs-dir "$runs_dir" > "$log" 2>&1 || status="no (see $log)"
  rss=$(awk '/Maximum resident set size/ {printf "%.2f", $NF / 2^20}' "$log")
  echo "| $n | $status | $(($(date +%s) - t0)) | ${rss:-?} |"
done
