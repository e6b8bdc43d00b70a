#!/usr/bin/env bash
# B26 Fig. 16 (App. D): steps per second and wall-clock performance of the Fig. 15 runs (1M envs, 32/1024/8192
# minibatches). The same runs as Fig. 15, so this runs beukman2026_fig15.sh (every environment variable of that
# script applies; finished runs are reused), which draws beukman2026_fig15, _fig16a and _fig16b. Page:
# docs/sfl_kinetix_jax.md
exec bash "$(dirname "$0")/beukman2026_fig15.sh" "$@"
