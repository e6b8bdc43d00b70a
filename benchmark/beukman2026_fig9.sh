#!/usr/bin/env bash
# B26 Fig. 9 (Jax2D locomotion, ppo_ewma_jax2d.py). Scaling recipes (SPEC §3) as num_envs grows from the 2048-env base: more minibatches (B26's advice) vs larger minibatches vs the sqrt lr rule. Fig. 9 plots solve rate against steps, Fig. 13 charts/SPS, Fig. 14 the final solve rate against num_envs; the same runs serve all three.
# Page: docs/ppo_ewma_jax2d.md. A GPU is assumed for the paper's budgets; on CPU lower TOTAL (and NUM_ENVS).
# Environment (see _beukman2026_common.sh): RUNS_DIR (runs/beukman2026_fig9), WORKERS (1), SEEDS ("1 2 3 4 5"), TOTAL (total timesteps), PYTHON (python).
RUNS_DIR=${RUNS_DIR:-runs/beukman2026_fig9}
source "$(dirname "$0")/_beukman2026_common.sh"
TOTAL=${TOTAL:-200000000}
launch --job-name beukman2026_recipes --sweep num-envs=512,1024,2048,4096,8192,16384 \
  --sweep scaling-recipe=more-minibatches,larger-minibatches,sqrt-lr -- --base-num-envs 2048 --total-timesteps "$TOTAL"
