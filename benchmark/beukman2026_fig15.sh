#!/usr/bin/env bash
# B26 Figs. 15 and 16 (App. D, sfl_kinetix_jax.py): SFL with 1M envs and different numbers of minibatches. Fig. 15
# the random-level solve rate against steps, Fig. 16a steps per second (the last charts/SPS) against the number of
# minibatches, Fig. 16b the solve rate against wall-clock seconds; one panel per level size. B26: 32 minibatches
# (Kinetix's default) learns worse and runs out of memory on l; 8192 is slightly more sample-efficient than 1024 but
# much slower. beukman2026_fig16.sh runs this script. Page: docs/sfl_kinetix_jax.md
# Grid: env size s, m, l x minibatches 32, 1024, 8192 x 3 seeds, on --preset 1m with --scaling-recipe none and
# --lr-scaling sqrt: lr = 5e-5 x sqrt(minibatch size / 16384), which gives App. D's 2e-4 at 1024 minibatches.
# Our choice, not the paper's: the lr of the 32 and 8192 settings (B26 does not state it), the budget (TOTAL, 100B).
# Environment (see _beukman2026_common.sh): RUNS_DIR (runs/beukman2026_fig15), OUT_DIR, WORKERS, SEEDS ("1 2 3"),
# FLAGS, PYTHON, DRY_RUN, SLURM; TOTAL (steps per run, 100000000000), SIZES ("s m l"), MINIBATCHES ("32 1024 8192").
RUNS_DIR=${RUNS_DIR:-runs/beukman2026_fig15}
SCRIPT=cleanrl_scaling/sfl_kinetix_jax.py
SEEDS=${SEEDS:-1 2 3}
source "$(dirname "$0")/_beukman2026_common.sh"
TOTAL=${TOTAL:-100000000000}
read -r -a SIZES <<< "${SIZES:-s m l}"
read -r -a MINIBATCHES <<< "${MINIBATCHES:-32 1024 8192}"
positive_int TOTAL "$TOTAL"
for mb in "${MINIBATCHES[@]}"; do positive_int MINIBATCHES "$mb"; done
one_update_fits TOTAL "$TOTAL" "$(flag_value num-envs 1048576)"
not_in_flags env-size preset num-minibatches scaling-recipe lr-scaling total-timesteps
launch_presets beukman2026_fig15 1m -- --sweep "env-size=$(IFS=,; echo "${SIZES[*]}")" \
  --sweep "num-minibatches=$(IFS=,; echo "${MINIBATCHES[*]}")" \
  -- --scaling-recipe none --lr-scaling sqrt --total-timesteps "$TOTAL"
aggregate curves --metric charts/solve_rate_random --panel-by env_size --group-by num_minibatches \
  --label "{num_minibatches} minibatches" --x global_step --ylabel "solve rate (random levels)" \
  --title "B26 Fig. 15: 1M envs, number of minibatches ($BAND_TEXT)" --out "$OUT_DIR/beukman2026_fig15"
aggregate sweep --metric charts/SPS --stat last --x-key num_minibatches --group-by env_size --label "{env_size}" \
  --logx --xlabel "minibatches" --ylabel "steps per second" \
  --title "B26 Fig. 16a: steps per second against minibatches (the Fig. 15 runs)" --out "$OUT_DIR/beukman2026_fig16a"
aggregate curves --metric charts/solve_rate_random --panel-by env_size --group-by num_minibatches \
  --label "{num_minibatches} minibatches" --x wall_time --ylabel "solve rate (random levels)" \
  --title "B26 Fig. 16b: solve rate against wall-clock time (the Fig. 15 runs)" --out "$OUT_DIR/beukman2026_fig16b"
