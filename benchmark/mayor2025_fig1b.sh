#!/usr/bin/env bash
# M25 Fig. 1b, and from the same runs Figs. 3, 4 and 10 (feature rank, dormant units, weight norm, gradient
# kurtosis, policy variance, ESS): growing the batch through N (envs) or through T (rollout length). M25 §4:
# "increasing either leads to improved performance, increasing N appears to yield more gains"; §5.1: with larger N,
# higher feature rank, fewer dormant neurons, lower weight norm and gradient kurtosis, lower policy variance and
# higher ESS. Axis: environment steps (equal samples). Pages: docs/reproducing/mayor2025_fig1b.md, mayor2025_fig3_fig4.md.
# Our choice, not the paper's: the N and T values (our copy of M25 lost them; N x T grows from CleanRL's 8 x 128).
# Runs with --cleanrl-compat (CleanRL's semantics, as M25 ran them); CLEANRL_COMPAT=0 runs the default mode.
#   SCALE=paper (default): Atari-10, 5 seeds, 100M steps, N in 8..64 at T=128 and T in 128..1024 at N=8: GPU scale.
#   SCALE=laptop: KungFuMaster-v5, seeds 1 2 3, 1M steps, the batch x4 through N (32x128) and through T (8x512),
#   244 updates each, diagnostics every 10, checkpoints every 100: 6 runs (~7.5 CPU-hours at Fig. 1a's pilot speed).
#   The base (8x128) is Fig. 1a's laptop runs (same flags and seeds), read from FIG1A_DIR (runs/mayor2025_fig1a).
#   The rule, fixed before the main runs (benchmark/mayor2025_fig1_rule.py; final, D, its interval and "better" /
#   "worse" / "not separated" as in mayor2025_fig1a.sh):
#   Fig. 1b: (i) 32x128 against 8x512 (the N-versus-T claim) and (ii) each against 8x128 (the "either improves"
#   claim). Verdict: yes = (i) better and both (ii) better; partly = (i) better without both (ii), or (i) not
#   separated with both (ii) better; no (contradicts M25) = (i) worse; no (not shown at this budget) = otherwise.
#   Figs. 3-4: per metric, the final value (mean over the last 10% of steps) of 32x128 against 8x128, in the paper's
#   direction (up: feature_rank, ess_pct; down: dormant_frac, weight_norm, grad_kurtosis, policy_variance). Per
#   metric: yes = better; no (contradicts M25) = worse; no (not shown) = not separated.
RUNS_DIR=${RUNS_DIR:-runs/mayor2025_fig1b}
SETTINGS=(--flag-set "--num-envs 8 --num-steps 128" --flag-set "--num-envs 16 --num-steps 128"
          --flag-set "--num-envs 32 --num-steps 128" --flag-set "--num-envs 64 --num-steps 128"
          --flag-set "--num-envs 8 --num-steps 256" --flag-set "--num-envs 8 --num-steps 512"
          --flag-set "--num-envs 8 --num-steps 1024")
ROOTS=()
if [[ "${SCALE:-paper}" == laptop ]]; then
  GAMES=${GAMES:-KungFuMaster-v5}; SEEDS=${SEEDS:-1 2 3}; TOTAL=${TOTAL:-1000000}
  CHECKPOINT_EVERY=${CHECKPOINT_EVERY:-100}; FIG1A_DIR=${FIG1A_DIR:-runs/mayor2025_fig1a}
  SETTINGS=(--flag-set "--num-envs 32 --num-steps 128" --flag-set "--num-envs 8 --num-steps 512")
  ROOTS=("$FIG1A_DIR")
fi
LAPTOP_GRID=1
LARGEST_BATCH=8192  # 64 x 128 and 8 x 1024
source "$(dirname "$0")/_mayor2025_common.sh"
launch mayor2025_fig1b "${SETTINGS[@]}" -- --total-timesteps "$TOTAL" --diagnostics-every 10
[[ "$SCALE" == laptop ]] || figure fig1b "num_envs num_steps" "N={num_envs} T={num_steps}"
[[ -n "${DRY_RUN:-}" || -n "${SLURM:-}" ]] && exit 0
NETWORK=(diagnostics/feature_rank diagnostics/dormant_frac diagnostics/weight_norm diagnostics/grad_kurtosis
         diagnostics/policy_variance diagnostics/ess_pct)  # Figs. 3-4
