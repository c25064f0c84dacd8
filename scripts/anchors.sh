#!/usr/bin/env bash
# The anchors (docs/anchors.md): AIPerf and GuideLLM beside bench against bench-scripted-server.
#
#   bash scripts/anchors.sh install     # the pinned clients (scripts/anchors/*.txt) in virtual environments
#                                       # under ${TTFT_BENCH_CACHE:-~/.cache/ttft-bench}/anchors, and a local
#                                       # tokenizer; reused when current (6.5 GB, GuideLLM's PyTorch most of it)
#   bash scripts/anchors.sh table       # install if needed, build bench and the server (release), then every
#                                       # client at concurrency 1 and 64: TTFT error against the server's
#                                       # log (p50/p99) and CPU seconds per 100 requests, as a table
#   bash scripts/anchors.sh available   # exit 0 when installed (the tests' check)
#
# Everything else (`client`, the table's flags): python3 scripts/anchors.py --help.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

case "${1:-}" in
table)
    shift
    python3 scripts/anchors.py install
    cargo build --release --quiet --bins
    exec python3 scripts/anchors.py table "$@"
    ;;
"")
    sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
*)
    exec python3 scripts/anchors.py "$@"
    ;;
esac
