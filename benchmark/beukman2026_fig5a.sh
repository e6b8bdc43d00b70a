#!/usr/bin/env bash
# B26 Figs. 1a and 5a (Jax2D locomotion, ppo_ewma_jax2d.py): the proximal policy's center of mass sets the outer step
# size: too low a COM plateaus early, too high a COM learns slowly. Fig. 1a shows three of Fig. 5a's COMs.
# The figures: charts/solve_rate against environment steps, one line per COM (Fig. 1a: the lowest, a middle and the
# highest COM of the grid). Figs. 2b and 2c from the same runs: the gradient norm before clipping and the KL from the
# behaviour policy after each update (diagnostics/grad_norm, diagnostics/kl_behavior) per COM.
# Pages: docs/ppo_ewma_jax2d.md, docs/reproducing/beukman2026_fig1a_fig5a.md
# Our choice, not the paper's: the COMs (B26 does not list Fig. 5a's), the budget, the seeds.
#   SCALE=paper (default): all 512 tasks, B26 Table 2 (2048 envs x 256 steps), COMs 1-64, 100M steps, 5 seeds: GPU scale.
#   SCALE=laptop: the 8 tasks of --task-seed 31 (the CPU learning check of docs/ppo_ewma_jax2d.md, chosen before any
#   COM was run), 64 envs x 128 steps, 8 minibatches x 8 epochs, COMs 1, 4, 16, 64, 819,200 steps (100 updates),
#   2 seeds: 8 runs of ~19 min on one core, ~2.5 CPU-hours (docs/reproducing/beukman2026_fig1a_fig5a.md).
# Environment (see _beukman2026_common.sh): SCALE, RUNS_DIR (runs/beukman2026_fig5a), OUT_DIR, WORKERS, SEEDS, FLAGS,
# PYTHON, DRY_RUN; TOTAL (steps per run), COMS (comma-separated).
RUNS_DIR=${RUNS_DIR:-runs/beukman2026_fig5a}
if [[ "${SCALE:-paper}" == laptop ]]; then
  SEEDS=${SEEDS:-1 2}; BAND=${BAND:-minmax}; TOTAL=${TOTAL:-819200}; COMS=${COMS:-1,4,16,64}
  FLAGS=${FLAGS:---task-seed 31 --num-tasks 8 --num-envs 64 --num-steps 128 --num-minibatches 8 --update-epochs 8 --eval-every 5 --diagnostics-every 5}
fi
LAPTOP_GRID=1
source "$(dirname "$0")/_beukman2026_common.sh"
TOTAL=${TOTAL:-100000000}
COMS=${COMS:-1,2,4,8,16,32,64}
positive_int TOTAL "$TOTAL"
[[ "$COMS" =~ ^[0-9.]+(,[0-9.]+)+$ ]] || die "COMS=$COMS: must be two or more comma-separated centers of mass, e.g. 1,4,16"
one_update_fits TOTAL "$TOTAL" "$(flag_value num-envs 2048)"
not_in_flags ewma-com total-timesteps
launch --job-name beukman2026_fig5a --sweep "ewma-com=$COMS" -- --total-timesteps "$TOTAL"
aggregate curves --band "$BAND" --metric charts/solve_rate --group-by ewma_com --label "COM {ewma_com}" \
  --x global_step --ylabel "solve rate" --title "B26 Fig. 5a: PPO-EWMA, changing the COM ($BAND_TEXT)" \
  --out "$OUT_DIR/beukman2026_fig5a"
# the same curves from every training episode (thousands per update; the evaluation above: --eval-attempts episodes per task)
aggregate curves --band "$BAND" --metric charts/train_solve_rate --group-by ewma_com --label "COM {ewma_com}" \
  --x global_step --ylabel "solve rate, training episodes" \
  --title "B26 Fig. 5a from the training episodes ($BAND_TEXT)" \
  --out "$OUT_DIR/beukman2026_fig5a_train"
IFS=, read -r -a C <<< "$COMS"
aggregate curves --band "$BAND" --filter "ewma_com=${C[0]},${C[${#C[@]} / 2]},${C[-1]}" --metric charts/solve_rate \
  --group-by ewma_com --label "COM {ewma_com}" --x global_step --ylabel "solve rate" \
  --title "B26 Fig. 1a: PPO-EWMA, too low a COM plateaus ($BAND_TEXT)" \
  --out "$OUT_DIR/beukman2026_fig1a"
aggregate curves --band "$BAND" --metric diagnostics/grad_norm --group-by ewma_com --label "COM {ewma_com}" \
  --x global_step --logy --ylabel "gradient norm (before clipping)" \
  --title "B26 Fig. 2b: gradient norm per COM ($BAND_TEXT)" \
  --out "$OUT_DIR/beukman2026_fig2b"
aggregate curves --band "$BAND" --metric diagnostics/kl_behavior --group-by ewma_com --label "COM {ewma_com}" \
  --x global_step --logy --ylabel "KL(behaviour || after the update)" \
  --title "B26 Fig. 2c: KL to the behaviour policy per COM ($BAND_TEXT)" \
  --out "$OUT_DIR/beukman2026_fig2c"
