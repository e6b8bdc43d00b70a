#!/usr/bin/env bash
# B26 Fig. 17 (App. E.1, sfl_kinetix_jax.py): SFL at 8192 envs with a lower learning rate: 1e-5 (5x lower) avoids the
# early plateau of 5e-5 but is slow in wall-clock time. One panel per level size, one line per lr; the solve rate on
# random levels against steps. B26 also shows the 1M run for reference: see beukman2026_fig11.sh.
# Grid: env size s, m, l x lr 5e-5, 1e-5 x 3 seeds on --preset 8192. Page: docs/sfl_kinetix_jax.md
# Our choice, not the paper's: the budget (TOTAL, 10B steps).
# Environment (see _beukman2026_common.sh): RUNS_DIR (runs/beukman2026_fig17), OUT_DIR, WORKERS, SEEDS ("1 2 3"),
# FLAGS, PYTHON, DRY_RUN, SLURM; TOTAL (steps per run, 10000000000), SIZES ("s m l"), LRS ("5e-5 1e-5").
RUNS_DIR=${RUNS_DIR:-runs/beukman2026_fig17}
SCRIPT=cleanrl_scaling/sfl_kinetix_jax.py
SEEDS=${SEEDS:-1 2 3}
source "$(dirname "$0")/_beukman2026_common.sh"
TOTAL=${TOTAL:-10000000000}
read -r -a SIZES <<< "${SIZES:-s m l}"
read -r -a LRS <<< "${LRS:-5e-5 1e-5}"
positive_int TOTAL "$TOTAL"
one_update_fits TOTAL "$TOTAL" "$(flag_value num-envs 8192)"
not_in_flags env-size preset learning-rate total-timesteps
launch --job-name beukman2026_fig17 --sweep "env-size=$(IFS=,; echo "${SIZES[*]}")" \
  --sweep "learning-rate=$(IFS=,; echo "${LRS[*]}")" -- --preset 8192 --total-timesteps "$TOTAL"
aggregate curves --metric charts/solve_rate_random --panel-by env_size --group-by learning_rate --label "lr {learning_rate}" \
  --x global_step --ylabel "solve rate (random levels)" \
  --title "B26 Fig. 17: 8192 envs, learning rate ($BAND_TEXT)" --out "$OUT_DIR/beukman2026_fig17"
