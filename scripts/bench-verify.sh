#!/usr/bin/env bash
# Benchmark: seal + publish a synthetic ledger, then verify it whole; reports wall time and peak
# RSS of each step (GNU time). Default 100,000 events: 10 spools x 10 producers x 1,000 events.
# usage: scripts/bench-verify.sh [SPOOLS PRODUCERS EVENTS_PER_PRODUCER]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
spools=${1:-10} producers=${2:-10} per=${3:-1000}
(cd "$here" && cargo build --release --quiet)
bin=${CARGO_TARGET_DIR:-$here/target}/release/action-ledger
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export SOURCE_DATE_EPOCH=1773100800
measure() { # label, command...
  local label=$1; shift
  /usr/bin/time -f "%e %M" -o "$work/time" "$@" >/dev/null 2>"$work/err" || { cat "$work/err"; exit 1; }
  read -r secs kb <"$work/time"
  printf '%-28s %8.2f s  %8.1f MiB peak RSS\n' "$label" "$secs" "$(echo "$kb / 1024" | bc -l)"
}
python3 "$here/scripts/gen-ledger.py" "$work/spools" "$spools" "$producers" "$per"
events=$((spools * producers * per))
echo "synthetic ledger: $events events in $spools spools"
measure "seal (all spools)" "$bin" -q seal "$work"/spools/*
measure "publish (all spools)" "$bin" -q publish --repo "$work/state.git" "$work"/spools/*
measure "verify (whole revision)" "$bin" -q verify --repo "$work/state.git"
measure "verify --range (last push)" "$bin" -q verify --repo "$work/state.git" --range "main~1..main"
