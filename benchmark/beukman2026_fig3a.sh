#!/usr/bin/env bash
# B26 Fig. 3a (Jax2D locomotion, ppo_ewma_jax2d.py). Reload a plateaued checkpoint with another COM: learning resumes at the new COM's level (and drops back when the COM is lowered).
# Page: docs/ppo_ewma_jax2d.md. A GPU is assumed for the paper's budgets; on CPU lower TOTAL (and NUM_ENVS).
# Environment (see _beukman2026_common.sh): RUNS_DIR (runs/beukman2026_fig3a), WORKERS (1), SEEDS ("1 2 3 4 5"), TOTAL (total timesteps), PYTHON (python).
RUNS_DIR=${RUNS_DIR:-runs/beukman2026_fig3a}
source "$(dirname "$0")/_beukman2026_common.sh"
TOTAL=${TOTAL:-50000000}          # phase 1 budget
TOTAL2=${TOTAL2:-100000000}       # total after the reload (the reloaded run continues the step count)
COMS=(2 32)
launch --job-name beukman2026_fig3a_phase1 --sweep ewma-com="$(IFS=,; echo "${COMS[*]}")" -- --total-timesteps "$TOTAL"
[[ -n "${DRY_RUN:-}" ]] && exit 0
for ckpt in "$RUNS_DIR"/*/checkpoints/latest.ckpt; do
  from=$("$PYTHON" -c "import json,sys; a=json.load(open(sys.argv[1]))['args']; print(a['ewma_com'], a['seed'])" \
    "$(dirname "$(dirname "$ckpt")")/config.json")
  read -r com seed <<< "$from"
  for new in "${COMS[@]}"; do
    [[ "$new" == "${com%.0}" ]] && continue
    "$PYTHON" cleanrl_scaling/ppo_ewma_jax2d.py --init-from "$ckpt" --ewma-com "$new" --seed "$seed" \
      --total-timesteps "$TOTAL2" --runs-dir "$RUNS_DIR/reloaded" --exp-name "ppo_ewma_jax2d_com${com%.0}_to_$new"
  done
done
