#!/usr/bin/env bash
# B26 Figs. 1a and 5a (Jax2D locomotion, ppo_ewma_jax2d.py): the proximal policy's center of mass sets the outer step
# size: too low a COM plateaus early, too high a COM learns slowly. Fig. 1a shows three of Fig. 5a's COMs.
# The figures: charts/solve_rate against environment steps, one line per COM (Fig. 1a: the lowest, a middle and the
# highest COM of the grid). Figs. 2b and 2c from the same runs: the gradient norm before clipping and the KL from the
# behaviour policy after each update (diagnostics/grad_norm, diagnostics/kl_behavior) per COM.
# Pages: docs/ppo_ewma_jax2d.md, docs/reproducing/beukman2026_fig1a_fig5a.md
# Our choice, not the paper's: the COMs (B26 does not list Fig. 5a's), the budget, the seeds.
#   SCALE=paper (default): all 512 tasks, B26 Table 2 (2048 envs x 256 steps), COMs 1-64, 100M steps, 5 seeds: GPU scale.
#   SCALE=laptop (docs/reproducing/beukman2026_jax2d_design.md): the common setting of
#   benchmark/_beukman2026_jax2d_main.sh (16 tasks of --task-seed 31, 64 envs x 128 steps, 32 minibatches x 8
#   epochs, Table 2, evaluation every 20 updates x 20 episodes per task, diagnostics every 10, seeds 1 2 3), the
#   pilot's COM grid C_LOW..C_HIGH in x4 steps (COMS) and U updates (PLACEMENT, or COMS, C_LOW, C_STAR, C_HIGH, U):
#   ~0.73 CPU-hours per run at U = 200 (1.08 at 300), 5 COMs x 3 seeds = 11.0 CPU-hours (16.2 at U = 300); WORKERS=2
#   runs two at once, one core each. Fig. 1a draws the lowest COM, C_STAR and the highest. These runs are also
#   Fig. 7a's N = 64 arms, Fig. 3a's references and phase 1 (each keeps its state at update U/2) and Fig. 8's dots
#   (FIG5A_DIR in those scripts). RESUME=1 continues.
#   The rules, fixed before the main runs (benchmark/beukman2026_jax2d_rule.py prints them per seed):
#   per run, final = mean evaluation solve rate of the last three evaluations (updates U-40, U-20, U), mid = of the
#   three around U/2 (the nearest, the earlier on a tie, and its two neighbours), late gain = final - mid; the
#   training solve rate pooled over 20-update windows (updates 1-20, 21-40, ...), learned = best window - first
#   window; "in >= 2 of 3 seeds" pairs the arms by seed. Fig. 5a: (a) plateau: C_LOW's late gain <= 0.01, its final
#   <= C_STAR's final - 0.05 and its learned >= 0.03, in the seed mean and in >= 2 of 3 seeds; (b) slow: C_HIGH's
#   final <= C_STAR's final - 0.05 and its late gain > 0.01, in the seed mean and in >= 2 of 3 seeds; yes = (a) and
#   (b), partly = one, no = neither. Fig. 1a: the same on its three lines (the lowest COM as C_LOW, the highest as
#   C_HIGH). Fig. 2c: yes if in every seed the median KL to the behaviour policy over the second half (updates >
#   U/2) falls strictly with the COM and C_LOW's is >= 3x C_STAR's; else no. Fig. 2b: yes if in every seed C_LOW's
#   median gradient norm (over the run) is >= 1.5x every higher COM's; else no.
# Environment (see _beukman2026_common.sh): SCALE, RUNS_DIR (runs/beukman2026_fig5a), OUT_DIR, WORKERS, SEEDS, FLAGS,
# PYTHON, DRY_RUN, RESUME; TOTAL (steps per run, paper), COMS (comma-separated); laptop: PLACEMENT, C_LOW, C_STAR,
# C_HIGH, U.
RUNS_DIR=${RUNS_DIR:-runs/beukman2026_fig5a}
if [[ "${SCALE:-paper}" == laptop ]]; then
  source "$(dirname "$0")/_beukman2026_jax2d_main.sh"
  FLAGS=${FLAGS:-$JAX2D_SETTING --num-envs 64}
fi
LAPTOP_GRID=1
source "$(dirname "$0")/_beukman2026_common.sh"
KEEP=()
if [[ "$SCALE" == laptop ]]; then
  jax2d_grid COMS U C_LOW C_STAR C_HIGH
  GRID=,$(tr , '\n' <<< "$COMS" | xargs printf '%g,')
  for name in C_LOW C_STAR C_HIGH; do
    [[ "$GRID" == *",${!name},"* ]] || die "$name=${!name} is not in COMS=$COMS: the rules compare runs of the grid"
  done
  TOTAL=$(steps_of "$U")
  KEEP=(--keep-checkpoints $((U / 2)))  # the state at U/2: Fig. 3a's phase 1 (its switched runs start there)
