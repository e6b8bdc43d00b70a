#!/usr/bin/env bash
# B26 Fig. 6 (Jax2D locomotion, ppo_ewma_jax2d.py): more epochs plateau earlier, less so under stronger
# regularisation: (a) epochs x COM (PPO-EWMA), (b) epochs x epsilon (plain PPO, COM 0). Page: docs/ppo_ewma_jax2d.md
# The figures: charts/solve_rate against environment steps, one panel per COM (6a) or epsilon (6b), one line per
# number of epochs. epsilon = 0 is B26's (§4.2: "even with a clipping term of epsilon = 0, a large number of epochs can
# be beneficial"): the clipped objective is defined there, its gradient stops once the ratio leaves 1.
# Our choice, not the paper's: the epoch counts, the COMs, the other epsilons, the budget (100M steps), 5 seeds.
# Scale: the paper's budgets need a GPU; on a CPU lower TOTAL and FLAGS="--num-envs ...".
# Environment (see _beukman2026_common.sh): RUNS_DIR (runs/beukman2026_fig6), OUT_DIR, WORKERS, SEEDS, FLAGS, PYTHON,
# DRY_RUN; TOTAL (steps per run, 100000000).
RUNS_DIR=${RUNS_DIR:-runs/beukman2026_fig6}
source "$(dirname "$0")/_beukman2026_common.sh"
TOTAL=${TOTAL:-100000000}
COMS=2,8,32
positive_int TOTAL "$TOTAL"
one_update_fits TOTAL "$TOTAL" "$(flag_value num-envs 2048)"
not_in_flags update-epochs ewma-com clip-coef total-timesteps
launch --job-name beukman2026_fig6_com --sweep update-epochs=1,2,4,8,16,32 --sweep "ewma-com=$COMS" \
  -- --total-timesteps "$TOTAL"
launch --job-name beukman2026_fig6_eps --sweep update-epochs=1,2,4,8,16,32 --sweep clip-coef=0,0.1,0.2,0.4 \
  -- --total-timesteps "$TOTAL"
aggregate curves --filter "ewma_com=$COMS" --metric charts/solve_rate --panel-by ewma_com --group-by update_epochs \
  --label "{update_epochs} epochs" --x global_step --ylabel "solve rate" \
  --title "B26 Fig. 6a: PPO-EWMA, epochs x COM ($BAND_TEXT)" --out "$OUT_DIR/beukman2026_fig6a"
aggregate curves --filter ewma_com=0 --metric charts/solve_rate --panel-by clip_coef --group-by update_epochs \
  --label "{update_epochs} epochs" --x global_step --ylabel "solve rate" \
  --title "B26 Fig. 6b: PPO, epochs x ε ($BAND_TEXT)" --out "$OUT_DIR/beukman2026_fig6b"
