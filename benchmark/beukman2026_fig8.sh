#!/usr/bin/env bash
# B26 Fig. 8 (Jax2D locomotion, ppo_ewma_jax2d.py). DDR (diagnostics/ddr) against the maximum solve rate, for several sample budgets: the best DDR grows with the budget.
# Page: docs/ppo_ewma_jax2d.md. A GPU is assumed for the paper's budgets; on CPU lower TOTAL (and NUM_ENVS).
# Environment (see _beukman2026_common.sh): RUNS_DIR (runs/beukman2026_fig8), WORKERS (1), SEEDS ("1 2 3 4 5"), TOTAL (total timesteps), PYTHON (python).
RUNS_DIR=${RUNS_DIR:-runs/beukman2026_fig8}
source "$(dirname "$0")/_beukman2026_common.sh"
for total in 25000000 100000000 400000000; do
  launch --job-name "beukman2026_fig8_com_$total" --sweep ewma-com=1,2,4,8,16,32,64,128 -- --total-timesteps "$total" \
    --diagnostics-every 5
  launch --job-name "beukman2026_fig8_eps_$total" --sweep clip-coef=0.05,0.1,0.2,0.4,0.6 -- --total-timesteps "$total" \
    --diagnostics-every 5
done
