#!/usr/bin/env bash
# The GPU check behind docs/gpu.md, as one command: the machine and its package versions, the torch scripts'
# gpu-marked tests (pytest -m gpu tests/test_gpu.py -k 'not jax'; gpu_jax_check.sh runs the JAX ones), envpool's random-action limit on Breakout, and the SPS of each torch script at
# its defaults (Atari PPO also at 256 envs x 64 steps, each with --tf32 and --no-tf32, with --async-envs and with
# --envpool-async; PQN also
# at 128 envs x 32 steps, without and with --async-envs, and with whole minibatches, --update-chunk-size 0, as Procgen
# at its defaults). Every number goes to
# OUT_DIR/gpu_check.json; logs beside it. About 8 minutes on one H200 with 16 CPU cores: steps past DEADLINE_S
# seconds (default 500) are skipped and marked so, and each step has its own time limit. Where the Atari scripts or
# envpool do not import (a package missing from SITE), it stops after the versions with exit code 2.
#
#   bash benchmark/gpu_check.sh [OUT_DIR]                 OUT_DIR defaults to $OUT, else runs/gpu_check
#   SITE=DIR bash benchmark/gpu_check.sh OUT_DIR          DIR is put first on PYTHONPATH: the packages a CUDA image
#                                                         without a package index lacks (below)
#   bash benchmark/gpu_check.sh --cpu-dry-run OUT_DIR     no GPU: the same steps at tiny sizes on CPU (catches typos;
#                                                         the gpu tests skip, the SPS numbers mean nothing)
#   STEPS="gpu_tests pqn_128x32_whole" bash ...           only these steps: gpu_tests, envpool (the random-action
#                                                         rates) and the SPS runs by their names in the JSON (sps_NAME);
#                                                         default all; a subset where the GPU is lent for minutes
#
# Such a folder is built on a machine with a package index, for the image's Python (3.12), by
# benchmark/gpu_torch_site.sh DIR (tyro, gymnasium, gym 0.26, envpool's Atari and Procgen parts, MuJoCo; PARTS="atari"
# for the Atari part only; an image without tensorboard or pytest needs those too: the scripts write their run
# directory with tensorboard, and the check stops early without it). A script whose environments are missing there is
# skipped by its test and fails its SPS step, and the JSON says which.
set -uo pipefail
cd "$(dirname "$0")/.."

DRY=0
if [ "${1:-}" = "--cpu-dry-run" ]; then DRY=1; shift; fi
SPS_NAMES="atari_default_tf32 atari_default_no_tf32 atari_256x64_tf32 atari_256x64_no_tf32 atari_256x64_async
  atari_256x64_envpool_async pqn_default pqn_128x32 pqn_128x32_whole pqn_async procgen_default procgen_default_whole
  mujoco_default"
STEPS=$(echo ${STEPS:-gpu_tests envpool $SPS_NAMES})
for step in $STEPS; do
  [[ " gpu_tests envpool $(echo $SPS_NAMES) " == *" $step "* ]] \
    || { echo "error: STEPS holds $step; choose among gpu_tests envpool $(echo $SPS_NAMES)" >&2; exit 2; }
done
wanted() {  # wanted STEP: STEP is in STEPS
  [[ " $STEPS " == *" $1 "* ]]
}
OUT_DIR=${1:-${OUT:-runs/gpu_check}}
mkdir -p "$OUT_DIR" || { echo "error: cannot create the output folder $OUT_DIR; pass a writable OUT_DIR" >&2; exit 2; }
OUT_DIR=$(cd "$OUT_DIR" && pwd)
if [ -n "${SITE:-}" ]; then
  [ -d "$SITE" ] || { echo "error: SITE=$SITE is not a folder; pass a folder of the packages the image lacks (header)" >&2; exit 2; }
  export PYTHONPATH="$(cd "$SITE" && pwd)${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export XLA_PYTHON_CLIENT_PREALLOCATE=false  # torch and JAX share the GPU in the test process
