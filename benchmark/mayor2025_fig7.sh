#!/usr/bin/env bash
# M25 Fig. 7 (§6.2): PPO on two Procgen games (easy mode, all levels, M25 Table 2 / CleanRL defaults), growing
# the batch through N (envs) or through T (rollout length) from CleanRL's 64 x 256. Our copy of M25 lost which
# two games and which N and T; we take starpilot (CleanRL's default game) and bigfish, and the grid of Fig. 1b:
# N x2, x4 at T = 256 against T x2, x4 at N = 64. 5 seeds, 25M steps (CleanRL's and Cobbe et al.'s easy budget).
# Cost: 2 games x 5 settings x 5 seeds = 50 runs; on 2 CPU cores a 25M-step run takes days (IMPALA CNN), so this
# is a GPU-scale sweep: SLURM=1 submits it, DRY_RUN=1 prints it, TOTAL=... shortens it.
# Figure: per game, the IQM over seeds of the final return (95% bootstrap CI) and the learning curves.
RUNS_DIR=${RUNS_DIR:-runs/mayor2025_fig7}
SCRIPT=cleanrl_scaling/ppo_procgen.py
GAMES=${GAMES:-starpilot bigfish}
TOTAL=${TOTAL:-25000000}
LARGEST_BATCH=65536  # 256 x 256
source "$(dirname "$0")/_mayor2025_common.sh"
launch mayor2025_fig7 --flag-set "--num-envs 64 --num-steps 256" --flag-set "--num-envs 128 --num-steps 256" \
  --flag-set "--num-envs 256 --num-steps 256" --flag-set "--num-envs 64 --num-steps 512" \
  --flag-set "--num-envs 64 --num-steps 1024" -- --total-timesteps "$TOTAL" --diagnostics-every 10
[[ -n "${DRY_RUN:-}" || -n "${SLURM:-}" ]] && exit 0
for game in "${GAMES[@]}"; do  # raw returns: Procgen games' scales differ, so one panel per game
  "$PYTHON" -m cleanrl_scaling.utils.aggregate iqm "$RUNS_DIR" --only-finished --filter env_id="$game" --metric charts/episodic_return \
    --group-by num_envs num_steps --label "N={num_envs} T={num_steps}" --title "M25 Fig. 7: $game, final return (IQM, 95% CI)" \
    --out "$OUT_DIR/mayor2025_fig7_${game}_iqm"
  "$PYTHON" -m cleanrl_scaling.utils.aggregate curves "$RUNS_DIR" --only-finished --filter env_id="$game" --metric charts/episodic_return \
    --group-by num_envs num_steps --label "N={num_envs} T={num_steps}" --title "M25 Fig. 7: $game" \
    --out "$OUT_DIR/mayor2025_fig7_${game}_curves"
done
