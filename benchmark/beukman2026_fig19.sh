#!/usr/bin/env bash
# B26 Fig. 19 (App. E.3, sfl_kinetix_jax.py): SFL at 8192 envs with the 1M run's filtering: more levels scored
# (N = 4,194,304 as the 1m preset), or that and a larger buffer; neither prevents the 8192-env plateau.
# Grid: env size s, m, l x {8192 preset; N 4194304; N 4194304 and K 131072} x 3 seeds. Page: docs/sfl_kinetix_jax.md
# Our choice, not the paper's: the larger buffer (K x 16, as N grew x 16; B26 does not give its size) and the budget
# (TOTAL, 10B steps).
# Environment (see _beukman2026_common.sh): RUNS_DIR (runs/beukman2026_fig19), OUT_DIR, WORKERS, SEEDS ("1 2 3"),
# FLAGS, PYTHON, DRY_RUN, SLURM; TOTAL (steps per run, 10000000000), SIZES ("s m l").
RUNS_DIR=${RUNS_DIR:-runs/beukman2026_fig19}
SCRIPT=cleanrl_scaling/sfl_kinetix_jax.py
SEEDS=${SEEDS:-1 2 3}
source "$(dirname "$0")/_beukman2026_common.sh"
TOTAL=${TOTAL:-10000000000}
read -r -a SIZES <<< "${SIZES:-s m l}"
positive_int TOTAL "$TOTAL"
one_update_fits TOTAL "$TOTAL" "$(flag_value num-envs 8192)"
not_in_flags env-size preset sfl-num-levels sfl-buffer-size exp-name total-timesteps
launch --job-name beukman2026_fig19 --sweep "env-size=$(IFS=,; echo "${SIZES[*]}")" \
  --flag-set "--exp-name baseline" \
  --flag-set "--exp-name more_filtering --sfl-num-levels 4194304" \
  --flag-set "--exp-name more_filtering_larger_buffer --sfl-num-levels 4194304 --sfl-buffer-size 131072" \
  -- --preset 8192 --total-timesteps "$TOTAL"
aggregate curves --metric charts/solve_rate_random --panel-by env_size --label "{exp_name}" \
  --x global_step --ylabel "solve rate (random levels)" \
  --title "B26 Fig. 19: 8192 envs, more filtering and a larger buffer ($BAND_TEXT)" --out "$OUT_DIR/beukman2026_fig19"
