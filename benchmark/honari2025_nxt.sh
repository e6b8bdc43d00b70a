#!/usr/bin/env bash
# H25 Fig. 1 (bottom) and Fig. 3: more envs or longer rollouts at the same batch: 1000 envs x 50 steps against
# 100 envs x 500 steps, next to CleanRL's default 1 x 2048; Humanoid, HalfCheetah, Ant, Walker2d; 4 seeds. Fig. 1
# bottom: returns against steps. Fig. 3: for the best run of 1000x50 and of 100x500, the sequential and reference KL
# within one update against the % of the update's data processed (kl_profile.jsonl; aggregate kl-profile).
# All three settings run on envpool, so that they differ in N and T only, not in the simulator backend.
# Our choice, not the paper's: the minibatch size of the two 50 000-sample batches, 1000 samples (H25's largest of
# Fig. 1 top; H25 does not print it for this figure; MINIBATCH_SIZE overrides it), the budget (H25 does not state
# it), the training phases shown in Fig. 3. The 1 x 2048 run keeps CleanRL's 32 minibatches of 64.
# Page: docs/ppo_continuous_mujoco.md
#   SCALE=paper (default): the four tasks, 4 seeds, 10M steps, all three settings.
#   SCALE=laptop: HalfCheetah-v4 and Walker2d-v4, 4 seeds, 2.1M steps (42 updates; at 1000 envs HalfCheetah's episodes
#   end at 1.001M and 2.002M steps), diagnostics and KL profiles every 4 updates, 1000x50 and 100x500 only: 16 runs
#   (HalfCheetah ~3-5 min, Walker2d 8-10 min on one core), 1.8 CPU-hours measured. The 1 x 2048 reference is left
#   out: one env steps at ~1.2k SPS on one core (docs/cluster.md), so its 8 runs alone would take ~3.5 CPU-hours,
#   and H25's claim compares the two 50 000-sample settings (docs/reproducing/honari2025_fig1_bottom_fig3.md).
#   bash benchmark/honari2025_nxt.sh
#   DRY_RUN=1 bash benchmark/honari2025_nxt.sh              # print the commands only
# Environment: SCALE (paper), RUNS_DIR (runs/honari2025_nxt), OUT_DIR (runs/figures), WORKERS (1), PYTHON (python),
# TOTAL_TIMESTEPS (10000000: H25 does not state its budget), DIAGNOSTICS_EVERY (10), MINIBATCH_SIZE (1000), ENV_IDS.
# Finished runs are kept and reused (--skip-finished); rm -rf "$RUNS_DIR" to start afresh.
# Runs use --cleanrl-compat (CleanRL's semantics, which H25 ran: truncation as termination, per-env
# normalisation; on envpool the reset step stays unmasked); CLEANRL_COMPAT=0 runs the default mode.
set -euo pipefail
cd "$(dirname "$0")/.."
source benchmark/_slurm_common.sh  # SLURM=1 and its knobs, DRAW_ONLY=1 (docs/cluster.md)
SCALE=${SCALE:-paper}
REFERENCE=(--flag-set "--env-backend envpool --num-envs 1 --num-steps 2048 --num-minibatches 32")
case "$SCALE" in
  paper) ;;
  laptop) ENV_IDS=${ENV_IDS:-HalfCheetah-v4 Walker2d-v4}; TOTAL_TIMESTEPS=${TOTAL_TIMESTEPS:-2100000}; DIAGNOSTICS_EVERY=${DIAGNOSTICS_EVERY:-4}; REFERENCE=() ;;
  *) echo "error: SCALE=$SCALE: must be paper or laptop" >&2; exit 2 ;;
esac
RUNS_DIR=${RUNS_DIR:-runs/honari2025_nxt}
OUT_DIR=${OUT_DIR:-runs/figures}
WORKERS=${WORKERS:-1}
PYTHON=${PYTHON:-python}
TOTAL_TIMESTEPS=${TOTAL_TIMESTEPS:-10000000}
DIAGNOSTICS_EVERY=${DIAGNOSTICS_EVERY:-10}
MINIBATCH_SIZE=${MINIBATCH_SIZE:-1000}
read -r -a ENV_IDS <<< "${ENV_IDS:-Humanoid-v4 HalfCheetah-v4 Ant-v4 Walker2d-v4}"
[[ "$TOTAL_TIMESTEPS" =~ ^[0-9]+$ && "$TOTAL_TIMESTEPS" -ge 50000 ]] || {
  echo "error: TOTAL_TIMESTEPS=$TOTAL_TIMESTEPS: must be an integer >= 50000 (one update of the 50 000-sample batch)" >&2; exit 2; }
DRY=()
[[ -n "${DRY_RUN:-}" ]] && DRY=(--dry-run)
COMPAT=(--cleanrl-compat)
[[ "${CLEANRL_COMPAT:-1}" == 0 ]] && COMPAT=()

[[ -n "${DRAW_ONLY:-}" ]] || "$PYTHON" -m cleanrl_scaling.utils.launcher cleanrl_scaling/ppo_continuous_mujoco.py --job-name honari2025_nxt \
  --runs-dir "$RUNS_DIR" --workers "$WORKERS" --skip-finished "${DRY[@]}" "${SLURM_ARGS[@]}" \
  --env-ids "${ENV_IDS[@]}" --seeds 1 2 3 4 \
  --flag-set "--env-backend envpool --num-envs 1000 --num-steps 50 --minibatch-size $MINIBATCH_SIZE" \
  --flag-set "--env-backend envpool --num-envs 100 --num-steps 500 --minibatch-size $MINIBATCH_SIZE" \
  "${REFERENCE[@]}" \
  -- --total-timesteps "$TOTAL_TIMESTEPS" --diagnostics-every "$DIAGNOSTICS_EVERY" --kl-profile "${COMPAT[@]}" \
     --checkpoint-every "${CHECKPOINT_EVERY:-20}"  # 50k-sample updates: ~2.5 min of a 25-min run
[[ -n "${DRY_RUN:-}${SLURM:-}" ]] && exit 0  # nothing to draw yet (after an array: DRAW_ONLY=1)

for ENV_ID in "${ENV_IDS[@]}"; do
  "$PYTHON" -m cleanrl_scaling.utils.aggregate curves "$RUNS_DIR" --only-finished --filter "env_id=$ENV_ID" \
    --metric charts/episodic_return --group-by num_envs num_steps \
    --label "{num_envs}x{num_steps}" --x global_step \
    --title "H25 Fig. 1 bottom: $ENV_ID, envs x rollout length (4 seeds, mean and range)" \
    --out "$OUT_DIR/honari2025_nxt_$ENV_ID"
done
"$PYTHON" -m cleanrl_scaling.utils.aggregate kl-profile "$RUNS_DIR" --only-finished --filter num_envs=1000,100 \
  --group-by num_envs num_steps --label "{num_envs}x{num_steps}" --at 10 50 100 --dashed 100x500 \
  --title "H25 Fig. 3: KL within one update, best run per setting" --out "$OUT_DIR/honari2025_fig3"
