# Sourced by the SCALE=laptop branches of benchmark/beukman2026_fig{5a,5b,7,8,3a}.sh before _beukman2026_common.sh:
# The laptop design's main runs on Jax2D (docs/reproducing/beukman2026_jax2d_design.md). Our choices, not the paper's:
#   - the common setting: the first 16 tasks of --task-seed 31, 64 envs x 128 steps (8,192 steps per update), B26's
#     inner loop (32 minibatches x 8 epochs) and Table 2's other values (the script's defaults), evaluation every 20
#     updates with 20 sampled episodes per task (320 episodes), diagnostics every 10 updates, seeds 1 2 3;
#   - the grid from the pilot's placement (benchmark/beukman2026_jax2d_pilot.sh, then
#     benchmark/beukman2026_jax2d_placement.py): PLACEMENT (docs/reproducing/img/beukman2026_jax2d_placement.json, the
#     pilot our pages ran, 2026-11-26: COMs 16-4096, U = 200, no Fig. 5b; a pilot of your own writes
#     runs/figures/beukman2026_jax2d_placement.json) gives C_LOW, C_STAR, C_HIGH, COMS, U (updates per run) and FIG5B;
#     each of them set in the environment wins.
# Environment: PLACEMENT, FIG5A_DIR (runs/beukman2026_fig5a: the Fig. 5a runs the other figures reuse), and those above.
JAX2D_SETTING="--task-seed 31 --num-tasks 16 --num-steps 128 --num-minibatches 32 --update-epochs 8 --eval-every 20 \
--eval-attempts 20 --diagnostics-every 10"  # without --num-envs: 64 in Figs. 5a/5b/3a, 16 in Fig. 7a's new arms
SEEDS=${SEEDS:-1 2 3}; BAND=${BAND:-minmax}
PLACEMENT=${PLACEMENT:-docs/reproducing/img/beukman2026_jax2d_placement.json}
FIG5A_DIR=${FIG5A_DIR:-runs/beukman2026_fig5a}
[[ -z "${TOTAL:-}" ]] || {
  echo "error: TOTAL=$TOTAL does not apply at SCALE=laptop: the budget is U updates (the placement's, or U=...)" >&2; exit 2; }

jax2d_grid() {  # jax2d_grid NAME...: each from the environment if set there, else from the placement; checked
  local missing=() name values
  for name in "$@"; do [[ -n "${!name:-}" ]] || missing+=("$name"); done
  if (( ${#missing[@]} )); then
    [[ -f "$PLACEMENT" ]] || die "SCALE=laptop needs the pilot's placement, and PLACEMENT=$PLACEMENT does not exist: \
run the pilot first (SCALE=laptop WORKERS=2 bash benchmark/beukman2026_jax2d_pilot.sh; its placement step, \
benchmark/beukman2026_jax2d_placement.py, writes the file; docs/reproducing/beukman2026_jax2d_design.md) or give \
${missing[*]}"
    values=$("$PYTHON" benchmark/beukman2026_jax2d_rule.py grid "$PLACEMENT" "${missing[@]}") || exit 2
    eval "$values"
  fi
  for name in "$@"; do
    case $name in
      U) [[ "$U" =~ ^[0-9]+$ && "$U" -ge 4 ]] || die "U=$U: must be a whole number of updates per run (at least 4)" ;;
      FIG5B) [[ "$FIG5B" == 0 || "$FIG5B" == 1 ]] || die "FIG5B=$FIG5B: must be 1 (run Fig. 5b) or 0" ;;
      COMS) [[ "$COMS" =~ ^[0-9.]+(,[0-9.]+)+$ ]] || \
              die "COMS=$COMS: must be two or more comma-separated centers of mass, e.g. 4,16,64" ;;
      *) [[ "${!name}" =~ ^[0-9]*\.?[0-9]+$ ]] && (( $(awk "BEGIN {print (${!name} > 0)}") )) || \
           die "$name=${!name}: must be a positive center of mass"
         printf -v "$name" %g "${!name}" ;;  # as the reloads name their runs: com4, not com4.0
    esac
  done
}

steps_of() {  # steps_of UPDATES: environment steps of that many updates at the FLAGS' envs and steps
  echo $(( $(flag_value num-envs 2048) * $(flag_value num-steps 256) * $1 ))
}
