#!/usr/bin/env bash
# The JAX side of the GPU check behind docs/gpu.md, as one command: the machine, the versions and JAX's devices, then
# per script run its SPS (summary.json's, which leaves out the first chunk: compile and warm-up) and the most device
# memory it held (summary.json's peak_device_bytes), in this order, the most wanted first:
#   1. ppo_ewma_jax2d.py at its defaults (2048 envs x 256 steps), 12 updates;
#   2. sfl_kinetix_jax.py --preset 2048: --estimate-memory, then 8 updates; the run's peak against the estimate;
#   3. ppo_ewma_jax2d.py at the laptop figures' Jax2D setting (JAX2D_SETTING of benchmark/_beukman2026_jax2d_main.sh)
#      with B26's 2048 envs (B26 Table 2), 12 updates;
#   4. sfl_kinetix_jax.py at one GPU's share of the 1m preset (B26 App. D: 1M envs on 128 GPUs, 8,192 envs each):
#      its per-device shapes on one device (below), --estimate-memory, then 4 updates; the peak against the estimate;
#   5. the JAX gpu tests (pytest -m gpu tests/test_gpu.py -k jax).
# First of all, and on a dry run too, the GPU's command lines pass the scripts' flag checks (the JSON's "flags"); where
# the scripts do not import (a package missing from SITE), only the versions step runs, and the check exits 2.
# Every number goes to OUT_DIR/gpu_jax_check.json; logs beside it. Steps past DEADLINE_S seconds (default 530, so
# the whole stays under 9 minutes) are skipped and marked so; each step has its own time limit. The SFL steps'
# limits are minutes: on one H200 (2026-11-29) sfl_kinetix_jax.py at 8,192 envs was still tracing and compiling,
# before its first update, when stopped at 2 minutes; give each SFL step a GPU call of its own (STEPS=...) where a
# call may take 10 minutes. JAX starts without preallocating (XLA_PYTHON_CLIENT_PREALLOCATE=false), so the peak is
# the run's own, not 75% of the GPU (https://docs.jax.dev/en/latest/gpu_memory_allocation.html). The short runs
# never evaluate (--eval-every 0 --no-final-eval): their seconds and peak are training's alone, and the SFL runs
# never generate evaluation levels (over a minute of tracing and compiling at 8,192 envs).
#
#   bash benchmark/gpu_jax_check.sh [OUT_DIR]               OUT_DIR defaults to $OUT, else runs/gpu_jax_check
#   SITE=DIR bash benchmark/gpu_jax_check.sh OUT_DIR        DIR, put first on PYTHONPATH: the packages an image
#                                                           without a package index lacks (bash benchmark/gpu_site.sh
#                                                           DIR; docs/gpu.md, Without a package index)
#   STEPS="sfl_1m_per_gpu gpu_tests" bash ...               only these steps (names as in the JSON), e.g. a rerun of
#                                                           what the deadline skipped
#   bash benchmark/gpu_jax_check.sh --cpu-dry-run OUT_DIR   no GPU: the same steps at tiny sizes on CPU (the tests'
#                                                           tiny flags, XLA's -O0; catches typos; the gpu tests skip,
#                                                           the numbers mean nothing); limits and DEADLINE_S x 8
#
# JAX's persistent compilation cache goes to a folder of this run unless JAX_COMPILATION_CACHE_DIR is set; on a fresh
# machine it starts cold, so each step's seconds include its compiles (its SPS does not).
set -uo pipefail
cd "$(dirname "$0")/.."

DRY=0
if [ "${1:-}" = "--cpu-dry-run" ]; then DRY=1; shift; fi
OUT_DIR=${1:-${OUT:-runs/gpu_jax_check}}
mkdir -p "$OUT_DIR" || { echo "error: cannot create the output folder $OUT_DIR; pass a writable OUT_DIR" >&2; exit 2; }
OUT_DIR=$(cd "$OUT_DIR" && pwd)
if [ -n "${SITE:-}" ]; then
  [ -d "$SITE" ] || { echo "error: SITE=$SITE is not a folder; pass the folder benchmark/gpu_site.sh built" >&2; exit 2; }
  export PYTHONPATH="$(cd "$SITE" && pwd)${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export XLA_PYTHON_CLIENT_PREALLOCATE=false