fi
TOTAL=${TOTAL:-100000000}
COMS=${COMS:-1,2,4,8,16,32,64}
positive_int TOTAL "$TOTAL"
[[ "$COMS" =~ ^[0-9.]+(,[0-9.]+)+$ ]] || die "COMS=$COMS: must be two or more comma-separated centers of mass, e.g. 1,4,16"
one_update_fits TOTAL "$TOTAL" "$(flag_value num-envs 2048)"
not_in_flags ewma-com total-timesteps
launch --job-name beukman2026_fig5a --sweep "ewma-com=$COMS" -- --total-timesteps "$TOTAL" "${KEEP[@]}"
aggregate curves --band "$BAND" --metric charts/solve_rate --group-by ewma_com --label "COM {ewma_com}" \
  --x global_step --ylabel "solve rate" --title "B26 Fig. 5a: PPO-EWMA, changing the COM ($BAND_TEXT)" \
  --out "$OUT_DIR/beukman2026_fig5a"
# the same curves from every training episode (thousands per update; the evaluation above: --eval-attempts episodes per task)
aggregate curves --band "$BAND" --metric charts/train_solve_rate --group-by ewma_com --label "COM {ewma_com}" \
  --x global_step --ylabel "solve rate, training episodes" \
  --title "B26 Fig. 5a from the training episodes ($BAND_TEXT)" \
  --out "$OUT_DIR/beukman2026_fig5a_train"
IFS=, read -r -a C <<< "$COMS"
LINES="${C[0]},${C[${#C[@]} / 2]},${C[-1]}"
if [[ "$SCALE" == laptop ]]; then  # the lowest COM, C_STAR and the highest
  SORTED=($(tr , '\n' <<< "$COMS" | sort -g)); LINES="${SORTED[0]},$C_STAR,${SORTED[-1]}"
fi
PALETTE=$(tr , '\n' <<< "$COMS" | sort -g | xargs printf 'COM %g,' | sed 's/,$//')  # Fig. 5a's colours in Fig. 1a
aggregate curves --band "$BAND" --filter "ewma_com=$LINES" --metric charts/solve_rate \
  --group-by ewma_com --label "COM {ewma_com}" --palette "$PALETTE" --x global_step --ylabel "solve rate" \
  --title "B26 Fig. 1a: PPO-EWMA, the lowest COM, a middle one and the highest ($BAND_TEXT)" \
  --out "$OUT_DIR/beukman2026_fig1a"
aggregate curves --band "$BAND" --metric diagnostics/grad_norm --group-by ewma_com --label "COM {ewma_com}" \
  --x global_step --logy --ylabel "gradient norm (before clipping)" \
  --title "B26 Fig. 2b: gradient norm per COM ($BAND_TEXT)" \
  --out "$OUT_DIR/beukman2026_fig2b"
aggregate curves --band "$BAND" --metric diagnostics/kl_behavior --group-by ewma_com --label "COM {ewma_com}" \
  --x global_step --logy --ylabel "KL(behaviour || after the update)" \
  --title "B26 Fig. 2c: KL to the behaviour policy per COM ($BAND_TEXT)" \
  --out "$OUT_DIR/beukman2026_fig2c"
[[ "$SCALE" == laptop && -z "${DRY_RUN:-}" && -z "${SLURM:-}" ]] || exit 0
RULE=("$PYTHON" benchmark/beukman2026_jax2d_rule.py)
"${RULE[@]}" fig5a "$RUNS_DIR" --low "$C_LOW" --star "$C_STAR" --high "$C_HIGH" --out "$OUT_DIR/beukman2026_fig5a_rule"
"${RULE[@]}" fig1a "$RUNS_DIR" --low "${SORTED[0]}" --star "$C_STAR" --high "${SORTED[-1]}" \
  --out "$OUT_DIR/beukman2026_fig1a_rule"
"${RULE[@]}" fig2c "$RUNS_DIR" --low "$C_LOW" --star "$C_STAR" --out "$OUT_DIR/beukman2026_fig2c_rule"
"${RULE[@]}" fig2b "$RUNS_DIR" --low "$C_LOW" --star "$C_STAR" --out "$OUT_DIR/beukman2026_fig2b_rule"
