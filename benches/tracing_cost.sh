#!/usr/bin/env bash
# Runs benches/tracing_cost.rs with tracing compiled out and compiled in, as one table:
# builds the bench without the `otel` feature, then runs the `otel` build, which runs
# the first as its "off" mode beside its own three. Extra arguments go to the bench
# (e.g. --events 20000).
set -euo pipefail
cd "$(dirname "$0")/.."
off=$(cargo bench --bench tracing_cost --features gateway,runtime --no-run --message-format=json 2>/dev/null \
  | grep -o '"executable":"[^"]*tracing_cost[^"]*"' | tail -1 | cut -d'"' -f4)
[ -x "$off" ] || { echo "could not build the bench without otel" >&2; exit 1; }
cargo bench --bench tracing_cost --features gateway,runtime,otel -- --off-exe "$off" "$@"