SLOWER=1  # the step limits' factor
if [ "$DRY" = 1 ]; then  # CPU compiles take minutes (Kinetix's level programs): the tests' -O0 (tests/conftest.py)
  export JAX_PLATFORMS=cpu
  [[ "${XLA_FLAGS:-}" == *xla_backend_optimization_level* ]] || \
    export XLA_FLAGS="${XLA_FLAGS:+$XLA_FLAGS }--xla_backend_optimization_level=0"
  SLOWER=8
fi
DEADLINE_S=${DEADLINE_S:-$(( 530 * SLOWER ))}
STEPS=${STEPS:-versions jax2d_default sfl_2048 jax2d_b26 sfl_1m_per_gpu gpu_tests}
START=$(date +%s)
RUNS=$(mktemp -d)  # run directories stay off OUT_DIR (only numbers and logs come back)
export JAX_COMPILATION_CACHE_DIR=${JAX_COMPILATION_CACHE_DIR:-$RUNS/jax_cache}
RESULTS="$OUT_DIR/gpu_jax_check.jsonl"
: > "$RESULTS"
LOG="$OUT_DIR/gpu_jax_check.log"
exec > >(tee -a "$LOG") 2>&1

record() {  # record KEY JSON_VALUE: one line of gpu_jax_check.jsonl
  echo "{\"$1\": $2}" >> "$RESULTS"
}

time_left() {  # seconds before DEADLINE_S
  echo $(( DEADLINE_S - ($(date +%s) - START) ))
}

wanted() {  # wanted STEP: STEP is in STEPS
  [[ " $STEPS " == *" $1 "* ]]
}

limit() {  # limit SECONDS: the step's own limit (times SLOWER), or less where the deadline comes first
  local left own=$(( $1 * SLOWER )); left=$(time_left)
  echo $(( left < own ? left : own ))
}

json_string() {  # json_string TEXT: TEXT as a JSON string
  python3 -c 'import json,sys; print(json.dumps(sys.argv[1]))' "$1"
}

# ---- the command lines: the tests' tiny flags on a dry run (tests/test_*_jax2d.py, tests/test_sfl_kinetix_jax.py)
JAX2D_SETTING=$(sed -n '/^JAX2D_SETTING="/,/"/p' benchmark/_beukman2026_jax2d_main.sh | tr -d '\\\n' | \
  sed -e 's/^JAX2D_SETTING="//' -e 's/".*//')
[ -n "$JAX2D_SETTING" ] || { echo "error: JAX2D_SETTING not found in benchmark/_beukman2026_jax2d_main.sh" >&2; exit 2; }
# The 1m preset's shapes on one of its 128 devices (B26 App. D): 1,048,576 / 128 envs, N 4,194,304 / 128, K 8,192 /
# 128, scoring calls of 524,288 / 128 levels, 1,024 minibatches of 262,144 / 128 samples, the statistics over the
# device's own samples (the preset's per-device-stats 128 on 128 devices), lr 2e-4 and T 2; written as the 2048
# preset (B26's PPO values, L and rho) with those values, since the 1m preset's hybrid recipe needs its 1M envs
SFL_1M_PER_GPU="--preset 2048 --num-envs 8192 --sfl-num-levels 32768 --sfl-buffer-size 64 --sfl-filter-batch 4096
  --sfl-update-period 2 --num-minibatches 1024 --learning-rate 2e-4 --updates-per-chunk 2"
TIMED="--eval-every 0 --no-final-eval"  # training only: no evaluation, not even at the end
GPU_JAX2D_DEFAULT="$TIMED"; GPU_JAX2D_B26="$JAX2D_SETTING --num-envs 2048 $TIMED"
GPU_SFL_2048="--preset 2048 $TIMED"; GPU_SFL_1M="$SFL_1M_PER_GPU $TIMED"
if [ "$DRY" = 1 ]; then  # the GPU's flags, then the tiny ones (the last of a repeated flag wins)
  JAX2D_TINY="--num-tasks 8 --num-envs 8 --num-steps 16 --num-minibatches 2 --update-epochs 2 --hidden-size 32
    --diagnostics-states 64 --updates-per-chunk 2 --eval-attempts 1"
  SFL_TINY="--network mlp --num-envs 4 --num-steps 16 --num-minibatches 2 --update-epochs 2 --hidden-size 16
    --num-hidden-layers 2 --episode-length 12 --sfl-num-levels 8 --sfl-filter-batch 4 --sfl-buffer-size 4
    --sfl-rollout-length 24 --sfl-update-period 2 --level-batch 4 --level-filter-steps 4 --eval-random-levels 4
    --eval-attempts 2 --diagnostics-states 16 --updates-per-chunk 2"
  JAX2D_DEFAULT="$GPU_JAX2D_DEFAULT $JAX2D_TINY"; JAX2D_B26="$GPU_JAX2D_B26 $JAX2D_TINY"
  SFL_2048="$GPU_SFL_2048 $SFL_TINY"; SFL_1M="$GPU_SFL_1M $SFL_TINY"
  ITER_JAX2D=4; ITER_SFL_2048=4; ITER_SFL_1M=4
