#!/usr/bin/env bash
# M25 Fig. 2 (§4, App. B.7): state coverage of the rollout batches when a fixed N x T = 1024 is spent on more
# envs N with a shorter rollout T. Every run saves the penultimate features of 1024 (paper: 512) batch states
# every K iterations; cleanrl_scaling/utils/coverage.py fits one UMAP per game on all runs' features and counts
# the occupied cells of a 50 x 50 grid, cumulatively (M25's Cvg). The same runs give Figs. 3-4's network metrics
# against N. Our choice, not the paper's: the N values (our copy of M25 lost them) and the feature schedule.
# Runs with --cleanrl-compat (CleanRL's semantics, as M25 ran them); CLEANRL_COMPAT=0 runs the default mode.
#   SCALE=paper (default): Atari-10, 5 seeds, 100M steps, features every 2000 iterations: GPU scale.
#   SCALE=laptop: Qbert-v5, 2 seeds, 250k steps, features every 25 iterations: 6 runs, 77 minutes on 2 cores
#   with WORKERS=2 (see docs/reproducing/mayor2025_fig2.md).
RUNS_DIR=${RUNS_DIR:-runs/mayor2025_fig2}
if [[ "${SCALE:-paper}" == laptop ]]; then
  GAMES=${GAMES:-Qbert-v5}; SEEDS=${SEEDS:-1 2}; TOTAL=${TOTAL:-250000}; EVERY=${EVERY:-25}; STATES=${STATES:-1024}
fi
LAPTOP_GRID=1
LARGEST_BATCH=1024  # every grid point: N x T = 1024
source "$(dirname "$0")/_mayor2025_common.sh"
EVERY=${EVERY:-2000}
STATES=${STATES:-512}
launch mayor2025_fig2 --flag-set "--num-envs 8 --num-steps 128" --flag-set "--num-envs 32 --num-steps 32" \
  --flag-set "--num-envs 128 --num-steps 8" -- --total-timesteps "$TOTAL" --diagnostics-every 10 \
  --save-features-every "$EVERY" --features-states "$STATES"
[[ -n "${DRY_RUN:-}" || -n "${SLURM:-}" ]] && exit 0
for game in "${GAMES[@]}"; do  # one embedding per game: features of different games share no space
  "$PYTHON" -m cleanrl_scaling.utils.coverage "$RUNS_DIR" --only-finished --env-id "$game" --group-by num_envs num_steps \
    --title "M25 Fig. 2: $game, coverage at N x T = 1024" --out "$OUT_DIR/mayor2025_fig2_coverage_$game"
done
"$PYTHON" -m cleanrl_scaling.utils.aggregate curves "$RUNS_DIR" --only-finished --group-by num_envs num_steps \
  --label "N={num_envs} T={num_steps}" --metric charts/episodic_return diagnostics/feature_rank \
  diagnostics/dormant_frac diagnostics/weight_norm diagnostics/grad_kurtosis diagnostics/policy_variance \
  diagnostics/ess_pct --title "M25 Figs. 3-4 at N x T = 1024" --out "$OUT_DIR/mayor2025_fig2_network"
for metric in charts/episodic_return diagnostics/feature_rank diagnostics/dormant_frac diagnostics/weight_norm \
    diagnostics/grad_kurtosis diagnostics/policy_variance diagnostics/ess_pct; do  # Figs. 3-4's direction: vs N
  "$PYTHON" -m cleanrl_scaling.utils.aggregate sweep "$RUNS_DIR" --only-finished --x-key num_envs --metric "$metric" --stat final \
    --final-frac 0.5 --logx --label "N x T = 1024" --title "M25 Figs. 3-4 at N x T = 1024: second-half mean" \
    --out "$OUT_DIR/mayor2025_fig2_vs_n_${metric#*/}"
done
