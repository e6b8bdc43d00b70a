#!/usr/bin/env bash
# M25 Fig. 9 (§6.3, App. B.7): state coverage as N grows at T = 128 (the N axis of Fig. 1b). Features of the batch
# states are saved every K iterations; cleanrl_scaling/utils/coverage.py embeds all runs of a game in one UMAP.
# Our choice, not the paper's: the N values (our copy of M25 lost them) and the feature schedule.
# Runs with --cleanrl-compat (CleanRL's semantics, as M25 ran them); CLEANRL_COMPAT=0 runs the default mode.
#   SCALE=paper (default): Atari-10, 5 seeds, 100M steps, N in 8 16 32 64: GPU scale.
#   SCALE=laptop: Qbert-v5, 2 seeds, 500k steps, N in 8 32: 4 runs, about 1.5 hours on 2 cores.
RUNS_DIR=${RUNS_DIR:-runs/mayor2025_fig9}
if [[ "${SCALE:-paper}" == laptop ]]; then
  GAMES=${GAMES:-Qbert-v5}; SEEDS=${SEEDS:-1 2}; TOTAL=${TOTAL:-500000}; EVERY=${EVERY:-25}; STATES=${STATES:-1024}
  NUM_ENVS=${NUM_ENVS:-8,32}
fi
LAPTOP_GRID=1
LARGEST_BATCH=8192  # 64 x 128
source "$(dirname "$0")/_mayor2025_common.sh"
EVERY=${EVERY:-2000}
STATES=${STATES:-512}
NUM_ENVS=${NUM_ENVS:-8,16,32,64}
launch mayor2025_fig9 --sweep num-envs="$NUM_ENVS" -- --num-steps 128 --total-timesteps "$TOTAL" \
  --diagnostics-every 10 --save-features-every "$EVERY" --features-states "$STATES"
[[ -n "${DRY_RUN:-}" || -n "${SLURM:-}" ]] && exit 0
for game in "${GAMES[@]}"; do
  "$PYTHON" -m cleanrl_scaling.utils.coverage "$RUNS_DIR" --only-finished --env-id "$game" --group-by num_envs \
    --title "M25 Fig. 9: $game, coverage against N (T = 128)" --out "$OUT_DIR/mayor2025_fig9_coverage_$game"
done
