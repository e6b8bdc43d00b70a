# Sourced by benchmark/mayor2025_*.sh: M25's Atari protocol (Atari-10, 5 seeds, human-normalised IQM with
# stratified-bootstrap 95% CIs) on top of the launcher and the aggregation.
# Environment: RUNS_DIR, OUT_DIR (runs/figures), WORKERS (1), CORES (all: the cores the workers share), SEEDS ("1 2 3 4 5"), GAMES (Atari-10),
# TOTAL (M25: 100M steps; lower it for a smoke run), PYTHON (python), DRY_RUN=1 prints the commands,
# SLURM=1 submits a Slurm array instead of running locally, with the knobs of _slurm_common.sh (SLURM_PARTITION,
# SLURM_GPUS_PER_RUN, SLURM_CPUS, SLURM_TIME, SLURM_MEM, SLURM_GRACE, MAX_PARALLEL, SLURM_EXTRA, SLURM_TEMPLATE;
# docs/cluster.md); DRAW_ONLY=1 draws from the runs that exist and launches nothing; RESUME=1 continues a run that
# stopped before finishing from its checkpoint (never while another launcher runs the same grid points in RUNS_DIR).
# Runs checkpoint every CHECKPOINT_EVERY (500) updates, so a preempted or timed-out job loses minutes.
# A figure script may set SCRIPT (the training script, default ppo_atari_envpool.py) before sourcing this file.
# PPO runs get --cleanrl-compat (truncation as termination, reset steps not masked: CleanRL's semantics, which
# M25's curves carry); CLEANRL_COMPAT=0 runs the script's default mode instead.
# SCALE=paper (default) runs the paper's grid; SCALE=laptop a reduced one, only where the figure script defines it
# (LAPTOP_GRID=1 before sourcing; its header says what it runs and how long it takes).
set -euo pipefail
SCALE=${SCALE:-paper}
[[ "$SCALE" == paper || ( "$SCALE" == laptop && -n "${LAPTOP_GRID:-}" ) ]] || {
  echo "error: SCALE=$SCALE: this figure runs SCALE=paper$([[ -n "${LAPTOP_GRID:-}" ]] && echo " or laptop") only" >&2; exit 2; }
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source benchmark/_slurm_common.sh
OUT_DIR=${OUT_DIR:-runs/figures}
WORKERS=${WORKERS:-1}
PYTHON=${PYTHON:-python}
TOTAL=${TOTAL:-100000000}
SCRIPT=${SCRIPT:-cleanrl_scaling/ppo_atari_envpool.py}
LARGEST_BATCH=${LARGEST_BATCH:-1024}  # set by the figure script: its largest N x T, one update of every grid point
[[ "$TOTAL" =~ ^[0-9]+$ && "$TOTAL" -ge "$LARGEST_BATCH" ]] || {
  echo "error: TOTAL=$TOTAL: must be an integer >= $LARGEST_BATCH (one update at this grid's largest N x T)" >&2; exit 2; }
read -r -a SEEDS <<< "${SEEDS:-1 2 3 4 5}"
read -r -a GAMES <<< "${GAMES:-Amidar-v5 BattleZone-v5 Bowling-v5 DoubleDunk-v5 Frostbite-v5 KungFuMaster-v5 NameThisGame-v5 Phoenix-v5 Qbert-v5 Riverraid-v5}"
EXTRA=()
[[ -n "${DRY_RUN:-}" ]] && EXTRA+=(--dry-run)
[[ -n "${CORES:-}" ]] && EXTRA+=(--cores "$CORES")
EXTRA+=("${SLURM_ARGS[@]}")
CHECKPOINT_EVERY=${CHECKPOINT_EVERY:-500}
slurm_count CHECKPOINT_EVERY "$CHECKPOINT_EVERY"
[[ -n "${RESUME:-}" ]] && EXTRA+=(--resume-unfinished)  # a run stopped before finishing continues from its checkpoint
COMPAT=(--cleanrl-compat)  # only the PPO Atari script has CleanRL's compat mode
[[ "${CLEANRL_COMPAT:-1}" == 0 || "$SCRIPT" != cleanrl_scaling/ppo_atari_envpool.py ]] && COMPAT=()

launch() {  # launch JOB_NAME [launcher options] -- [flags for every run]
  local job=$1; shift
  [[ -n "${DRAW_ONLY:-}" ]] && return 0
  "$PYTHON" -m cleanrl_scaling.utils.launcher "$SCRIPT" --job-name "$job" \
    --runs-dir "$RUNS_DIR" --workers "$WORKERS" --skip-finished --env-ids "${GAMES[@]}" --seeds "${SEEDS[@]}" \
    "${EXTRA[@]}" "$@" "${COMPAT[@]}" --checkpoint-every "$CHECKPOINT_EVERY"
}

figure() {  # figure NAME GROUP_BY LABEL: IQM of human-normalised final returns, and learning curves
  [[ -n "${DRY_RUN:-}" || -n "${SLURM:-}" ]] && return 0
  "$PYTHON" -m cleanrl_scaling.utils.aggregate iqm "$RUNS_DIR" --only-finished --metric charts/episodic_return \
    --normalize atari-human --group-by $2 --label "$3" --title "M25 $1: human-normalised IQM (95% CI)" \
    --out "$OUT_DIR/mayor2025_$1_iqm"
  "$PYTHON" -m cleanrl_scaling.utils.aggregate iqm "$RUNS_DIR" --only-finished --metric charts/episodic_return \
    --normalize atari-human --over-time --group-by $2 --label "$3" --title "M25 $1: IQM over training" \
    --out "$OUT_DIR/mayor2025_$1_iqm_curves"
}
