# Sourced by benchmark/_figure_common.sh (the B26 and M25 figure scripts' preamble), _mujoco_recipes_common.sh and
# the noisy-SGD and H25 figure scripts: the Slurm knobs of every figure script, and DRAW_ONLY (docs/cluster.md has
# the resources each figure needs).
#   SLURM=1            submit the grid as a Slurm array (launcher --slurm-template) instead of running it here
#   SLURM_PARTITION    #SBATCH --partition             SLURM_GPUS_PER_RUN  GPUs per run and node (#SBATCH --gres=gpu:N)
#   SLURM_CPUS         CPU cores per run (1)            SLURM_TIME   time limit per run (04:00:00; D-HH:MM:SS)
#   SLURM_MEM          memory per run and node (16G)    MAX_PARALLEL runs at once (array throttle %N; 0 = none)
#   SLURM_GRACE        seconds before the time limit at which a run checkpoints and its task requeues itself (300)
#   SLURM_EXTRA        more #SBATCH options, separated by ';' (e.g. "--account=abc;--qos=high")
#   SLURM_TEMPLATE     your sbatch template instead of the bundled one (placeholders: docs/pipeline.md)
#   DRAW_ONLY=1        draw from the runs that exist and launch nothing (the redraw after an array)
#   CHECKPOINT_EVERY   iterations between periodic checkpoints (set by the preamble; 0 = only on SIGTERM/at the end)
# The launcher leaves out grid points still queued or running as array tasks of the same job name (squeue), so a
# rerun never starts a second copy of a run that is running as a job. A task at its time limit, preempted or requeued
# continues its run from its checkpoint by itself; a cancelled one is continued by RESUME=1.
source benchmark/_dry_run.sh  # DRY_RUN=1 also lists the figures the script will draw
slurm_die() { echo "error: $*" >&2; exit 2; }
slurm_count() {  # slurm_count NAME VALUE: a non-negative integer
  [[ "$2" =~ ^[0-9]+$ ]] || slurm_die "$1=$2: must be a non-negative integer"
}
SLURM_ARGS=()
if [[ -n "${SLURM:-}" ]]; then
  SLURM_ARGS=(--slurm-template ${SLURM_TEMPLATE:+"$SLURM_TEMPLATE"})
  [[ -z "${SLURM_TEMPLATE:-}" || -f "$SLURM_TEMPLATE" ]] || slurm_die "SLURM_TEMPLATE=$SLURM_TEMPLATE: no such file"
  [[ -n "${SLURM_PARTITION:-}" ]] && SLURM_ARGS+=(--partition "$SLURM_PARTITION")
  # sbatch hands the environment to the job, and srun would read SLURM_GPUS as --gpus of the whole step
  [[ -z "${SLURM_GPUS:-}" ]] || slurm_die "SLURM_GPUS=$SLURM_GPUS is set: srun inside the job would read it as --gpus \
for the whole step and spread the GPUs unevenly over nodes; unset it and give SLURM_GPUS_PER_RUN=$SLURM_GPUS"
  if [[ -n "${SLURM_GPUS_PER_RUN:-}" ]]; then
    slurm_count SLURM_GPUS_PER_RUN "$SLURM_GPUS_PER_RUN"; SLURM_ARGS+=(--gpus-per-run "$SLURM_GPUS_PER_RUN")
  fi
  if [[ -n "${SLURM_CPUS:-}" ]]; then
    [[ "$SLURM_CPUS" =~ ^[1-9][0-9]*$ ]] || slurm_die "SLURM_CPUS=$SLURM_CPUS: must be a positive number of cores"
    SLURM_ARGS+=(--cpus-per-run "$SLURM_CPUS")
  fi
  if [[ -n "${SLURM_TIME:-}" ]]; then
    [[ "$SLURM_TIME" =~ ^([0-9]+-)?[0-9]+(:[0-9]{2}){0,2}$ ]] || \
      slurm_die "SLURM_TIME=$SLURM_TIME: write a Slurm time limit, e.g. 12:00:00 or 2-00:00:00"
    SLURM_ARGS+=(--time "$SLURM_TIME")
  fi
  if [[ -n "${SLURM_MEM:-}" ]]; then
    [[ "$SLURM_MEM" =~ ^[0-9]+[KMGT]?$ ]] || slurm_die "SLURM_MEM=$SLURM_MEM: write a Slurm memory size, e.g. 32G"
    SLURM_ARGS+=(--mem "$SLURM_MEM")
  fi
  if [[ -n "${SLURM_GRACE:-}" ]]; then
    [[ "$SLURM_GRACE" =~ ^[1-9][0-9]*$ ]] || slurm_die "SLURM_GRACE=$SLURM_GRACE: must be a positive number of seconds"
    SLURM_ARGS+=(--signal-grace "$SLURM_GRACE")
  fi
  if [[ -n "${MAX_PARALLEL:-}" ]]; then
    slurm_count MAX_PARALLEL "$MAX_PARALLEL"; SLURM_ARGS+=(--max-parallel "$MAX_PARALLEL")
  fi
  IFS=';' read -r -a SLURM_EXTRA_LINES <<< "${SLURM_EXTRA:-}"
  for line in "${SLURM_EXTRA_LINES[@]}"; do
    [[ -z "${line// }" ]] && continue
    [[ "${line#"${line%%[![:space:]]*}"}" == -* ]] || \
      slurm_die "SLURM_EXTRA: '$line' is not an sbatch option (e.g. --account=abc)"
    SLURM_ARGS+=("--sbatch=$line")
  done
fi
if [[ -n "${DRAW_ONLY:-}" ]]; then
  [[ -z "${DRY_RUN:-}" ]] || slurm_die "DRAW_ONLY=1 and DRY_RUN=1: choose one (DRY_RUN prints, DRAW_ONLY draws)"
  SLURM=  # draw here, whatever SLURM says: nothing is submitted
  SLURM_ARGS=()
fi
