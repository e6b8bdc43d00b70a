#!/usr/bin/env bash
# B26 Fig. 5b (Jax2D locomotion, ppo_ewma_jax2d.py): PPO's clipping epsilon sets the outer step size: too large an
# epsilon plateaus early, too small a one learns slowly. Page: docs/ppo_ewma_jax2d.md
# The figure: charts/solve_rate against environment steps, one line per epsilon.
# Our choice, not the paper's: the epsilons, the budget (100M steps), 5 seeds.
# Scale: the paper's budgets need a GPU; on a CPU lower TOTAL and FLAGS="--num-envs ...".
# Environment (see _beukman2026_common.sh): RUNS_DIR (runs/beukman2026_fig5b), OUT_DIR, WORKERS, SEEDS, FLAGS, PYTHON,
# DRY_RUN; TOTAL (steps per run, 100000000).
RUNS_DIR=${RUNS_DIR:-runs/beukman2026_fig5b}
source "$(dirname "$0")/_beukman2026_common.sh"
TOTAL=${TOTAL:-100000000}
positive_int TOTAL "$TOTAL"
one_update_fits TOTAL "$TOTAL" "$(flag_value num-envs 2048)"
not_in_flags clip-coef ewma-com total-timesteps
launch --job-name beukman2026_fig5b --sweep clip-coef=0.05,0.1,0.2,0.4,0.6,0.8 -- --total-timesteps "$TOTAL"
aggregate curves --metric charts/solve_rate --group-by clip_coef --label "ε = {clip_coef}" --x global_step \
  --ylabel "solve rate" --title "B26 Fig. 5b: PPO, changing ε ($BAND_TEXT)" \
  --out "$OUT_DIR/beukman2026_fig5b"
