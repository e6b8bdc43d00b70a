#!/usr/bin/env bash
# B26 Fig. 18 (App. E.2, sfl_kinetix_jax.py): SFL at 8192 envs with PPO-EWMA: a larger center of mass (more
# regularisation, a smaller outer step) plateaus later. One panel per level size, one line per COM (0 = PPO).
# Grid: env size s, m, l x --ewma-com 0, 64, 256, 1024 x 3 seeds on --preset 8192 (one update = 8 epochs x 128
# minibatches = 1024 minibatch steps). Page: docs/sfl_kinetix_jax.md
# Our choice, not the paper's: the COMs (B26 does not list them) and the budget (TOTAL, 10B steps).
# Environment (see _beukman2026_common.sh): RUNS_DIR (runs/beukman2026_fig18), OUT_DIR, WORKERS, SEEDS ("1 2 3"),
# FLAGS, PYTHON, DRY_RUN, SLURM; TOTAL (steps per run, 10000000000), SIZES ("s m l"), COMS ("0 64 256 1024").
RUNS_DIR=${RUNS_DIR:-runs/beukman2026_fig18}
SCRIPT=cleanrl_scaling/sfl_kinetix_jax.py
SEEDS=${SEEDS:-1 2 3}
source "$(dirname "$0")/_beukman2026_common.sh"
TOTAL=${TOTAL:-10000000000}
read -r -a SIZES <<< "${SIZES:-s m l}"
read -r -a COMS <<< "${COMS:-0 64 256 1024}"
positive_int TOTAL "$TOTAL"
one_update_fits TOTAL "$TOTAL" "$(flag_value num-envs 8192)"
not_in_flags env-size preset ewma-com total-timesteps
launch --job-name beukman2026_fig18 --sweep "env-size=$(IFS=,; echo "${SIZES[*]}")" \
  --sweep "ewma-com=$(IFS=,; echo "${COMS[*]}")" -- --preset 8192 --total-timesteps "$TOTAL"
aggregate curves --metric charts/solve_rate_random --panel-by env_size --group-by ewma_com --label "COM {ewma_com}" \
  --x global_step --ylabel "solve rate (random levels)" \
  --title "B26 Fig. 18: 8192 envs, PPO-EWMA ($BAND_TEXT)" --out "$OUT_DIR/beukman2026_fig18"
