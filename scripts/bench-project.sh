#!/usr/bin/env bash
# Benchmark of the projections (issue 46; a benchmark, not a test: check.sh does not run it).
# On a ledger of N generated events (scripts/gen-spools.py: the day1 corpus replayed with new
# identities, sealed and published), measured side by side in one run, as paired whole-process
# runs (A then B, --repeat times; medians), stdout to /dev/null:
#   (1) `project status --json` against `log` over the same ledger: wall, CPU (user + system)
#       and peak RSS (GNU time's %M), and the ratios;
#   (2) bringing a saved status view up to date after INC more events were published
#       (`project status --from SAVED --save OUT`) against folding the whole ledger again
#       (`project status --json`): the share of a full fold that the increment costs.
# Both folds of (2) are compared byte for byte first (the incremental equals the full): the
# document the increment prints with --json, and the one its saved file prints at the same
# revision.
# One line per measurement and per ratio on stdout.
#
# usage: scripts/bench-project.sh [--events N] [--increment INC] [--repeat K]
#   --events N       events of the ledger (default 100000)
#   --increment INC  events published after the view was saved (default 1000)
#   --repeat K       pairs of runs (default 3)
# Environment: BIN (the binary; default: build this checkout's release binary), KEEP=1 (keep the
# work directory), TMPDIR.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
events=100000 increment=1000 repeat=3
while [ $# -gt 0 ]; do
  case $1 in
    --events) events=${2:?}; shift 2 ;;
    --increment) increment=${2:?}; shift 2 ;;
    --repeat) repeat=${2:?}; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench-project: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
for v in "$events" "$increment" "$repeat"; do
  [[ $v =~ ^[1-9][0-9]*$ ]] || { echo "bench-project: counts must be positive integers" >&2; exit 2; }
done
[ -x /usr/bin/time ] || { echo "bench-project: SKIP: GNU time (/usr/bin/time) is not installed"; exit 0; }
bin=${BIN:-}
if [ -z "$bin" ]; then
  (cd "$here" && cargo build --release --quiet --bin action-ledger)
  bin=${CARGO_TARGET_DIR:-$here/target}/release/action-ledger
fi
export SOURCE_DATE_EPOCH=1773100800 LC_ALL=C
work=$(mktemp -d "${TMPDIR:-/tmp}/action-ledger-bench-project.XXXXXX")
cleanup() { if [ -n "${KEEP:-}" ]; then echo "bench-project: kept $work" >&2; else rm -rf "$work"; fi; }
trap cleanup EXIT

echo "bench-project: $events events, then $increment more; $repeat pairs of runs; $(nproc) cores; $("$bin" --version)"
python3 "$here/scripts/gen-spools.py" "$work/a" --events "$events" --spools $(( (events + 9999) / 10000 )) --seed 2 >/dev/null
python3 "$here/scripts/gen-spools.py" "$work/inc" --events "$increment" --spools 1 --seed 3 >/dev/null
"$bin" -q seal "$work/a"/* >/dev/null
"$bin" -q seal "$work/inc"/* >/dev/null
"$bin" -q publish --repo "$work/r.git" "$work/a"/* >/dev/null
"$bin" -q project status --repo "$work/r.git" --save "$work/saved" >/dev/null
"$bin" -q publish --repo "$work/r.git" "$work/inc"/* >/dev/null

# The incremental fold equals the full one, and so does its saved file read back.
"$bin" -q project status --repo "$work/r.git" --from "$work/saved" --save "$work/updated" --json >"$work/incremental.json"
"$bin" -q project status --repo "$work/r.git" --from "$work/updated" --json >"$work/resaved.json"
"$bin" -q project status --repo "$work/r.git" --json >"$work/full.json"
for f in incremental resaved; do
  cmp -s "$work/$f.json" "$work/full.json" || { echo "bench-project: the $f fold differs from the full one" >&2; exit 1; }
done

# run LABEL COMMAND...: one whole-process run; appends "wall cpu peak_kib" to $work/LABEL.
run() {
  local label=$1
  shift
  /usr/bin/time -f '%e %U %S %M' -o "$work/time.out" "$@" >/dev/null
  awk '{printf "%.3f %.3f %d\n", $1, $2 + $3, $4}' "$work/time.out" >>"$work/$label"
}
median() { # COLUMN FILE
  awk -v c="$1" '{print $c}' "$2" | sort -n | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'
}
report() { # LABEL: its medians
  echo "$1: wall $(median 1 "$work/$1") s, cpu $(median 2 "$work/$1") s, peak $(( $(median 3 "$work/$1") / 1024 )) MiB"
}
ratio() { # A B COLUMN NAME
  awk -v a="$(median "$3" "$work/$1")" -v b="$(median "$3" "$work/$2")" -v n="$4" \
    'BEGIN {printf "  %s / %s, %s: %.3f\n", ARGV[1], ARGV[2], n, (b > 0 ? a / b : 0)}' "$1" "$2"
}

for _ in $(seq "$repeat"); do
  run log "$bin" -q log --repo "$work/r.git"
  run status "$bin" -q project status --repo "$work/r.git" --json
  cp "$work/saved" "$work/from"
  run incremental "$bin" -q project status --repo "$work/r.git" --from "$work/from" --save "$work/out"
  run full "$bin" -q project status --repo "$work/r.git" --json
done
echo "(1) project status --json against log, $(( events + increment )) events"
report log
report status
ratio status log 1 wall
ratio status log 2 cpu
ratio status log 3 "peak RSS"
echo "(2) bringing the saved view up to date after $increment events against folding all $(( events + increment ))"
report incremental
report full
ratio incremental full 1 wall
ratio incremental full 2 cpu
ratio incremental full 3 "peak RSS"
