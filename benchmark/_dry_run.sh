# Sourced by benchmark/_slurm_common.sh, and so by every figure script: under DRY_RUN=1, after the launcher's
# commands, cost and run directories, the figures and tables the script will draw once its runs have finished
# (cleanrl_scaling/utils/preview.py reads them from its --out options). A script that skips its figure sets
# DRAWS_NOTHING=1 before it exits.
dry_run_figures() {
  local status=$?
  (( status == 0 )) && [[ -z "${DRAWS_NOTHING:-}" ]] && \
    "${PYTHON:-python}" -m cleanrl_scaling.utils.preview figures "benchmark/$(basename "$0")" \
    "${OUT_DIR:-runs/figures}" "${SCALE:-paper}"
  return "$status"
}
[[ -z "${DRY_RUN:-}" ]] || trap dry_run_figures EXIT
