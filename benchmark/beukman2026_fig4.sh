#!/usr/bin/env bash
# B26 Fig. 4 (Jax2D locomotion, ppo_ewma_jax2d.py): tuning Adam's learning rate cannot make up for a bad outer step
# size (COM). Page: docs/ppo_ewma_jax2d.md
# Grid: learning rate x COM x annealing on/off (B26: "we sweep over whether or not to anneal LR for each run, and show
# the best result per learning rate"). The figure: final solve rate against the learning rate, one line per COM, at
# each point the better of annealing or not (aggregate sweep --best-over anneal_lr).
# Our choice, not the paper's: the learning rates, the COMs, the budget (100M steps), 5 seeds.
# Scale: the paper's budgets need a GPU; on a CPU lower TOTAL and FLAGS="--num-envs ...".
# Environment (see _beukman2026_common.sh): RUNS_DIR (runs/beukman2026_fig4), OUT_DIR, WORKERS, SEEDS, FLAGS, PYTHON,
# DRY_RUN; TOTAL (steps per run, 100000000).
RUNS_DIR=${RUNS_DIR:-runs/beukman2026_fig4}
source "$(dirname "$0")/_beukman2026_common.sh"
TOTAL=${TOTAL:-100000000}
positive_int TOTAL "$TOTAL"
one_update_fits TOTAL "$TOTAL" "$(flag_value num-envs 2048)"
not_in_flags learning-rate ewma-com anneal-lr no-anneal-lr total-timesteps
launch --job-name beukman2026_fig4 --sweep learning-rate=0.0001,0.0003,0.001,0.003 --sweep ewma-com=2,8,32,128 \
  --sweep anneal-lr=true,false -- --total-timesteps "$TOTAL"
aggregate sweep --metric charts/solve_rate --stat final --x-key learning_rate --group-by ewma_com \
  --best-over anneal_lr --label "COM {ewma_com}" --logx --xlabel "Adam learning rate" --ylabel "final solve rate" \
  --title "B26 Fig. 4: best of annealing on/off per learning rate ($BAND_TEXT)" \
  --out "$OUT_DIR/beukman2026_fig4"
