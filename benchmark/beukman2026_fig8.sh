#!/usr/bin/env bash
# B26 Fig. 8 (Jax2D locomotion, ppo_ewma_jax2d.py): the data-to-divergence ratio (diagnostics/ddr, B26 §4.4) against
# the maximum solve rate of each run, for several sample budgets: the best DDR grows with the budget.
# Page: docs/ppo_ewma_jax2d.md. The figure: a scatter, one dot per run (its mean DDR, its max charts/solve_rate), one
# colour per budget. The DDR is varied through the COM (PPO-EWMA) and epsilon (PPO).
# The budgets are a list (BUDGETS); TOTAL does not apply and is refused.
# Our choice, not the paper's: the budgets (25M, 100M, 400M steps), COMs, epsilons, 5 seeds.
# Scale: the paper's budgets need a GPU; on a CPU lower BUDGETS and FLAGS="--num-envs ...".
# Environment (see _beukman2026_common.sh): RUNS_DIR (runs/beukman2026_fig8), OUT_DIR, WORKERS, SEEDS, FLAGS, PYTHON,
# DRY_RUN; BUDGETS ("25000000 100000000 400000000": steps per run).
RUNS_DIR=${RUNS_DIR:-runs/beukman2026_fig8}
source "$(dirname "$0")/_beukman2026_common.sh"
[[ -z "${TOTAL:-}" ]] || die "TOTAL=$TOTAL does not apply: Fig. 8 compares several budgets; set BUDGETS instead"
read -r -a BUDGETS <<< "${BUDGETS:-25000000 100000000 400000000}"
for total in "${BUDGETS[@]}"; do
  positive_int BUDGETS "$total"
  one_update_fits BUDGETS "$total" "$(flag_value num-envs 2048)"
done
not_in_flags ewma-com clip-coef total-timesteps diagnostics-every
LIST=$(IFS=,; echo "${BUDGETS[*]}")
launch --job-name beukman2026_fig8_com --sweep "total-timesteps=$LIST" --sweep ewma-com=1,2,4,8,16,32,64,128 \
  -- --diagnostics-every 5
launch --job-name beukman2026_fig8_eps --sweep "total-timesteps=$LIST" --sweep clip-coef=0.05,0.1,0.2,0.4,0.6 \
  -- --diagnostics-every 5
aggregate scatter --x-metric diagnostics/ddr --x-stat mean --y-metric charts/solve_rate --y-stat max \
  --group-by total_timesteps --label "{total_timesteps} steps" --logx --xlabel "DDR (samples per unit KL)" \
  --ylabel "max solve rate" --title "B26 Fig. 8: DDR against max solve rate, one dot per run" \
  --out "$OUT_DIR/beukman2026_fig8"
