#!/usr/bin/env bash
# B26 Fig. 12 (Jax2D locomotion, ppo_ewma_jax2d.py): COM x epsilon: most COMs have an epsilon that performs well;
# extreme epsilons are unstable. Page: docs/ppo_ewma_jax2d.md. The figures: (a) the final solve rate of the best epsilon
# for each COM (aggregate sweep --best-over clip_coef), (b) the COM x epsilon heat map of the final solve rate.
# Our choice, not the paper's: the COMs, the epsilons, the budget (100M steps), 5 seeds.
# Scale: the paper's budgets need a GPU; on a CPU lower TOTAL and FLAGS="--num-envs ...".
# Environment (see _beukman2026_common.sh): RUNS_DIR (runs/beukman2026_fig12), OUT_DIR, WORKERS, SEEDS, FLAGS, PYTHON,
# DRY_RUN; TOTAL (steps per run, 100000000).
RUNS_DIR=${RUNS_DIR:-runs/beukman2026_fig12}
source "$(dirname "$0")/_beukman2026_common.sh"
TOTAL=${TOTAL:-100000000}
positive_int TOTAL "$TOTAL"
one_update_fits TOTAL "$TOTAL" "$(flag_value num-envs 2048)"
not_in_flags ewma-com clip-coef total-timesteps
launch --job-name beukman2026_fig12 --sweep ewma-com=1,2,4,8,16,32,64 --sweep clip-coef=0.05,0.1,0.2,0.4,0.8 \
  -- --total-timesteps "$TOTAL"
aggregate sweep --metric charts/solve_rate --stat final --x-key ewma_com --best-over clip_coef --label "best ε" \
  --logx --xlabel "COM" --ylabel "final solve rate" \
  --title "B26 Fig. 12a: the best ε for each COM ($BAND_TEXT)" --out "$OUT_DIR/beukman2026_fig12a"
aggregate heatmap --rows ewma_com --cols clip_coef --metric charts/solve_rate --stat final \
  --title "B26 Fig. 12b: final solve rate, COM x ε (mean over seeds)" --out "$OUT_DIR/beukman2026_fig12b"
