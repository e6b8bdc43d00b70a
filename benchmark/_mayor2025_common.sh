# Sourced by benchmark/mayor2025_*.sh: M25's Atari protocol (Atari-10, 5 seeds, human-normalised IQM with
# stratified-bootstrap 95% CIs) on top of the preamble every figure script shares (_figure_common.sh: SCALE,
# RUNS_DIR, OUT_DIR, WORKERS, CORES, SEEDS, PYTHON, DRY_RUN, SLURM and its knobs, DRAW_ONLY, RESUME).
# Environment, M25's own: GAMES (Atari-10), TOTAL (M25: 100M steps; lower it for a smoke run). Runs checkpoint every
# CHECKPOINT_EVERY (500) updates, so a preempted or timed-out job loses minutes.
# A figure script may set SCRIPT (the training script, default ppo_atari_envpool.py) before sourcing this file.
# PPO runs get --cleanrl-compat (truncation as termination, reset steps not masked: CleanRL's semantics, which
# M25's curves carry); CLEANRL_COMPAT=0 runs the script's default mode instead.
SCRIPT=${SCRIPT:-cleanrl_scaling/ppo_atari_envpool.py}
CHECKPOINT_EVERY=${CHECKPOINT_EVERY:-500}
source "$(dirname "${BASH_SOURCE[0]}")/_figure_common.sh"
TOTAL=${TOTAL:-100000000}
LARGEST_BATCH=${LARGEST_BATCH:-1024}  # set by the figure script: its largest N x T, one update of every grid point
[[ "$TOTAL" =~ ^[0-9]+$ && "$TOTAL" -ge "$LARGEST_BATCH" ]] || \
  die "TOTAL=$TOTAL: must be an integer >= $LARGEST_BATCH (one update at this grid's largest N x T)"
read -r -a GAMES <<< "${GAMES:-Amidar-v5 BattleZone-v5 Bowling-v5 DoubleDunk-v5 Frostbite-v5 KungFuMaster-v5 NameThisGame-v5 Phoenix-v5 Qbert-v5 Riverraid-v5}"
COMPAT=(--cleanrl-compat)  # only the PPO Atari script has CleanRL's compat mode
[[ "${CLEANRL_COMPAT:-1}" == 0 || "$SCRIPT" != cleanrl_scaling/ppo_atari_envpool.py ]] && COMPAT=()

launch() {  # launch JOB_NAME [launcher options] -- [flags for every run]
  local job=$1; shift
  launch_grid --job-name "$job" --env-ids "${GAMES[@]}" "$@" "${COMPAT[@]}"
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
