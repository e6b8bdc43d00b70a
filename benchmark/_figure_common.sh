# Sourced by _beukman2026_common.sh and _mayor2025_common.sh after they set their paper's defaults (SCRIPT, the
# training script; CHECKPOINT_EVERY): the preamble every B26 and M25 figure script shares. A figure script = its grid
# (launch ...) + its figures (aggregate ... / figure ...), on top of its paper's file.
# Environment: SCALE=paper (default) runs the paper's grid; SCALE=laptop a reduced one, only where the figure script
# defines it (LAPTOP_GRID=1 and its laptop defaults before sourcing; its header says what it runs and how long).
# RUNS_DIR (set by the figure script), OUT_DIR (runs/figures), WORKERS (1: runs at once here), CORES (all: the first
# CORES usable cores, shared out among the workers and pinned), SEEDS ("1 2 3 4 5"), PYTHON (python); DRY_RUN=1
# prints the commands, their cost and the figures, and draws nothing; SLURM=1 submits a Slurm array and draws nothing,
# with the knobs of _slurm_common.sh (SLURM_PARTITION, SLURM_GPUS_PER_RUN, SLURM_CPUS, SLURM_TIME, SLURM_MEM,
# SLURM_GRACE, MAX_PARALLEL, SLURM_EXTRA, SLURM_TEMPLATE; docs/cluster.md); DRAW_ONLY=1 draws from the runs that exist
# and launches nothing (the redraw once the array has finished). Runs checkpoint every CHECKPOINT_EVERY updates.
# Finished runs are kept and reused (--skip-finished: a grid point counts as done only when a run started with exactly
# its flags finished); RESUME=1 continues a run that stopped before finishing from its checkpoint (never while another
# launcher runs the same grid points in RUNS_DIR); rm -rf "$RUNS_DIR" to start afresh. Rerunning a finished script
# only redraws its figures.
set -euo pipefail
die() { echo "error: $*" >&2; exit 2; }  # a user mistake: one line, exit code 2, before anything runs

SCALE=${SCALE:-paper}
[[ "$SCALE" == paper || ( "$SCALE" == laptop && -n "${LAPTOP_GRID:-}" ) ]] || \
  die "SCALE=$SCALE: this figure runs SCALE=paper$([[ -n "${LAPTOP_GRID:-}" ]] && echo " or laptop") only"
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source benchmark/_slurm_common.sh
OUT_DIR=${OUT_DIR:-runs/figures}
WORKERS=${WORKERS:-1}
PYTHON=${PYTHON:-python}
read -r -a SEEDS <<< "${SEEDS:-1 2 3 4 5}"
EXTRA=()
[[ -n "${DRY_RUN:-}" ]] && EXTRA+=(--dry-run)
[[ -n "${CORES:-}" ]] && EXTRA+=(--cores "$CORES")  # e.g. CORES=1: one pinned core, the other left to other work
EXTRA+=("${SLURM_ARGS[@]}")
slurm_count CHECKPOINT_EVERY "$CHECKPOINT_EVERY"
[[ -n "${RESUME:-}" ]] && EXTRA+=(--resume-unfinished)  # a run stopped before finishing continues from its checkpoint

launch_grid() {  # launch_grid [launcher options] -- [flags for every run]: SCRIPT at every grid point and seed
  [[ -n "${DRAW_ONLY:-}" ]] && return 0
  "$PYTHON" -m cleanrl_scaling.utils.launcher "$SCRIPT" --runs-dir "$RUNS_DIR" --workers "$WORKERS" --skip-finished \
    --seeds "${SEEDS[@]}" "${EXTRA[@]}" "$@" --checkpoint-every "$CHECKPOINT_EVERY"
}