else
  JAX2D_DEFAULT=$GPU_JAX2D_DEFAULT; JAX2D_B26=$GPU_JAX2D_B26; SFL_2048=$GPU_SFL_2048; SFL_1M=$GPU_SFL_1M
  ITER_JAX2D=12; ITER_SFL_2048=8; ITER_SFL_1M=4
fi

batch_of() {  # batch_of SCRIPT FLAGS...: the script's steps per update at these flags (usage errors exit 2 here)
  python3 - "$@" <<'EOF'
import importlib, sys
m = importlib.import_module(f"cleanrl_scaling.{sys.argv[1]}")
sys.argv = [m.__file__] + sys.argv[2:]
print(m.read_args()[0].batch_size)
EOF
}

echo "== gpu_jax_check $(date -u +%Y-%m-%dT%H:%M:%SZ) dry_run=$DRY out=$OUT_DIR steps: $STEPS"

# ---- the GPU's command lines parse and pass the scripts' checks (also on a dry run): before anything heavy
echo "== flags"
timeout "$(limit 60)" python3 - "$GPU_JAX2D_DEFAULT" "$GPU_JAX2D_B26" "$GPU_SFL_2048" "$GPU_SFL_1M" <<'EOF' | tee -a "$RESULTS"
import contextlib, io, json, sys
from cleanrl_scaling import ppo_ewma_jax2d, sfl_kinetix_jax
import tensorboard.summary  # the run directory's writer: else a run fails only after minutes of building
out = {}
for name, module, flags in zip(["jax2d_default", "jax2d_b26", "sfl_2048", "sfl_1m_per_gpu"],
                               [ppo_ewma_jax2d, ppo_ewma_jax2d, sfl_kinetix_jax, sfl_kinetix_jax], sys.argv[1:]):
    sys.argv, err = [module.__file__] + flags.split(), io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            args = module.read_args()[0]
        out[name] = {k: getattr(args, k) for k in ["batch_size", "num_envs", "num_minibatches", "learning_rate",
                     "sfl_num_levels", "sfl_buffer_size", "sfl_filter_batch", "sfl_update_period", "eval_every",
                     "final_eval"] if hasattr(args, k)}
    except SystemExit:
        out[name] = "bad flags: " + (err.getvalue().strip().splitlines() or ["?"])[-1]
print(json.dumps({"flags": out}))
EOF
if [ "${PIPESTATUS[0]}" != 0 ]; then  # every later step would stop at the same import, minutes of GPU time each
  echo "error: the JAX scripts do not import here (above): a package missing from SITE? Only the versions follow" >&2
  record flags '"failed: the scripts do not import (log: gpu_jax_check.log)"'
  if wanted versions; then STEPS=versions; else STEPS=""; fi
  FAILED=2
fi

# ---- the machine, the versions, JAX's devices
if wanted versions; then
  echo "== machine"
  nvidia-smi 2>&1 | tee "$OUT_DIR/nvidia-smi.txt" || echo "nvidia-smi: not available"
  timeout "$(limit 60)" python3 - <<'EOF' | tee "$OUT_DIR/versions.json"
import importlib.metadata as md, json, os, platform
out = {"python": platform.python_version(), "cpu_cores": os.cpu_count()}
for name in ["jax", "jaxlib", "jax-cuda13-plugin", "jax-cuda13-pjrt", "jax-cuda12-plugin", "jax-cuda12-pjrt", "numpy",
             "flax", "optax", "chex", "kinetix-env", "jax2d", "tyro", "pytest"]:
    try:
        out[name] = md.version(name)
    except md.PackageNotFoundError:
        out[name] = None
try:
    import jax
    out["jax_backend"] = jax.default_backend()
    out["jax_devices"] = [str(d) for d in jax.devices()]
    out["bytes_limit"] = (jax.devices()[0].memory_stats() or {}).get("bytes_limit")  # what JAX may allocate
