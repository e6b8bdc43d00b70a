# Sourced by the B26 benchmark/beukman2026_fig*.sh scripts (Jax2D: ppo_ewma_jax2d.py; SFL on Kinetix:
# sfl_kinetix_jax.py): B26's defaults on top of the preamble every figure script shares (_figure_common.sh: SCALE,
# RUNS_DIR, OUT_DIR, WORKERS, CORES, SEEDS, PYTHON, DRY_RUN, SLURM and its knobs, DRAW_ONLY, RESUME), then the
# launcher call and the aggregation call B26's figures share. A figure script may set SCRIPT (the training script,
# default ppo_ewma_jax2d.py) before sourcing this file.
# Environment, B26's own: FLAGS (extra flags for every run, e.g. FLAGS="--num-envs 256 --num-tasks 64" on a CPU), BAND
# (auto: the band of the figures that use it; minmax, std, none). Runs checkpoint every CHECKPOINT_EVERY (64) updates.
# SFL's 65536 and 1m presets run on SFL_NODES_65536 (2) and SFL_NODES_1M (32) nodes with SFL_GPUS_PER_NODE (4) GPUs
# each, one --distributed process per node using all of them (launch_presets; B26 App. D: 8192 envs per GPU);
# SLURM_GPUS_PER_RUN is the GPUs of the single-node runs.
SCRIPT=${SCRIPT:-cleanrl_scaling/ppo_ewma_jax2d.py}
CHECKPOINT_EVERY=${CHECKPOINT_EVERY:-64}
source "$(dirname "${BASH_SOURCE[0]}")/_figure_common.sh"
read -r -a FLAGS <<< "${FLAGS:-}"

# the band of the curve figures that pass --band "$BAND": auto = a 95% Student-t CI from 5 seeds (the paper's), the
# seeds' range below 5 (docs/pipeline.md#bands)
BAND=${BAND:-auto}
case "$BAND" in
  auto) BAND_TEXT="mean; 95% CI from 5 seeds, else the seeds' range" ;;
  range) BAND_TEXT="mean and range over seeds" ;;
  bootstrap) BAND_TEXT="mean and bootstrap 95% CI over seeds" ;;
  ci95) BAND_TEXT="mean and 95% CI over seeds" ;;
  minmax) BAND_TEXT="mean and range over seeds" ;;
  std) BAND_TEXT="mean and std over seeds" ;;
  none) BAND_TEXT="mean over seeds" ;;
  *) die "BAND=$BAND: must be auto, range, bootstrap, ci95, minmax, std or none" ;;
esac

positive_int() {  # positive_int NAME VALUE
  [[ "$2" =~ ^[0-9]+$ && "$2" -gt 0 ]] || die "$1=$2: must be a positive integer of environment steps"
}

flag_value() {  # flag_value NAME DEFAULT: the value of --NAME in FLAGS, else DEFAULT
  local i
  for ((i = 0; i < ${#FLAGS[@]}; i++)); do
    [[ "${FLAGS[i]}" == "--$1" ]] && { echo "${FLAGS[i + 1]:-}"; return; }
    [[ "${FLAGS[i]}" == "--$1="* ]] && { echo "${FLAGS[i]#*=}"; return; }
  done
  echo "$2"
}

not_in_flags() {  # not_in_flags NAME...: the grid owns these flags
  local name
  for name in "$@"; do
    [[ " ${FLAGS[*]:-} " == *" --$name "* || " ${FLAGS[*]:-} " == *" --$name="* ]] && \
      die "FLAGS sets --$name, which this script's grid sweeps; leave it out of FLAGS"
  done
  return 0
}

one_update_fits() {  # one_update_fits TOTAL_NAME TOTAL NUM_ENVS...: every run must have >= 1 update
  local name=$1 total=$2 steps n; shift 2
  steps=$(flag_value num-steps 256)
  for n in "$@"; do
    (( total >= n * steps )) || die "$name=$total is below one update at $n envs x $steps steps ($((n * steps))); \
raise $name to at least $((n * steps)) or use fewer envs"
  done
}

launch() {  # launch [launcher options] -- [flags for every run]
  [[ " $* " == *" -- "* ]] || die "launch: internal error, no '--' before the run flags"
  launch_grid "$@" "${FLAGS[@]}"
}

SFL_NODES_65536=${SFL_NODES_65536:-2}
SFL_NODES_1M=${SFL_NODES_1M:-32}
SFL_GPUS_PER_NODE=${SFL_GPUS_PER_NODE:-4}  # the multi-node arrays' own GPU count: not the single-node runs' one
slurm_count SFL_GPUS_PER_NODE "$SFL_GPUS_PER_NODE"
preset_nodes() {  # preset_nodes PRESET: nodes of one SFL run under SLURM=1 (1 for the presets that fit one GPU)
  case $1 in 65536) echo "$SFL_NODES_65536" ;; 1m) echo "$SFL_NODES_1M" ;; *) echo 1 ;; esac
}

launch_presets() {  # launch_presets JOB_NAME PRESET... -- [launcher options] -- [run flags]: the --preset sweep;
  # under SLURM=1 a preset that needs several nodes gets its own array (JOB_NAME_PRESET) of one --distributed process
  # per node (the launcher's multi-node template); elsewhere one launch of all presets
  local job=$1 presets=() single=() p nodes; shift
  while [[ $# -gt 0 && "$1" != -- ]]; do presets+=("$1"); shift; done
  shift
  for p in "${presets[@]}"; do
    nodes=$(preset_nodes "$p")
    [[ "$nodes" =~ ^[1-9][0-9]*$ ]] || die "SFL_NODES_$(tr a-z A-Z <<< "$p")=$nodes: must be a positive integer"
    if [[ -n "${SLURM:-}" && "$nodes" -gt 1 ]]; then
      launch --job-name "${job}_$p" --sweep "preset=$p" --nodes "$nodes" --gpus-per-run "$SFL_GPUS_PER_NODE" "$@" \
        --distributed
    else
      single+=("$p")
    fi
  done
  (( ${#single[@]} == 0 )) || launch --job-name "$job" --sweep "preset=$(IFS=,; echo "${single[*]}")" "$@"
}

aggregate() {  # aggregate COMMAND [options]: one figure from the runs in RUNS_DIR (skipped by DRY_RUN and SLURM)
  [[ -n "${DRY_RUN:-}" || -n "${SLURM:-}" ]] && return 0
  local command=$1; shift
  "$PYTHON" -m cleanrl_scaling.utils.aggregate "$command" "$RUNS_DIR" --only-finished --band "$BAND" "$@"
}