KEEP=()  # laptop: only Fig. 1a's 8x128 runs join from FIG1A_DIR (its 32x32 and 128x8 have other T)
[[ "$SCALE" == laptop ]] && KEEP=(--filter num_steps=128,512 --filter num_envs=8,32)
"$PYTHON" -m cleanrl_scaling.utils.aggregate curves "$RUNS_DIR" ${ROOTS[@]+"${ROOTS[@]}"} ${KEEP[@]+"${KEEP[@]}"} \
  --only-finished --group-by num_envs num_steps --label "N={num_envs} T={num_steps}" --metric charts/episodic_return \
  --band "$([[ "$SCALE" == laptop ]] && echo range || echo auto)" --smooth 20 \
  --title "M25 Fig. 1b: growing the batch through N or T" --out "$OUT_DIR/mayor2025_fig1b_curves"
"$PYTHON" -m cleanrl_scaling.utils.aggregate curves "$RUNS_DIR" ${ROOTS[@]+"${ROOTS[@]}"} ${KEEP[@]+"${KEEP[@]}"} \
  --only-finished --group-by num_envs num_steps \
  --label "N={num_envs} T={num_steps}" --metric "${NETWORK[@]}" \
  --title "M25 Figs. 3-4: network metrics against N and T" --out "$OUT_DIR/mayor2025_fig3_fig4"
[[ "$SCALE" == laptop ]] || exit 0
RULE=("$PYTHON" benchmark/mayor2025_fig1_rule.py "$RUNS_DIR" "$FIG1A_DIR")
"${RULE[@]}" --base-name "8x512 (T x4)" --base "num_envs=8 num_steps=512" \
  --arm "32x128 (N x4): num_envs=32 num_steps=128" --out "$OUT_DIR/mayor2025_fig1b_rule_n_vs_t"
"${RULE[@]}" --base-name "8x128 (base)" --base "num_envs=8 num_steps=128" \
  --arm "32x128 (N x4): num_envs=32 num_steps=128" --arm "8x512 (T x4): num_envs=8 num_steps=512" \
  --out "$OUT_DIR/mayor2025_fig1b_rule_vs_base"
network_tables() {  # network_tables NAME [rule flags]: each Figs. 3-4 metric in M25's direction, 32x128 (and any
  # further --arm) against 8x128
  local name=$1; shift
  for tag in "${NETWORK[@]}"; do
    m=${tag#diagnostics/}; DOWN=(); [[ $m == feature_rank || $m == ess_pct ]] || DOWN=(--lower-is-better)
    "${RULE[@]}" --metric "$tag" ${DOWN[@]+"${DOWN[@]}"} --base-name "8x128 (base)" \
      --base "num_envs=8 num_steps=128" --arm "32x128 (N x4): num_envs=32 num_steps=128" "$@" \
      --out "$OUT_DIR/mayor2025_fig3_fig4_${name}_$m"
  done
}
network_tables rule
# Post hoc, added after the runs (not part of the rule above): at equal samples the x4 arms make 4x fewer updates
# than 8x128, so Figs. 3-4 are also drawn against updates and compared at equal updates, EQUAL_UPDATES (default
# iterations 220-244: the x4 arms' last 10%, 8x128's first quarter).
read -r -a WINDOW <<< "${EQUAL_UPDATES:-220 244}"
"$PYTHON" -m cleanrl_scaling.utils.aggregate curves "$RUNS_DIR" "${ROOTS[@]}" "${KEEP[@]}" --only-finished \
  --group-by num_envs num_steps --label "N={num_envs} T={num_steps}" --metric "${NETWORK[@]}" --x iteration \
  --title "M25 Figs. 3-4 (post hoc): network metrics against updates" \
  --out "$OUT_DIR/mayor2025_fig3_fig4_updates"
network_tables equal_updates --iterations "${WINDOW[@]}" --arm "8x512 (T x4): num_envs=8 num_steps=512"
