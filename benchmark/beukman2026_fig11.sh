#!/usr/bin/env bash
# B26 Figs. 11 and 20 (SFL on Kinetix, sfl_kinetix_jax.py): SFL with 2048 envs (Kinetix's default) plateaus; with
# B26's recipe and 8k, 65k and 1M envs it keeps improving. One set of runs, two figures: Fig. 11 the solve rate on a
# fixed set of random levels (charts/solve_rate_random), Fig. 20 on the hand-designed levels
# (charts/solve_rate_handmade), both against steps, one panel per level size, one line per preset.
# Grid: env size s, m, l x preset 2048, 8192, 65536, 1m (B26 Table 3 with Table 2 and App. D) x 3 seeds (B26 App. A).
# Page: docs/sfl_kinetix_jax.md. beukman2026_fig20.sh runs this script.
# Our choice, not the paper's: one budget for every preset (TOTAL, 10B steps; B26's curves run to about 1T steps for
# 1M envs and are cut earlier for fewer envs, by wall-clock). Scale: 128 GPUs in B26; the 2048 preset needs a GPU.
# Environment (see _beukman2026_common.sh): RUNS_DIR (runs/beukman2026_fig11), OUT_DIR, WORKERS, SEEDS ("1 2 3"),
# FLAGS, PYTHON, DRY_RUN, SLURM; TOTAL (steps per run, 10000000000), SIZES ("s m l"), PRESETS ("2048 8192 65536 1m").
RUNS_DIR=${RUNS_DIR:-runs/beukman2026_fig11}
SCRIPT=cleanrl_scaling/sfl_kinetix_jax.py
SEEDS=${SEEDS:-1 2 3}
source "$(dirname "$0")/_beukman2026_common.sh"
TOTAL=${TOTAL:-10000000000}
read -r -a SIZES <<< "${SIZES:-s m l}"
read -r -a PRESETS <<< "${PRESETS:-2048 8192 65536 1m}"
positive_int TOTAL "$TOTAL"
for p in "${PRESETS[@]}"; do
  case $p in 2048) n=2048 ;; 8192) n=8192 ;; 65536) n=65536 ;; 1m) n=1048576 ;;
    *) die "PRESETS: $p is not one of 2048 8192 65536 1m" ;; esac
  one_update_fits TOTAL "$TOTAL" "$(flag_value num-envs "$n")"
done
not_in_flags env-size preset total-timesteps
launch_presets beukman2026_fig11 "${PRESETS[@]}" -- --sweep "env-size=$(IFS=,; echo "${SIZES[*]}")" \
  -- --total-timesteps "$TOTAL"  # under SLURM=1, 65536 and 1m are multi-node arrays of their own
aggregate curves --metric charts/solve_rate_random --panel-by env_size --group-by preset --label "{preset} envs" \
  --x global_step --logx --ylabel "solve rate (random levels)" \
  --title "B26 Fig. 11: SFL on Kinetix, random levels ($BAND_TEXT)" --out "$OUT_DIR/beukman2026_fig11"
aggregate curves --metric charts/solve_rate_handmade --panel-by env_size --group-by preset --label "{preset} envs" \
  --x global_step --logx --ylabel "solve rate (hand-designed levels)" \
  --title "B26 Fig. 20: SFL on Kinetix, hand-designed levels (the Fig. 11 runs)" --out "$OUT_DIR/beukman2026_fig20"
