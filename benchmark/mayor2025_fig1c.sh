#!/usr/bin/env bash
# M25 Fig. 1c: more epochs hurt, more envs make up for it (epochs x N, at T = 128). M25 §4: "overly training on the
# same data, via increasing the number of epochs, negatively impacts performance", and "the performance decline when
# training twice as many times over the data ... is completely overcome by doubling the number of environments".
# Axis: environment steps (equal samples). Page: docs/reproducing/mayor2025_fig1c.md.
# Our choice, not the paper's: the epoch counts and N values (our copy of M25 lost them).
# Runs with --cleanrl-compat (CleanRL's semantics, as M25 ran them); CLEANRL_COMPAT=0 runs the default mode.
#   SCALE=paper (default): Atari-10, 5 seeds, 100M steps, epochs 4, 8, 16 x N 8, 16, 32: GPU scale.
#   SCALE=laptop: KungFuMaster-v5, seeds 1 2 3, 1M steps, T = 128, epochs x2 (8) at N = 8 and at N x4 (32),
#   diagnostics every 10, checkpoints every 100: 6 runs. Epochs x4 (16) is left out for CPU time (the whole of
#   Fig. 1 at laptop scale must fit ~30 CPU-hours; an 8-epoch update costs about twice a 4-epoch one). The 4-epoch
#   arms are Fig. 1a's 8x128 runs (FIG1A_DIR, runs/mayor2025_fig1a) and Fig. 1b's 32x128 runs (FIG1B_DIR,
#   runs/mayor2025_fig1b), same flags and seeds.
#   The rule, fixed before the main runs (benchmark/mayor2025_fig1_rule.py; final, D, its interval and "better" /
#   "worse" / "not separated" as in mayor2025_fig1a.sh):
#   (A) epochs hurt: (8 epochs, N 8) against (4 epochs, N 8) is worse;
#   (B) envs make up for it: (8 epochs, N 32) against (8 epochs, N 8) is better, and against (4 epochs, N 8) is not
#   worse. Verdict: yes = A and B; partly = A or B, not both; no (contradicts M25) = (8 epochs, N 8) better than
#   (4 epochs, N 8), or (8 epochs, N 32) worse than (8 epochs, N 8); no (not shown at this budget) = otherwise.
RUNS_DIR=${RUNS_DIR:-runs/mayor2025_fig1c}
GRID=(--sweep update-epochs=4,8,16 --sweep num-envs=8,16,32)
ROOTS=()
if [[ "${SCALE:-paper}" == laptop ]]; then
  GAMES=${GAMES:-KungFuMaster-v5}; SEEDS=${SEEDS:-1 2 3}; TOTAL=${TOTAL:-1000000}
  CHECKPOINT_EVERY=${CHECKPOINT_EVERY:-100}
  FIG1A_DIR=${FIG1A_DIR:-runs/mayor2025_fig1a}; FIG1B_DIR=${FIG1B_DIR:-runs/mayor2025_fig1b}
  GRID=(--sweep update-epochs=8 --sweep num-envs=8,32 -- --diagnostics-every 10)
  ROOTS=("$FIG1A_DIR" "$FIG1B_DIR")
fi
LAPTOP_GRID=1
LARGEST_BATCH=4096  # 32 x 128
source "$(dirname "$0")/_mayor2025_common.sh"
[[ " ${GRID[*]} " == *" -- "* ]] || GRID+=(--)
launch mayor2025_fig1c "${GRID[@]}" --total-timesteps "$TOTAL"
[[ "$SCALE" == laptop ]] || { figure fig1c "update_epochs num_envs" "epochs={update_epochs} N={num_envs}"; exit 0; }
[[ -n "${DRY_RUN:-}" || -n "${SLURM:-}" ]] && exit 0
# laptop: T = 128 only (Fig. 1a's 32x32 and 128x8 and Fig. 1b's 8x512 do not join)
"$PYTHON" -m cleanrl_scaling.utils.aggregate curves "$RUNS_DIR" "${ROOTS[@]}" --filter num_steps=128 --only-finished \
  --group-by update_epochs num_envs --label "epochs={update_epochs} N={num_envs}" --metric charts/episodic_return \
  --band range --smooth 20 --title "M25 Fig. 1c (laptop): epochs x N at T = 128" --out "$OUT_DIR/mayor2025_fig1c_curves"
RULE=("$PYTHON" benchmark/mayor2025_fig1_rule.py "$RUNS_DIR" "${ROOTS[@]}")
"${RULE[@]}" --base-name "4 epochs, N 8" --base "update_epochs=4 num_envs=8 num_steps=128" \
  --arm "8 epochs, N 8: update_epochs=8 num_envs=8 num_steps=128" \
  --arm "8 epochs, N 32: update_epochs=8 num_envs=32 num_steps=128" --out "$OUT_DIR/mayor2025_fig1c_rule_vs_base"
"${RULE[@]}" --base-name "8 epochs, N 8" --base "update_epochs=8 num_envs=8 num_steps=128" \
  --arm "8 epochs, N 32: update_epochs=8 num_envs=32 num_steps=128" --out "$OUT_DIR/mayor2025_fig1c_rule_envs"
"${RULE[@]}" --base-name "4 epochs, N 32" --base "update_epochs=4 num_envs=32 num_steps=128" \
  --arm "8 epochs, N 32: update_epochs=8 num_envs=32 num_steps=128" --out "$OUT_DIR/mayor2025_fig1c_rule_n32"
