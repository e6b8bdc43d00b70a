#!/usr/bin/env bash
# M25 Fig. 13: the PQN N x T grid of mayor2025_fig6.sh on the other six Atari-10 games (their network metrics
# are drawn too, as Fig. 14 does for Fig. 6's games). M25 §6.1. Page: docs/pqn_atari.md.
RUNS_DIR=${RUNS_DIR:-runs/mayor2025_fig13}
GAMES=${GAMES:-Amidar-v5 BattleZone-v5 Bowling-v5 DoubleDunk-v5 Frostbite-v5 KungFuMaster-v5}
SCRIPT=cleanrl_scaling/pqn_atari.py
LARGEST_BATCH=8192  # 64 x 128 and 8 x 1024
source "$(dirname "$0")/_mayor2025_common.sh"
launch mayor2025_fig13 --flag-set "--num-envs 8 --num-steps 128" --flag-set "--num-envs 16 --num-steps 128" \
  --flag-set "--num-envs 32 --num-steps 128" --flag-set "--num-envs 64 --num-steps 128" \
  --flag-set "--num-envs 8 --num-steps 256" --flag-set "--num-envs 8 --num-steps 512" \
  --flag-set "--num-envs 8 --num-steps 1024" -- --total-timesteps "$TOTAL" --diagnostics-every 10
figure fig13 "num_envs num_steps" "N={num_envs} T={num_steps}"
[[ -n "${DRY_RUN:-}" || -n "${SLURM:-}" ]] && exit 0
"$PYTHON" -m cleanrl_scaling.utils.aggregate curves "$RUNS_DIR" --only-finished --group-by num_envs num_steps \
  --label "N={num_envs} T={num_steps}" --metric diagnostics/feature_rank diagnostics/dormant_frac \
  diagnostics/weight_norm diagnostics/grad_kurtosis charts/eval_return \
  --title "M25 Fig. 13 games: PQN network metrics against N and T" --out "$OUT_DIR/mayor2025_fig13_metrics"