DEADLINE_S=${DEADLINE_S:-500}
START=$(date +%s)
RUNS=$(mktemp -d)  # run directories stay off OUT_DIR (only numbers and logs come back)
RESULTS="$OUT_DIR/gpu_check.jsonl"
: > "$RESULTS"
LOG="$OUT_DIR/gpu_check.log"
exec > >(tee -a "$LOG") 2>&1

record() {  # record KEY JSON_VALUE: one line of gpu_check.jsonl
  echo "{\"$1\": $2}" >> "$RESULTS"
}

write_json() {  # the lines of gpu_check.jsonl as one object, with the date and the wall time: gpu_check.json
  python3 - "$RESULTS" "$OUT_DIR/gpu_check.json" "$START" <<'EOF'
import json, sys, time
merged = {}
for line in open(sys.argv[1]):
    merged.update(json.loads(line))
merged["date_utc"] = time.strftime("%Y-%m-%d %H:%M", time.gmtime(int(sys.argv[3])))
merged["wall_seconds"] = round(time.time() - int(sys.argv[3]))
json.dump(merged, open(sys.argv[2], "w"), indent=1)
print(json.dumps(merged, indent=1))
EOF
}

time_left() {  # seconds before DEADLINE_S
  echo $(( DEADLINE_S - ($(date +%s) - START) ))
}

echo "== gpu_check $(date -u +%Y-%m-%dT%H:%M:%SZ) dry_run=$DRY out=$OUT_DIR steps: $STEPS"

# ---- the machine and the versions
echo "== machine"
nvidia-smi 2>&1 | tee "$OUT_DIR/nvidia-smi.txt" || echo "nvidia-smi: not available"
python3 - <<'EOF' | tee "$OUT_DIR/versions.json"
import importlib.metadata as md, json, os, platform
out = {"python": platform.python_version(), "cpu_cores": os.cpu_count(), "cpu": platform.processor() or platform.machine()}
for name in ["torch", "numpy", "envpool", "gymnasium", "ale-py", "mujoco", "tyro", "jax", "jaxlib", "flax", "optax",
             "kinetix-env", "jax-cuda12-plugin", "jax-cuda13-plugin", "tensorboard", "pytest", "pytest-xdist"]:
    try:
        out[name] = md.version(name)
    except md.PackageNotFoundError:
        out[name] = None
try:
    import torch
    out["torch_cuda"] = torch.version.cuda
    out["cuda_available"] = torch.cuda.is_available()
    if torch.cuda.is_available():
        out["gpu"] = torch.cuda.get_device_name(0)
        out["cudnn"] = torch.backends.cudnn.version()
except Exception as e:  # an image without torch still reports the rest
    out["torch_error"] = repr(e)
try:
    import jax
    out["jax_backend"] = jax.default_backend()
    out["jax_devices"] = [str(d) for d in jax.devices()]
except Exception as e:
    out["jax_error"] = repr(e)
print(json.dumps(out, indent=1))
EOF
record versions "$(python3 -c "import json,sys; print(json.dumps(json.load(open(sys.argv[1]))))" "$OUT_DIR/versions.json" 2>/dev/null || echo null)"

# ---- the Atari scripts and envpool import here: else every later step would fail the same way, minutes each
if ! python3 -c "from cleanrl_scaling import ppo_atari_envpool as m, pqn_atari; m.import_envpool(); import tensorboard.summary"; then
  echo "error: the Atari scripts, envpool or tensorboard do not import here (above): a package missing from SITE? Stopping" >&2
  record preflight '"failed: the Atari scripts, envpool or tensorboard do not import (log: gpu_check.log)"'
  write_json > /dev/null
  exit 2
fi