except Exception as e:  # a broken JAX still reports the versions
    out["jax_error"] = repr(e)
print(json.dumps(out, indent=1))
EOF
  record versions "$(python3 -c "import json,sys; print(json.dumps(json.load(open(sys.argv[1]))))" "$OUT_DIR/versions.json" 2>/dev/null || echo null)"
fi

# ---- --estimate-memory: its JSON line's peak_bytes (the largest program's per-device total)
estimate() {  # estimate NAME LIMIT FLAGS...: sfl_kinetix_jax.py --estimate-memory, recorded as NAME_estimate
  local name=$1 seconds=$2; shift 2
  if [ "$(time_left)" -lt 30 ]; then
    echo "-- ${name}_estimate: skipped (past DEADLINE_S)"; record "${name}_estimate" '"skipped: past the deadline"'; return
  fi
  echo "-- ${name}_estimate: sfl_kinetix_jax.py $* --estimate-memory"
  local t0; t0=$(date +%s)
  timeout "$(limit "$seconds")" python3 cleanrl_scaling/sfl_kinetix_jax.py "$@" --estimate-memory --progress none \
    > "$OUT_DIR/${name}_estimate.log" 2>&1
  local code=$?
  tail -n 3 "$OUT_DIR/${name}_estimate.log"
  local line; line=$(grep '^{"estimate_memory"' "$OUT_DIR/${name}_estimate.log" | tail -n 1)
  if [ -n "$line" ]; then
    record "${name}_estimate" "$(python3 -c "import json,sys; r=json.loads(sys.argv[1]); print(json.dumps({'peak_bytes': r['peak_bytes'], 'devices': r['devices'], 'programs': {k: v['total_bytes'] for k, v in r['estimate_memory'].items()}, 'seconds': $(date +%s) - $t0}))" "$line")"
  else
    record "${name}_estimate" "\"failed: exit $code (log: ${name}_estimate.log)\""
  fi
}

