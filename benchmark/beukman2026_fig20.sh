#!/usr/bin/env bash
# B26 Fig. 20 (App. F): the Fig. 11 agents measured on Kinetix's hand-designed levels. The same runs as Fig. 11, so
# this runs beukman2026_fig11.sh (every environment variable of that script applies; finished runs are reused), which
# draws both beukman2026_fig11 and beukman2026_fig20. Page: docs/sfl_kinetix_jax.md
exec bash "$(dirname "$0")/beukman2026_fig11.sh" "$@"