# ---- the torch scripts' gpu-marked tests (the ini's addopts are replaced: an image may lack pytest-xdist); the JAX
# scripts' are benchmark/gpu_jax_check.sh's, which budgets their minutes of tracing
if wanted gpu_tests; then
  echo "== pytest -m gpu tests/test_gpu.py -k 'not jax'"
  if python3 -c "import pytest" 2>/dev/null; then
    timeout 330 python3 -m pytest -p no:cacheprovider -o addopts="" -ra -v --durations=0 -m gpu tests/test_gpu.py \
      -k "not jax" --junitxml="$OUT_DIR/gpu_tests.xml" 2>&1 | tee "$OUT_DIR/gpu_tests.txt"
    code=${PIPESTATUS[0]}
    summary=$(tail -n 1 "$OUT_DIR/gpu_tests.txt" | python3 -c 'import json,sys; print(json.dumps(sys.stdin.read().strip()))')
    record gpu_tests "{\"exit_code\": $code, \"summary\": $summary}"
  else
    echo "pytest is not installed: add it to SITE (header)"; record gpu_tests '"skipped: no pytest"'
  fi
fi

# ---- envpool's random-action limit (synchronous steps with the scripts' wrappers), beside the SPS below
if wanted envpool; then
  echo "== envpool random-action steps/s, Breakout-v5"
  for n in 8 256; do
    [ "$DRY" = 1 ] && [ "$n" = 256 ] && n=16
    timeout 120 python3 - "$n" "$DRY" <<'EOF' | tee -a "$RESULTS.tmp"
