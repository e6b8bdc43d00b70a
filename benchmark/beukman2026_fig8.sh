#!/usr/bin/env bash
# B26 Fig. 8 (Jax2D locomotion, ppo_ewma_jax2d.py): the data-to-divergence ratio (diagnostics/ddr, B26 §4.4) against
# the maximum solve rate of each run, for several sample budgets: the best DDR grows with the budget.
# Page: docs/ppo_ewma_jax2d.md. The figure: a scatter, one dot per run (its mean DDR, its max charts/solve_rate), one
# colour per budget. The DDR is varied through the COM (PPO-EWMA) and epsilon (PPO).
# The budgets are a list (BUDGETS); TOTAL does not apply and is refused.
# Our choice, not the paper's: the budgets (25M, 100M, 400M steps), COMs, epsilons, 5 seeds.
# Scale: the paper's budgets need a GPU; on a CPU lower BUDGETS and FLAGS="--num-envs ...".
#   SCALE=laptop (docs/reproducing/beukman2026_jax2d_design.md): no new runs. The dots are the Fig. 5a
#   (COM) and Fig. 5b (epsilon) laptop runs (FIG5A_DIR, FIG5B_DIR: 64 envs x 128 steps, U updates from the pilot's
#   placement, PLACEMENT, or U), and the budgets are their prefixes: a run's first U/4, U/2 and U updates (with a
#   constant learning rate nothing before update k depends on the budget; to be checked on one pair of runs before
#   the verdict is relied on). Fig. 7a's N = 16 runs and Fig. 3a's are left out (at N = 16 a prefix of k updates is
#   another sample budget; Fig. 3a's runs repeat Fig. 5a's). benchmark/beukman2026_jax2d_rule.py fig8 draws the
#   scatter (one dot per run and budget: its mean diagnostics/ddr and its max charts/solve_rate within the budget) and
#   prints the rule. Cost: seconds.
#   The rule, fixed before the main runs: per seed and budget b, DDR*(b) = the mean DDR over the first b updates of
#   the run (COM or epsilon) with the highest max evaluation solve rate within b (on a tie, the mean over the tied
#   runs); yes if DDR*(U) >= 1.5 x DDR*(U/4) in >= 2 of 3 seeds (the best DDR grows with the budget, B26 §4.4); no if
#   DDR*(U) <= DDR*(U/4) in >= 2 of 3 seeds; otherwise not shown. Only runs of at least U updates count.
# Environment (see _beukman2026_common.sh): SCALE, RUNS_DIR (runs/beukman2026_fig8), OUT_DIR, WORKERS, SEEDS, FLAGS,
# PYTHON, DRY_RUN; BUDGETS ("25000000 100000000 400000000": steps per run); laptop: PLACEMENT, U, FIG5A_DIR, FIG5B_DIR
# (runs/beukman2026_fig5b).
RUNS_DIR=${RUNS_DIR:-runs/beukman2026_fig8}
[[ "${SCALE:-paper}" == laptop ]] && source "$(dirname "$0")/_beukman2026_jax2d_main.sh"
LAPTOP_GRID=1
source "$(dirname "$0")/_beukman2026_common.sh"
if [[ "$SCALE" == laptop ]]; then
  jax2d_grid U
  FIG5B_DIR=${FIG5B_DIR:-runs/beukman2026_fig5b}
  if [[ -n "${DRY_RUN:-}" || -n "${SLURM:-}" ]]; then
    echo "# Fig. 8 (laptop) launches nothing: it draws from the runs in FIG5A_DIR=$FIG5A_DIR and FIG5B_DIR=$FIG5B_DIR"
    exit 0
  fi
  ROOTS=(); for dir in "$FIG5A_DIR" "$FIG5B_DIR"; do [[ -d "$dir" ]] && ROOTS+=("$dir"); done
  (( ${#ROOTS[@]} )) || die "no runs to draw: FIG5A_DIR=$FIG5A_DIR and FIG5B_DIR=$FIG5B_DIR do not exist; run \
benchmark/beukman2026_fig5a.sh (SCALE=laptop) first"
  "$PYTHON" benchmark/beukman2026_jax2d_rule.py fig8 "${ROOTS[@]}" --updates "$U" --figure "$OUT_DIR/beukman2026_fig8" \
    --out "$OUT_DIR/beukman2026_fig8_rule"
  exit 0
fi
[[ -z "${TOTAL:-}" ]] || die "TOTAL=$TOTAL does not apply: Fig. 8 compares several budgets; set BUDGETS instead"
read -r -a BUDGETS <<< "${BUDGETS:-25000000 100000000 400000000}"
for total in "${BUDGETS[@]}"; do
  positive_int BUDGETS "$total"
  one_update_fits BUDGETS "$total" "$(flag_value num-envs 2048)"
done
not_in_flags ewma-com clip-coef total-timesteps diagnostics-every
LIST=$(IFS=,; echo "${BUDGETS[*]}")
launch --job-name beukman2026_fig8_com --sweep "total-timesteps=$LIST" --sweep ewma-com=1,2,4,8,16,32,64,128 \
  -- --diagnostics-every 5
launch --job-name beukman2026_fig8_eps --sweep "total-timesteps=$LIST" --sweep clip-coef=0.05,0.1,0.2,0.4,0.6 \
  -- --diagnostics-every 5
aggregate scatter --x-metric diagnostics/ddr --x-stat mean --y-metric charts/solve_rate --y-stat max \
  --group-by total_timesteps --label "{total_timesteps} steps" --logx --xlabel "DDR (samples per unit KL)" \
  --ylabel "max solve rate" --title "B26 Fig. 8: DDR against max solve rate, one dot per run" \
  --out "$OUT_DIR/beukman2026_fig8"
