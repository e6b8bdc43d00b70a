#!/usr/bin/env bash
# B26 Fig. 5a (Jax2D locomotion, ppo_ewma_jax2d.py): the proximal policy's center of mass sets the outer step size:
# too low a COM plateaus early, too high a COM learns slowly. Page: docs/ppo_ewma_jax2d.md
# The figure: charts/solve_rate against environment steps, one line per COM.
# Our choice, not the paper's: the COMs, the budget (100M steps), 5 seeds.
# Scale: the paper's budgets need a GPU; on a CPU lower TOTAL and FLAGS="--num-envs ...".
# Environment (see _beukman2026_common.sh): RUNS_DIR (runs/beukman2026_fig5a), OUT_DIR, WORKERS, SEEDS, FLAGS, PYTHON,
# DRY_RUN; TOTAL (steps per run, 100000000).
RUNS_DIR=${RUNS_DIR:-runs/beukman2026_fig5a}
source "$(dirname "$0")/_beukman2026_common.sh"
TOTAL=${TOTAL:-100000000}
positive_int TOTAL "$TOTAL"
one_update_fits TOTAL "$TOTAL" "$(flag_value num-envs 2048)"
not_in_flags ewma-com total-timesteps
launch --job-name beukman2026_fig5a --sweep ewma-com=1,2,4,8,16,32,64 -- --total-timesteps "$TOTAL"
aggregate curves --metric charts/solve_rate --group-by ewma_com --label "COM {ewma_com}" --x global_step \
  --ylabel "solve rate" --title "B26 Fig. 5a: PPO-EWMA, changing the COM (mean and 95% CI over seeds)" \
  --out "$OUT_DIR/beukman2026_fig5a"
