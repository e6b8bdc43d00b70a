#!/usr/bin/env bash
# M25 Fig. 1b, and from the same runs Figs. 3, 4 and 10 (feature rank, dormant units, weight norm, gradient
# kurtosis, policy variance, ESS): growing the batch through N (envs) or through T (rollout length). M25 §4–5.
# Our choice, not the paper's: the N and T values (our copy of M25 lost them; N x T grows from CleanRL's 8 x 128).
# Runs with --cleanrl-compat (CleanRL's semantics, as M25 ran them); CLEANRL_COMPAT=0 runs the default mode.
RUNS_DIR=${RUNS_DIR:-runs/mayor2025_fig1b}
LARGEST_BATCH=8192  # 64 x 128 and 8 x 1024
source "$(dirname "$0")/_mayor2025_common.sh"
launch mayor2025_fig1b --flag-set "--num-envs 8 --num-steps 128" --flag-set "--num-envs 16 --num-steps 128" \
  --flag-set "--num-envs 32 --num-steps 128" --flag-set "--num-envs 64 --num-steps 128" \
  --flag-set "--num-envs 8 --num-steps 256" --flag-set "--num-envs 8 --num-steps 512" \
  --flag-set "--num-envs 8 --num-steps 1024" -- --total-timesteps "$TOTAL" --diagnostics-every 10
figure fig1b "num_envs num_steps" "N={num_envs} T={num_steps}"
[[ -n "${DRY_RUN:-}" || -n "${SLURM:-}" ]] && exit 0
"$PYTHON" -m cleanrl_scaling.utils.aggregate curves "$RUNS_DIR" --only-finished --group-by num_envs num_steps \
  --label "N={num_envs} T={num_steps}" --metric diagnostics/feature_rank diagnostics/dormant_frac \
  diagnostics/weight_norm diagnostics/grad_kurtosis diagnostics/policy_variance diagnostics/ess_pct \
  --title "M25 Figs. 3-4: network metrics against N and T" --out "$OUT_DIR/mayor2025_fig3_fig4"
