# Sourced by benchmark/beukman2026_fig9_mujoco.sh, beukman2026_fig10_mujoco.sh and mayor2025_fig8_mujoco.sh: B26's
# scaling recipes and M25's N-against-T question on MuJoCo (ppo_continuous_mujoco.py, envpool backend), the one
# continuous-control domain that trains here; substitutes for the papers' Isaac Gym figures (B26 Fig. 10, M25 Fig. 8).
# The base configuration is CleanRL's update spread over envs: N = 64 envs x T = 32 steps = CleanRL's 2048-sample
# batch, 32 minibatches of 64, 10 epochs, lr 3e-4; the script's default mode (a time-limit truncation bootstraps).
# The three scripts share RUNS_DIR: a grid point two figures need (same flags) runs once (--skip-finished).
# Return curves: per run, a trailing mean over 10 logged steps (64 envs end ~1 episode per step), then the mean and the seeds' range.
# Environment: SCALE (paper | laptop), RUNS_DIR (runs/mujoco_recipes), OUT_DIR (runs/figures), WORKERS (1), PYTHON,
# SEEDS ("1 2 3"), ENV_IDS ("Ant-v4 Humanoid-v4"), TOTAL (steps per run), NUM_ENVS_LIST, DRY_RUN=1 (print the
# commands, draw nothing), SLURM=1 (submit a Slurm array instead of running here; its knobs SLURM_PARTITION,
# SLURM_GPUS_PER_RUN, SLURM_CPUS, SLURM_TIME, SLURM_MEM, SLURM_GRACE, MAX_PARALLEL, SLURM_EXTRA, SLURM_TEMPLATE:
# _slurm_common.sh, docs/cluster.md), DRAW_ONLY=1 (draw from the runs that exist, launch nothing),
# RESUME=1 (a run stopped before finishing continues from its checkpoint; runs checkpoint every CHECKPOINT_EVERY
# (16) updates, and on
# SIGINT/SIGTERM; never while another launcher runs the same grid points in RUNS_DIR).
#   SCALE=paper (default): NUM_ENVS_LIST "64 256 1024 4096", TOTAL 20M.
#   SCALE=laptop: NUM_ENVS_LIST "64 1024", TOTAL 2.1M (at 1024 envs a 1000-step episode, with its reset step,
#   ends every 1.025M steps: the second one by 2.05M; each script's header gives its run count and CPU time). The
#   middle N = 256 is left out so that one task's Fig. 8 + 9 grid fits about 2.2 hours of a 2-core machine
#   (~4.4 CPU-h for Ant).
set -euo pipefail
SCALE=${SCALE:-paper}
case "$SCALE" in
  paper) TOTAL=${TOTAL:-20000000}; NUM_ENVS_LIST=${NUM_ENVS_LIST:-64 256 1024 4096} ;;
  laptop) TOTAL=${TOTAL:-2100000}; NUM_ENVS_LIST=${NUM_ENVS_LIST:-64 1024} ;;
  *) echo "error: SCALE=$SCALE: must be paper or laptop" >&2; exit 2 ;;
esac
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source benchmark/_slurm_common.sh
RUNS_DIR=${RUNS_DIR:-runs/mujoco_recipes}
OUT_DIR=${OUT_DIR:-runs/figures}
WORKERS=${WORKERS:-1}
PYTHON=${PYTHON:-python}
BASE_ENVS=64
BASE_STEPS=32
read -r -a SEEDS <<< "${SEEDS:-1 2 3}"
read -r -a ENV_IDS <<< "${ENV_IDS:-Ant-v4 Humanoid-v4}"
read -r -a NUM_ENVS <<< "$NUM_ENVS_LIST"
EXTRA=()
[[ -n "${DRY_RUN:-}" ]] && EXTRA+=(--dry-run)
EXTRA+=("${SLURM_ARGS[@]}")
CHECKPOINT_EVERY=${CHECKPOINT_EVERY:-16}
slurm_count CHECKPOINT_EVERY "$CHECKPOINT_EVERY"
[[ -n "${RESUME:-}" ]] && EXTRA+=(--resume-unfinished)

die() { echo "error: $*" >&2; exit 2; }  # a user mistake: one line, exit code 2, before anything runs

[[ "$TOTAL" =~ ^[0-9]+$ ]] || die "TOTAL=$TOTAL: must be a positive integer of environment steps"
(( ${#NUM_ENVS[@]} >= 2 )) || die "NUM_ENVS_LIST=$NUM_ENVS_LIST: give the base $BASE_ENVS and at least one larger count"
[[ "${NUM_ENVS[0]}" == "$BASE_ENVS" ]] || die "NUM_ENVS_LIST=$NUM_ENVS_LIST: must start at the base, $BASE_ENVS envs"
for n in "${NUM_ENVS[@]:1}"; do
  [[ "$n" =~ ^[0-9]+$ ]] && (( n > BASE_ENVS && n % BASE_ENVS == 0 )) || \
    die "NUM_ENVS_LIST=$NUM_ENVS_LIST: $n must be a multiple of the base $BASE_ENVS envs above it"
done
LARGEST=${NUM_ENVS[-1]}
one_update_fits() {  # one_update_fits BATCH: the largest batch of the calling figure must fit in TOTAL
  (( TOTAL >= $1 )) || die "TOTAL=$TOTAL is below one update of this figure's largest batch ($1 steps); raise TOTAL"
}

launch() {  # launch JOB_NAME [launcher options] -- [flags for every run]
  local job=$1; shift
  [[ -n "${DRAW_ONLY:-}" ]] && return 0
  "$PYTHON" -m cleanrl_scaling.utils.launcher cleanrl_scaling/ppo_continuous_mujoco.py --job-name "$job" \
    --runs-dir "$RUNS_DIR" --workers "$WORKERS" --skip-finished --env-ids "${ENV_IDS[@]}" --seeds "${SEEDS[@]}" \
    "${EXTRA[@]}" "$@" --env-backend envpool --total-timesteps "$TOTAL" --diagnostics-every 10 \
    --checkpoint-every "$CHECKPOINT_EVERY"
}

aggregate() {  # aggregate COMMAND NAME [options]: OUT_DIR/NAME_<env_id>.{png,pdf,csv}, one figure per task of ENV_IDS
  [[ -n "${DRY_RUN:-}" || -n "${SLURM:-}" ]] && return 0  # skipped by DRY_RUN and SLURM
  local command=$1 name=$2 env_id; shift 2
  for env_id in "${ENV_IDS[@]}"; do  # per task, so that ENV_IDS=Ant-v4 alone draws Ant's figures
    "$PYTHON" -m cleanrl_scaling.utils.aggregate "$command" "$RUNS_DIR" --only-finished --filter "env_id=$env_id" "$@" \
      --out "$OUT_DIR/${name}_${env_id}"
  done
}
