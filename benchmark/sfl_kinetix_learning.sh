#!/usr/bin/env bash
# The CPU learning check of sfl_kinetix_jax.py (docs/sfl_kinetix_jax.md#learning-on-this-machine):
# Kinetix 's' random levels, SFL against --no-sfl (Kinetix's domain-randomisation baseline) at the same budget,
# SEEDS ("1 2"), WORKERS runs at a time (1; 2 on a 2-core machine), through the launcher (--skip-finished: rerun the
# command to continue or to redraw). Then the random-level solve rate against steps
# (OUT_DIR/sfl_kinetix_learning.png/.csv, the range of the seeds as the band) and the table of
# benchmark/sfl_kinetix_learning.py (initial and final solve rates, buffer).
# A laptop setting, not B26's (Table 2's 2048 x 256 batches at lr 5e-5 would make only a few updates in a
# 30-minute run on one core): the MLP, 16 envs x 256 steps (one whole 256-step episode per env and update),
# 8 minibatches x 4 epochs, lr 5e-4;
# SFL scores N = 128 levels for L = 512 steps (two episodes: a shorter L leaves most levels with no finished episode)
# every T = 16 updates and keeps K = 32; evaluation on 100 random levels x 5 attempts before training, every 64
# updates and at the end. ~30 min per run on one core, the first start longer (compiling Kinetix's level generator
# takes ~5 min; JAX_COMPILATION_CACHE_DIR keeps it for later runs).
# Environment: RUNS_DIR (runs/sfl_learning), OUT_DIR (runs/figures), WORKERS (1), SEEDS ("1 2"), TOTAL (1572864
# steps = 384 updates), EVAL_EVERY (64 updates; an evaluation is 100 x 5 attempts of up to 256 steps, so raise it for
# long runs), PYTHON (python), DRY_RUN=1 (print the commands, draw nothing), RESUME=1 (a run stopped before finishing,
# e.g. by the machine's time limit, continues from its checkpoint, written every 16 updates and on SIGINT/SIGTERM).
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS_DIR=${RUNS_DIR:-runs/sfl_learning}
OUT_DIR=${OUT_DIR:-runs/figures}
WORKERS=${WORKERS:-1}
PYTHON=${PYTHON:-python}
TOTAL=${TOTAL:-1572864}
EVAL_EVERY=${EVAL_EVERY:-64}
read -r -a SEEDS <<< "${SEEDS:-1 2}"
[[ "$TOTAL" =~ ^[0-9]+$ ]] && (( TOTAL >= 4096 )) || {
  echo "error: TOTAL=$TOTAL: must be an integer of at least one update (16 x 256 = 4096 steps)" >&2; exit 2; }
[[ "$EVAL_EVERY" =~ ^[0-9]+$ ]] && (( EVAL_EVERY >= 1 )) || {
  echo "error: EVAL_EVERY=$EVAL_EVERY: must be a positive integer of updates" >&2; exit 2; }
export JAX_COMPILATION_CACHE_DIR=${JAX_COMPILATION_CACHE_DIR:-$PWD/.jax_cache}
FLAGS=(--env-size s --network mlp --num-envs 16 --num-steps 256 --num-minibatches 8 --update-epochs 4
       --learning-rate 5e-4 --sfl-num-levels 128 --sfl-rollout-length 512 --sfl-buffer-size 32 --sfl-update-period 16
       --sfl-filter-batch 128 --level-batch 128 --updates-per-chunk 16 --eval-random-levels 100 --eval-attempts 5
       --eval-every "$EVAL_EVERY" --diagnostics-every 64 --checkpoint-every 16 --total-timesteps "$TOTAL")
"$PYTHON" -m cleanrl_scaling.utils.launcher cleanrl_scaling/sfl_kinetix_jax.py --job-name sfl_kinetix_learning \
  --runs-dir "$RUNS_DIR" --workers "$WORKERS" --skip-finished --seeds "${SEEDS[@]}" ${DRY_RUN:+--dry-run} \
  ${RESUME:+--resume-unfinished} --flag-set "--exp-name sfl" --flag-set "--no-sfl --exp-name no_sfl" -- "${FLAGS[@]}"
[[ -n "${DRY_RUN:-}" ]] && exit 0
"$PYTHON" -m cleanrl_scaling.utils.aggregate curves "$RUNS_DIR" --only-finished --metric charts/solve_rate_random \
  --group-by exp_name --label "{exp_name}" --x global_step --band minmax --ylabel "solve rate (100 random levels)" \
  --title "SFL against --no-sfl on Kinetix s, CPU laptop setting (mean and range of $((${#SEEDS[@]})) seeds)" \
  --out "$OUT_DIR/sfl_kinetix_learning"
"$PYTHON" benchmark/sfl_kinetix_learning.py "$RUNS_DIR"
