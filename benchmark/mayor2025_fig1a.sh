#!/usr/bin/env bash
# M25 Fig. 1a (ppo_atari_envpool.py): a fixed data budget N x T = 1024 per update, spent on more envs N with a
# shorter rollout T rather than CleanRL's default N=8, T=128. M25 §4: "for a fixed data budget, scaling N is
# preferable to scaling T"; axis: environment steps (equal samples, and here also equal updates).
# Page: docs/reproducing/mayor2025_fig1a.md.
# Our choice, not the paper's: the N and T values (our copy of M25 lost them; N x T stays at CleanRL's 1024).
# Runs with --cleanrl-compat (CleanRL's semantics, as M25 ran them); CLEANRL_COMPAT=0 runs the default mode.
#   SCALE=paper (default): Atari-10, 5 seeds, 100M steps, 8x128, 16x64, 32x32: GPU scale.
#   SCALE=laptop: KungFuMaster-v5, seeds 1 2 3, 1M steps (976 updates in every arm), 8x128 (base), 32x32 (4x N),
#   128x8 (16x N), checkpoints every 100 updates, diagnostics every 10 (Fig. 1b's laptop grid reads the 8x128 runs as
#   its base, and Figs. 3-4 draw their network metrics): 9 runs. Chosen from a pilot (seed 101, not used here): CleanRL's
#   8x128 learned from 2,019 to 22,403 mean return per 100k-step window over 1M steps, flat from ~600k; 1M steps
#   took 76 min on one core at nice 19 on a loaded 2-core machine (217 SPS), so ~11 CPU-hours for the 9 runs.
#   The rule, fixed before the main runs (benchmark/mayor2025_fig1_rule.py prints it per run):
#   final(run) = mean return of the games ending in the last 10% of steps; per arm against the base,
#   D = mean final(arm) - mean final(base) over the 3 seeds with its 95% percentile bootstrap interval (10,000
#   resamples of each side's seeds); an arm is "better" when every seed is above the base's median AND the interval
#   lies above 0, "worse" when the interval lies below 0, else "not separated". Verdict: yes = 4x N and 16x N both
#   better; partly = one of them better; no (contradicts M25) = neither better and at least one worse; no (not
#   shown at this budget) = both not separated.
#   EVAL=1 (SCALE=laptop; added after the runs, 2026-11-29): the same 9 runs again, into runs/mayor2025_fig1a_eval,
#   with --save-model --eval-episodes 30: each final policy plays 30 full games on env seed = seed + 10,000, the
#   same games for every arm of a seed, and the rule's test is applied to those games (eval/episodic_return) beside
#   the training final. The page reports it as added after the runs, not as a pre-set verdict, and says per run
#   whether its training repeated the archived run's (same seeds and flags; the logged returns compared).
#   Drawing with EVAL=1 writes the rule's two tables only (mayor2025_fig1a_rule_training, _rule_eval); the figures and
#   the network tables stay the archived runs'.
[[ -n "${EVAL:-}" && "${SCALE:-paper}" != laptop ]] && { echo "error: EVAL=1 applies to SCALE=laptop only" >&2; exit 2; }
RUNS_DIR=${RUNS_DIR:-runs/mayor2025_fig1a${EVAL:+_eval}}
SETTINGS=(--flag-set "--num-envs 8 --num-steps 128" --flag-set "--num-envs 16 --num-steps 64"
          --flag-set "--num-envs 32 --num-steps 32")
if [[ "${SCALE:-paper}" == laptop ]]; then
  GAMES=${GAMES:-KungFuMaster-v5}; SEEDS=${SEEDS:-1 2 3}; TOTAL=${TOTAL:-1000000}
  CHECKPOINT_EVERY=${CHECKPOINT_EVERY:-100}; LAPTOP_FLAGS=(--diagnostics-every 10)
  [[ -n "${EVAL:-}" ]] && LAPTOP_FLAGS+=(--save-model --eval-episodes 30)
  SETTINGS=(--flag-set "--num-envs 8 --num-steps 128" --flag-set "--num-envs 32 --num-steps 32"
            --flag-set "--num-envs 128 --num-steps 8")
fi
LAPTOP_GRID=1
source "$(dirname "$0")/_mayor2025_common.sh"
launch mayor2025_fig1a "${SETTINGS[@]}" -- --total-timesteps "$TOTAL" ${LAPTOP_FLAGS[@]+"${LAPTOP_FLAGS[@]}"}
if [[ -z "${EVAL:-}" ]]; then  # the reruns (EVAL=1) draw only their two rule tables below
  figure fig1a "num_envs num_steps" "N={num_envs} T={num_steps}"
fi
[[ "$SCALE" == laptop && -z "${DRY_RUN:-}" && -z "${SLURM:-}" ]] || exit 0
fig1a_rule() {  # fig1a_rule --out PREFIX [ARGS...]: the header's test of each arm against 8x128
  "$PYTHON" benchmark/mayor2025_fig1_rule.py "$RUNS_DIR" --base-name "8x128 (base)" --base "num_envs=8 num_steps=128" \
    --arm "32x32 (4x N): num_envs=32 num_steps=32" --arm "128x8 (16x N): num_envs=128 num_steps=8" "$@"
}
if [[ -n "${EVAL:-}" ]]; then  # the figures and network tables stay the archived runs'
  fig1a_rule --out "$OUT_DIR/mayor2025_fig1a_rule_training"
  fig1a_rule --out "$OUT_DIR/mayor2025_fig1a_rule_eval" --metric eval/episodic_return
  exit 0
fi
"$PYTHON" -m cleanrl_scaling.utils.aggregate curves "$RUNS_DIR" --only-finished --group-by num_envs num_steps \
  --label "N={num_envs} T={num_steps}" --metric charts/episodic_return --band range --smooth 20 \
  --title "M25 Fig. 1a (laptop): KungFuMaster, N x T = 1024" --out "$OUT_DIR/mayor2025_fig1a_curves"
fig1a_rule --out "$OUT_DIR/mayor2025_fig1a_rule"
# Post hoc, added after the runs (not part of the rule above): M25 Figs. 3-4's network metrics of these runs at equal
# samples, updates, minibatch and learning-rate schedule (N x T = 1024 in every arm), each arm against 8x128 in M25's
# direction, with the same test (mayor2025_fig1b.sh applies it to the batch x4 arms).
for tag in diagnostics/feature_rank diagnostics/dormant_frac diagnostics/weight_norm diagnostics/grad_kurtosis \
           diagnostics/policy_variance diagnostics/ess_pct; do
  m=${tag#diagnostics/}; DOWN=(); [[ $m == feature_rank || $m == ess_pct ]] || DOWN=(--lower-is-better)
  fig1a_rule --out "$OUT_DIR/mayor2025_fig1a_network_$m" --metric "$tag" ${DOWN[@]+"${DOWN[@]}"}
done
