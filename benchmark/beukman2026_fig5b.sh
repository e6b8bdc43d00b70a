#!/usr/bin/env bash
# B26 Fig. 5b (Jax2D locomotion, ppo_ewma_jax2d.py): PPO's clipping epsilon sets the outer step size: too large an
# epsilon plateaus early, too small a one learns slowly. Page: docs/ppo_ewma_jax2d.md
# The figure: charts/solve_rate against environment steps, one line per epsilon.
# Our choice, not the paper's: the epsilons, the budget (100M steps), 5 seeds.
# Scale: the paper's budgets need a GPU; on a CPU lower TOTAL and FLAGS="--num-envs ...".
#   SCALE=laptop (docs/reproducing/beukman2026_jax2d_design.md): Fig. 5a's laptop setting
#   (benchmark/_beukman2026_jax2d_main.sh: 16 tasks of --task-seed 31, 64 envs x 128 steps, 32 minibatches x 8
#   epochs, Table 2, evaluation every 20 updates x 20 episodes per task, seeds 1 2 3), plain PPO (COM 0) at EPSILONS
#   (0.1,0.2,0.4,0.8: x2 apart around Table 2's 0.2), U updates from the pilot's placement (PLACEMENT, or U). Runs
#   only if the placement says the pilot's epsilon 0.8 plateaued against 0.2 (fig5b; FIG5B=1 or 0 overrides):
#   otherwise one line says it is skipped. ~0.73 CPU-hours per run at U = 200 (1.08 at 300), 4 x 3 = 12 runs:
#   8.8 CPU-hours (13.0 at U = 300). RESUME=1 continues.
#   The rule, fixed before the main runs (benchmark/beukman2026_jax2d_rule.py fig5b prints it per seed): Fig. 5a's
#   with epsilon in place of 1/COM: E_STAR (0.2, the pilot's reference) as C_STAR, the largest epsilon as C_LOW (the
#   plateau side), the smallest as C_HIGH (the slow side): per run, final = mean evaluation solve rate of the last
#   three evaluations, mid = of the three around U/2 (the nearest, the earlier on a tie, and its neighbours), late
#   gain = final - mid, learned = best 20-update window of the pooled training solve rate - the first; (a) plateau:
#   the largest epsilon's late gain <= 0.01, its final <= E_STAR's final - 0.05 and its learned >= 0.03, in the seed
#   mean and in >= 2 of 3 seeds (paired); (b) slow: the smallest epsilon's final <= E_STAR's final - 0.05 and its
#   late gain > 0.01, in the seed mean and in >= 2 of 3 seeds; yes = (a) and (b), partly = one, no = neither.
# Environment (see _beukman2026_common.sh): SCALE, RUNS_DIR (runs/beukman2026_fig5b), OUT_DIR, WORKERS, SEEDS, FLAGS,
# PYTHON, DRY_RUN, RESUME; TOTAL (steps per run, 100000000; paper only); laptop: PLACEMENT, U, FIG5B, EPSILONS, E_STAR.
RUNS_DIR=${RUNS_DIR:-runs/beukman2026_fig5b}
if [[ "${SCALE:-paper}" == laptop ]]; then
  source "$(dirname "$0")/_beukman2026_jax2d_main.sh"
  FLAGS=${FLAGS:-$JAX2D_SETTING --num-envs 64}
fi
LAPTOP_GRID=1
source "$(dirname "$0")/_beukman2026_common.sh"
EPSILON_LIST=0.05,0.1,0.2,0.4,0.6,0.8
if [[ "$SCALE" == laptop ]]; then
  jax2d_grid FIG5B U
  [[ "$FIG5B" == 1 ]] || { DRAWS_NOTHING=1; echo "# Fig. 5b skipped (FIG5B=0: the placement's fig5b, $PLACEMENT, unless given): the \
pilot's epsilon 0.8 did not plateau against 0.2 (docs/reproducing/beukman2026_jax2d_design.md); FIG5B=1 runs it"; exit 0; }
  EPSILON_LIST=${EPSILONS:-0.1,0.2,0.4,0.8}; E_STAR=${E_STAR:-0.2}
  [[ "$EPSILON_LIST" =~ ^[0-9.]+(,[0-9.]+)+$ ]] || die "EPSILONS=$EPSILON_LIST: must be two or more comma-separated epsilons"
  [[ ",$EPSILON_LIST," == *",$E_STAR,"* ]] || die "E_STAR=$E_STAR: must be one of EPSILONS=$EPSILON_LIST"
  TOTAL=$(steps_of "$U")
fi
TOTAL=${TOTAL:-100000000}
positive_int TOTAL "$TOTAL"
one_update_fits TOTAL "$TOTAL" "$(flag_value num-envs 2048)"
not_in_flags clip-coef ewma-com total-timesteps
launch --job-name beukman2026_fig5b --sweep "clip-coef=$EPSILON_LIST" -- --total-timesteps "$TOTAL"
aggregate curves --metric charts/solve_rate --group-by clip_coef --label "ε = {clip_coef}" --x global_step \
  --ylabel "solve rate" --title "B26 Fig. 5b: PPO, changing ε ($BAND_TEXT)" \
  --out "$OUT_DIR/beukman2026_fig5b"
[[ "$SCALE" == laptop && -z "${DRY_RUN:-}" && -z "${SLURM:-}" ]] || exit 0
SORTED=($(tr , '\n' <<< "$EPSILON_LIST" | sort -g))
"$PYTHON" benchmark/beukman2026_jax2d_rule.py fig5b "$RUNS_DIR" --low "${SORTED[-1]}" --star "$E_STAR" \
  --high "${SORTED[0]}" --out "$OUT_DIR/beukman2026_fig5b_rule"
