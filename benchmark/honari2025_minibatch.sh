#!/usr/bin/env bash
# H25 Fig. 1 (top) and Fig. 2: 500 envs x 100 steps, the 50 000-sample batch split into 1000x50, 500x100, 250x200,
# 100x500 and 50x1000 minibatches (number x size); Humanoid, HalfCheetah, Ant, Walker2d; 4 seeds; CleanRL's other
# defaults. Fig. 1 top: returns against steps. Fig. 2: for the best run of 1000x50 and of 50x1000 (H25 selects "two
# of the best runs"), the sequential and reference KL between the policies of one update against the % of the
# update's data processed, at 10%, 50% and 100% of training (kl_profile.jsonl; aggregate kl-profile).
# Page: docs/ppo_continuous_mujoco.md
# Our choice, not the paper's: the intermediate splits 500x100, 250x200 and 100x500 (H25 names 1000x50 and 50x1000),
# the budget (H25 does not state it), the training phases shown in Fig. 2.
#   SCALE=paper (default): the four tasks, 4 seeds, 10M steps: 80 runs, ~25 min each at 7k SPS.
#   SCALE=laptop: HalfCheetah-v4 and Walker2d-v4, 4 seeds, 2.1M steps (42 updates: HalfCheetah's 1000-step episodes,
#   plus the reset step, end every 500.5k steps, the fourth at 2.002M), diagnostics and KL profiles every 4 updates
#   (~10% of training): 40 runs, from ~3 min (1000-sample minibatches) to ~15 min (50-sample) each on a quiet core,
#   9.2 CPU-hours measured (3.7 HalfCheetah, 5.5 Walker2d), ~4.6 hours with WORKERS=2 on 2 cores (docs/reproducing/honari2025_fig1_top_fig2.md).
#   bash benchmark/honari2025_minibatch.sh
#   DRY_RUN=1 bash benchmark/honari2025_minibatch.sh         # print the commands only
# Environment: SCALE (paper), RUNS_DIR (runs/honari2025_minibatch), OUT_DIR (runs/figures), WORKERS (1), PYTHON (python),
# TOTAL_TIMESTEPS (10000000), DIAGNOSTICS_EVERY (10 iterations), ENV_IDS.
# Finished runs are kept and reused (--skip-finished); rm -rf "$RUNS_DIR" to start afresh.
# Runs use --cleanrl-compat (CleanRL's semantics, which H25 ran: truncation as termination, per-env
# normalisation; on envpool the reset step stays unmasked); CLEANRL_COMPAT=0 runs the default mode.
set -euo pipefail
cd "$(dirname "$0")/.."
source benchmark/_slurm_common.sh  # SLURM=1 and its knobs, DRAW_ONLY=1 (docs/cluster.md)
SCALE=${SCALE:-paper}
case "$SCALE" in
  paper) ;;
  laptop) ENV_IDS=${ENV_IDS:-HalfCheetah-v4 Walker2d-v4}; TOTAL_TIMESTEPS=${TOTAL_TIMESTEPS:-2100000}; DIAGNOSTICS_EVERY=${DIAGNOSTICS_EVERY:-4} ;;
  *) echo "error: SCALE=$SCALE: must be paper or laptop" >&2; exit 2 ;;
esac
RUNS_DIR=${RUNS_DIR:-runs/honari2025_minibatch}
OUT_DIR=${OUT_DIR:-runs/figures}
WORKERS=${WORKERS:-1}
PYTHON=${PYTHON:-python}
TOTAL_TIMESTEPS=${TOTAL_TIMESTEPS:-10000000}
DIAGNOSTICS_EVERY=${DIAGNOSTICS_EVERY:-10}
read -r -a ENV_IDS <<< "${ENV_IDS:-Humanoid-v4 HalfCheetah-v4 Ant-v4 Walker2d-v4}"
[[ "$TOTAL_TIMESTEPS" =~ ^[0-9]+$ && "$TOTAL_TIMESTEPS" -ge 50000 ]] || {
  echo "error: TOTAL_TIMESTEPS=$TOTAL_TIMESTEPS: must be an integer >= 50000 (one update of the 50 000-sample batch)" >&2; exit 2; }
DRY=()
[[ -n "${DRY_RUN:-}" ]] && DRY=(--dry-run)
COMPAT=(--cleanrl-compat)
[[ "${CLEANRL_COMPAT:-1}" == 0 ]] && COMPAT=()

[[ -n "${DRAW_ONLY:-}" ]] || "$PYTHON" -m cleanrl_scaling.utils.launcher cleanrl_scaling/ppo_continuous_mujoco.py --job-name honari2025_minibatch \
  --runs-dir "$RUNS_DIR" --workers "$WORKERS" --skip-finished "${DRY[@]}" "${SLURM_ARGS[@]}" \
  --env-ids "${ENV_IDS[@]}" --seeds 1 2 3 4 \
  --sweep minibatch-size=50,100,200,500,1000 \
  -- --env-backend envpool --num-envs 500 --num-steps 100 --total-timesteps "$TOTAL_TIMESTEPS" \
     --diagnostics-every "$DIAGNOSTICS_EVERY" --kl-profile "${COMPAT[@]}" --checkpoint-every "${CHECKPOINT_EVERY:-20}"
[[ -n "${DRY_RUN:-}${SLURM:-}" ]] && exit 0  # nothing to draw yet (after an array: DRAW_ONLY=1)

for ENV_ID in "${ENV_IDS[@]}"; do
  "$PYTHON" -m cleanrl_scaling.utils.aggregate curves "$RUNS_DIR" --only-finished --filter "env_id=$ENV_ID" \
    --metric charts/episodic_return --group-by minibatch_size \
    --label "500x100 : {minibatch_size}-sample minibatches" --x global_step \
    --title "H25 Fig. 1 top: $ENV_ID, minibatch size (4 seeds, mean and range)" \
    --out "$OUT_DIR/honari2025_minibatch_$ENV_ID"
done
"$PYTHON" -m cleanrl_scaling.utils.aggregate kl-profile "$RUNS_DIR" --only-finished --filter minibatch_size=50,1000 \
  --group-by minibatch_size --label "500x100 : {minibatch_size}-sample minibatches" --at 10 50 100 \
  --dashed "500x100 : 1000-sample minibatches" \
  --title "H25 Fig. 2: KL within one update, best run per setting" --out "$OUT_DIR/honari2025_fig2"
