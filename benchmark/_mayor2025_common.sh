# Sourced by benchmark/mayor2025_*.sh: M25's Atari protocol (Atari-10, 5 seeds, human-normalised IQM with
# stratified-bootstrap 95% CIs) on top of the launcher and the aggregation.
# Environment: RUNS_DIR, OUT_DIR (runs/figures), WORKERS (1), SEEDS ("1 2 3 4 5"), GAMES (Atari-10),
# TOTAL (M25: 100M steps; lower it for a smoke run), PYTHON (python), DRY_RUN=1 prints the commands,
# SLURM=1 submits a Slurm array instead of running locally (the bundled template).
# A figure script may set SCRIPT (the training script, default ppo_atari_envpool.py), GAMES and TOTAL first.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
OUT_DIR=${OUT_DIR:-runs/figures}
WORKERS=${WORKERS:-1}
PYTHON=${PYTHON:-python}
TOTAL=${TOTAL:-100000000}
SCRIPT=${SCRIPT:-cleanrl_scaling/ppo_atari_envpool.py}
read -r -a SEEDS <<< "${SEEDS:-1 2 3 4 5}"
read -r -a GAMES <<< "${GAMES:-Amidar-v5 BattleZone-v5 Bowling-v5 DoubleDunk-v5 Frostbite-v5 KungFuMaster-v5 NameThisGame-v5 Phoenix-v5 Qbert-v5 Riverraid-v5}"
EXTRA=()
[[ -n "${DRY_RUN:-}" ]] && EXTRA+=(--dry-run)
[[ -n "${SLURM:-}" ]] && EXTRA+=(--slurm-template)

launch() {  # launch JOB_NAME [launcher options] -- [flags for every run]
  local job=$1; shift
  "$PYTHON" -m cleanrl_scaling.utils.launcher "$SCRIPT" --job-name "$job" \
    --runs-dir "$RUNS_DIR" --workers "$WORKERS" --skip-finished --env-ids "${GAMES[@]}" --seeds "${SEEDS[@]}" \
    "${EXTRA[@]}" "$@"
}

figure() {  # figure NAME GROUP_BY LABEL: IQM of human-normalised final returns, and learning curves
  [[ -n "${DRY_RUN:-}" || -n "${SLURM:-}" ]] && return 0
  "$PYTHON" -m cleanrl_scaling.utils.aggregate iqm "$RUNS_DIR" --metric charts/episodic_return \
    --normalize atari-human --group-by $2 --label "$3" --title "M25 $1: human-normalised IQM (95% CI)" \
    --out "$OUT_DIR/mayor2025_$1_iqm"
  "$PYTHON" -m cleanrl_scaling.utils.aggregate iqm "$RUNS_DIR" --metric charts/episodic_return \
    --normalize atari-human --over-time --group-by $2 --label "$3" --title "M25 $1: IQM over training" \
    --out "$OUT_DIR/mayor2025_$1_iqm_curves"
}