import json, sys, time
import numpy as np
from cleanrl_scaling.ppo_atari_envpool import make_envs
n, dry = int(sys.argv[1]), sys.argv[2] == "1"
envs = make_envs("Breakout-v5", n, seed=1)
envs.reset()
rng = np.random.default_rng(0)
steps = 20 if dry else max(200, 200_000 // n)
for i in range(steps + 20):
    if i == 20:  # after a warm-up
        start = time.perf_counter()
    envs.step(rng.integers(0, envs.action_space.n, n))
print(json.dumps({f"envpool_random_sps_{n}": round(steps * n / (time.perf_counter() - start))}))
EOF
  done
  cat "$RESULTS.tmp" >> "$RESULTS" 2>/dev/null; rm -f "$RESULTS.tmp"
fi

# ---- SPS of each torch script: summary.json's SPS excludes the first iteration (compile, warm-up); also the medians
# of its time/* tags over the later iterations (rollout, env waits, update)
sps_run() {  # sps_run NAME SCRIPT ITERATIONS FLAGS...: ITERATIONS at the script's batch, the SPS recorded as NAME
  local name=$1 script=$2 iterations=$3; shift 3
  wanted "$name" || return 0
  if [ "$(time_left)" -lt 30 ]; then
    echo "-- $name: skipped (past DEADLINE_S)"; record "sps_$name" '"skipped: past the deadline"'; return
  fi
  local dir="$RUNS/$name" device_flags=(--cuda)
  [ "$DRY" = 1 ] && device_flags=(--no-cuda --no-compile)
  local batch
  batch=$(python3 - "$script" "$@" <<'EOF'
import importlib, sys
m = importlib.import_module(f"cleanrl_scaling.{sys.argv[1]}")
import tyro
a = tyro.cli(m.Args, args=sys.argv[2:])
print(a.num_envs * a.num_steps)
EOF
)
  [ -n "$batch" ] || { record "sps_$name" '"failed: bad flags"'; return; }
  echo "-- $name: $script $* ($iterations iterations of $batch steps)"
  local t0=$(date +%s)
  timeout "$(( $(time_left) < 150 ? $(time_left) : 150 ))" python3 "cleanrl_scaling/$script.py" "${device_flags[@]}" "$@" \
    --total-timesteps $(( iterations * batch )) --progress none --runs-dir "$dir" > "$RUNS/$name.log" 2>&1
  local code=$?
  tail -n 3 "$RUNS/$name.log"
  local summary
  summary=$(ls "$dir"/*/summary.json 2>/dev/null | head -n 1)
  # a finished run counts even if the process then outlived its time limit while closing its envs
  if [ -n "$summary" ] && grep -q '"status": "finished"' "$summary"; then
    record "sps_$name" "$(python3 - "$summary" "$(( $(date +%s) - t0 ))" "$code" <<'EOF'
import json, os, sys
sys.path.insert(0, "benchmark")
from _throughput_common import loop_time_medians
summary, seconds, code = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
run = os.path.dirname(summary)
s, c = json.load(open(summary)), json.load(open(os.path.join(run, "config.json")))
out = {"SPS": round(s["SPS"]), "SPS_with_warmup": round(s["SPS_with_warmup"]), "steps": s["global_step"],
       "seconds": seconds, "exit_code": code, "device": c["device"], "args": " ".join(c["argv"])}
rows = [json.loads(line) for line in open(os.path.join(run, "metrics.jsonl"))]
for name, median in loop_time_medians(rows).items():  # what bounds the loop
    out[f"{name}_seconds_median"] = round(median, 4)
print(json.dumps(out))
EOF
)"
  else
    cp "$RUNS/$name.log" "$OUT_DIR/sps_$name.log"
    grep -m 1 -E "^error|Error" "$RUNS/$name.log" || true
    record "sps_$name" "\"failed: exit $code (log: sps_$name.log)\""
  fi
}

echo "== SPS at the scripts' defaults (the first iteration, which compiles, not counted)"
if [ "$DRY" = 1 ]; then  # tiny sizes on CPU: only that every command runs
  sps_run atari_default_tf32 ppo_atari_envpool 2 --num-envs 4 --num-steps 16
  sps_run atari_default_no_tf32 ppo_atari_envpool 2 --num-envs 4 --num-steps 16 --no-tf32
  sps_run atari_256x64_tf32 ppo_atari_envpool 2 --num-envs 8 --num-steps 16
  sps_run atari_256x64_no_tf32 ppo_atari_envpool 2 --num-envs 8 --num-steps 16 --no-tf32
  sps_run atari_256x64_async ppo_atari_envpool 2 --num-envs 8 --num-steps 16 --async-envs
  sps_run atari_256x64_envpool_async ppo_atari_envpool 2 --num-envs 8 --num-steps 16 --envpool-async
  sps_run pqn_default pqn_atari 2 --num-envs 4 --num-steps 16 --eval-envs 2
  sps_run pqn_128x32 pqn_atari 2 --num-envs 8 --num-steps 16 --eval-envs 2
  sps_run pqn_128x32_whole pqn_atari 2 --num-envs 8 --num-steps 16 --eval-envs 2 --update-chunk-size 0
  sps_run pqn_async pqn_atari 2 --num-envs 8 --num-steps 16 --eval-envs 2 --async-envs
  sps_run procgen_default ppo_procgen 2 --num-envs 2 --num-steps 32 --num-minibatches 2
  sps_run procgen_default_whole ppo_procgen 2 --num-envs 2 --num-steps 32 --num-minibatches 2 --update-chunk-size 0
  sps_run mujoco_default ppo_continuous_mujoco 2 --num-steps 128 --num-minibatches 2 --update-epochs 2
else
  sps_run atari_default_tf32 ppo_atari_envpool 12
  sps_run atari_default_no_tf32 ppo_atari_envpool 12 --no-tf32
  sps_run atari_256x64_tf32 ppo_atari_envpool 8 --num-envs 256 --num-steps 64
  sps_run atari_256x64_no_tf32 ppo_atari_envpool 8 --num-envs 256 --num-steps 64 --no-tf32
  sps_run atari_256x64_async ppo_atari_envpool 8 --num-envs 256 --num-steps 64 --async-envs
  sps_run atari_256x64_envpool_async ppo_atari_envpool 8 --num-envs 256 --num-steps 64 --envpool-async
  sps_run pqn_default pqn_atari 12
  sps_run pqn_128x32 pqn_atari 8 --num-envs 128 --num-steps 32
  sps_run pqn_128x32_whole pqn_atari 8 --num-envs 128 --num-steps 32 --update-chunk-size 0
  sps_run pqn_async pqn_atari 8 --num-envs 128 --num-steps 32 --async-envs
  sps_run procgen_default ppo_procgen 5
  sps_run procgen_default_whole ppo_procgen 5 --update-chunk-size 0
  sps_run mujoco_default ppo_continuous_mujoco 5
fi

# ---- one JSON object for docs/gpu.md
write_json
rm -rf "$RUNS"
echo "== done in $(( $(date +%s) - START )) s: $OUT_DIR/gpu_check.json"