# ---- a short run: summary.json's SPS (without the first chunk), SPS_with_warmup and peak_device_bytes
sps_run() {  # sps_run NAME SCRIPT UPDATES LIMIT FLAGS...: UPDATES at the script's batch, recorded as NAME
  local name=$1 script=$2 updates=$3 seconds=$4; shift 4
  if [ "$(time_left)" -lt 30 ]; then
    echo "-- $name: skipped (past DEADLINE_S)"; record "$name" '"skipped: past the deadline"'; return
  fi
  local dir="$RUNS/$name" batch
  batch=$(batch_of "$script" "$@" 2>"$OUT_DIR/$name.flags.log" | tail -n 1)
  [[ "$batch" =~ ^[0-9]+$ ]] || { cat "$OUT_DIR/$name.flags.log"; record "$name" '"failed: bad flags"'; return; }
  rm -f "$OUT_DIR/$name.flags.log"
  echo "-- $name: $script $* ($updates updates of $batch steps)"
  local t0; t0=$(date +%s)
  timeout "$(limit "$seconds")" python3 "cleanrl_scaling/$script.py" "$@" --total-timesteps $(( updates * batch )) \
    --progress none --runs-dir "$dir" > "$OUT_DIR/$name.log" 2>&1
  local code=$?
  tail -n 2 "$OUT_DIR/$name.log"
  local summary; summary=$(ls "$dir"/*/summary.json 2>/dev/null | head -n 1)
  if [ -n "$summary" ] && grep -q '"status": "finished"' "$summary"; then
    record "$name" "$(python3 - "$summary" "$(( $(date +%s) - t0 ))" "$code" "$script $*" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))
out = {"SPS": round(s["SPS"]), "SPS_with_warmup": round(s["SPS_with_warmup"]), "steps": s["global_step"],
       "peak_device_bytes": s.get("peak_device_bytes"), "seconds": int(sys.argv[2]), "exit_code": int(sys.argv[3]),
       "args": sys.argv[4]}
if "filter_share" in s:
    out["filter_share"] = round(s["filter_share"], 4)
print(json.dumps(out))
EOF
)"
  else
    grep -m 1 -E "^error|Error" "$OUT_DIR/$name.log" || true
    record "$name" "\"failed: exit $code (log: $name.log)\""
  fi
}

ratio() {  # ratio NAME: the run's peak_device_bytes over its estimate's peak_bytes, and over its largest program
          # besides the diagnostics pass, recorded as NAME_peak_over_estimate[_without_diagnostics]
  python3 - "$RESULTS" "$1" <<'EOF' | tee -a "$RESULTS"
import json, sys
rows = {}
for line in open(sys.argv[1]):
    rows.update(json.loads(line))
name = sys.argv[2]
run, est = rows.get(name), rows.get(f"{name}_estimate")
out = {f"{name}_peak_over_estimate": None, f"{name}_peak_over_estimate_without_diagnostics": None}
if isinstance(run, dict) and isinstance(est, dict) and run.get("peak_device_bytes"):
    # the short runs stop before the first diagnostics pass, which the estimate includes
    without = max(v for k, v in est["programs"].items() if k != "diagnostics")
    out = {f"{name}_peak_over_estimate": round(run["peak_device_bytes"] / est["peak_bytes"], 3),
           f"{name}_peak_over_estimate_without_diagnostics": round(run["peak_device_bytes"] / without, 3)}
print(json.dumps(out))
EOF
}

# shellcheck disable=SC2086  # the flag strings split into flags
{
  if wanted jax2d_default; then
    echo "== ppo_ewma_jax2d.py at its defaults"
    sps_run jax2d_default ppo_ewma_jax2d "$ITER_JAX2D" 150 $JAX2D_DEFAULT
  fi
  if wanted sfl_2048; then
    echo "== sfl_kinetix_jax.py --preset 2048"
    estimate sfl_2048 240 $SFL_2048
    sps_run sfl_2048 sfl_kinetix_jax "$ITER_SFL_2048" 360 $SFL_2048
    ratio sfl_2048
  fi
  if wanted jax2d_b26; then
    echo "== ppo_ewma_jax2d.py at the Jax2D setting with 2048 envs"
    sps_run jax2d_b26 ppo_ewma_jax2d "$ITER_JAX2D" 120 $JAX2D_B26
  fi
  if wanted sfl_1m_per_gpu; then
    echo "== sfl_kinetix_jax.py at the 1m preset's shapes per GPU (8,192 envs)"
    estimate sfl_1m_per_gpu 270 $SFL_1M
    sps_run sfl_1m_per_gpu sfl_kinetix_jax "$ITER_SFL_1M" 420 $SFL_1M
    ratio sfl_1m_per_gpu
  fi
}

# ---- the JAX gpu tests (the ini's addopts are replaced: an image may lack pytest-xdist)
if wanted gpu_tests; then
  echo "== pytest -m gpu tests/test_gpu.py -k jax"
  if [ "$(time_left)" -lt 60 ]; then
    echo "-- gpu_tests: skipped (past DEADLINE_S)"; record gpu_tests '"skipped: past the deadline"'
  elif python3 -c "import pytest" 2>/dev/null; then
    timeout "$(limit 300)" python3 -m pytest -p no:cacheprovider -o addopts="" -ra -v --durations=0 -m gpu \
      tests/test_gpu.py -k jax --junitxml="$OUT_DIR/gpu_tests.xml" > "$OUT_DIR/gpu_tests.txt" 2>&1
    code=$?
    tail -n 4 "$OUT_DIR/gpu_tests.txt"
    record gpu_tests "{\"exit_code\": $code, \"summary\": $(json_string "$(tail -n 1 "$OUT_DIR/gpu_tests.txt")")}"
  else
    echo "pytest is not installed: add it to SITE"; record gpu_tests '"skipped: no pytest"'
  fi
fi

# ---- one JSON object for docs/gpu.md
python3 - "$RESULTS" "$OUT_DIR/gpu_jax_check.json" "$START" "$DRY" <<'EOF'
import json, sys, time
merged = {}
for line in open(sys.argv[1]):
    merged.update(json.loads(line))
merged["dry_run"] = sys.argv[4] == "1"
merged["date_utc"] = time.strftime("%Y-%m-%d %H:%M", time.gmtime(int(sys.argv[3])))
merged["wall_seconds"] = round(time.time() - int(sys.argv[3]))
json.dump(merged, open(sys.argv[2], "w"), indent=1)
print(json.dumps(merged, indent=1))
EOF
rm -rf "$RUNS"
echo "== done in $(( $(date +%s) - START )) s: $OUT_DIR/gpu_jax_check.json"
exit "${FAILED:-0}"
