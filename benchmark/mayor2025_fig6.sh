#!/usr/bin/env bash
# M25 Fig. 6, and from the same runs Fig. 14 (feature rank, dormant units, weight norm, gradient kurtosis):
# PQN (pqn_atari.py, CleanRL's defaults as M25 ran them) with the batch grown through N (envs) or T (rollout
# length), the grid of the PPO Fig. 1b runs. M25 §6.1. Page: docs/pqn_atari.md.
# Our copy of M25 lost which four games Fig. 6 shows; we take four dense-reward Atari-10 games in which a
# value-based agent makes steady progress, so that return differences between N and T can show (GAMES
# overrides). mayor2025_fig13.sh runs the other six. At M25's 100M steps: GPU scale (see benchmark/README.md).
RUNS_DIR=${RUNS_DIR:-runs/mayor2025_fig6}
GAMES=${GAMES:-NameThisGame-v5 Phoenix-v5 Qbert-v5 Riverraid-v5}
SCRIPT=cleanrl_scaling/pqn_atari.py
LARGEST_BATCH=8192  # 64 x 128 and 8 x 1024
source "$(dirname "$0")/_mayor2025_common.sh"
launch mayor2025_fig6 --flag-set "--num-envs 8 --num-steps 128" --flag-set "--num-envs 16 --num-steps 128" \
  --flag-set "--num-envs 32 --num-steps 128" --flag-set "--num-envs 64 --num-steps 128" \
  --flag-set "--num-envs 8 --num-steps 256" --flag-set "--num-envs 8 --num-steps 512" \
  --flag-set "--num-envs 8 --num-steps 1024" -- --total-timesteps "$TOTAL" --diagnostics-every 10
figure fig6 "num_envs num_steps" "N={num_envs} T={num_steps}"
[[ -n "${DRY_RUN:-}" || -n "${SLURM:-}" ]] && exit 0
"$PYTHON" -m cleanrl_scaling.utils.aggregate curves "$RUNS_DIR" --only-finished --group-by num_envs num_steps \
  --label "N={num_envs} T={num_steps}" --metric diagnostics/feature_rank diagnostics/dormant_frac \
  diagnostics/weight_norm diagnostics/grad_kurtosis charts/eval_return \
  --title "M25 Fig. 14: PQN network metrics against N and T" --out "$OUT_DIR/mayor2025_fig14"
