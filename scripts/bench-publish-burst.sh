#!/usr/bin/env bash
# Benchmark (not run by check.sh): N jobs finishing at once, each publishing its own sealed
# spool to one remote state repository over smart HTTP, every answer of the server delayed.
#
# It starts lighttpd + `git http-backend` on 127.0.0.1 (scripts/lib-git-http.sh; lighttpd is
# installed with apt-get when missing, else one SKIP line and exit 0) serving a bare repository
# with the pre-receive hook installed, and scripts/faultproxy.py in front of it holding each
# answer DELAY_MS milliseconds (`latency:MS`; none for 0). It generates N sealed spools of 20
# events, each from its own producer run (scripts/gen-ledger.py), and N empty cache
# repositories, then starts N `publish --remote URL --repo CACHE SPOOL --json` at once (each
# bounded by BENCH_JOB_TIMEOUT seconds, default 600), and at the end verifies a fresh clone and
# counts its events against the spools' event ids.
#
# usage: scripts/bench-publish-burst.sh [--bin PATH] N DELAY_MS
#        --bin PATH   the action-ledger binary (default: the release build of this checkout,
#                     $CARGO_TARGET_DIR or target/, built when absent); KEEP=1 keeps the work
#                     directory (per-job records in jobs.jsonl, the server's access.log);
#                     BENCH_PUBLISH_ARGS adds flags to every publish (e.g. --direct, to measure
#                     one compare-and-swap per attempt against pending publications)
#
# Prints two JSON lines on stdout:
#   {"type":"burst","jobs","delay_ms","landed","refused","failed","pushes","packs_sent",
#    "attempts_total","attempts_mean","attempts_max","wall_p50_s","wall_p90_s","wall_max_s",
#    "all_landed_after_s"}
#     landed: exit 0 (created or unchanged); refused: exit 1 (contention, a hook's refusal);
#     failed: any other exit, a timeout included. From the server's access log: pushes, the
#     `git push` runs (their receive-pack ref advertisements), and packs_sent, those that sent
#     a pack (a push whose lease is already stale at the advertisement sends none). attempts:
#     the `attempts` of each landed job's publication record (builds, one push each).
#     wall: per job, from the common start to its exit. all_landed_after_s: from the start to
#     the last job's exit, null unless every job landed.
#   {"type":"verify","clean","events","expected","duplicates","missing","unexpected"}
#     `verify` of a fresh clone exits 0; every spool event is there exactly once.
# Exit 0 when every job landed and the clone verifies with each event once, else 1.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
bin=
if [ "${1:-}" = --bin ]; then bin=$2; shift 2; fi
[ $# -eq 2 ] || { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }
jobs=$1 delay=$2
case "$jobs$delay" in *[!0-9]*) echo "bench-publish-burst: N and DELAY_MS are whole numbers" >&2; exit 2 ;; esac
[ "$jobs" -ge 1 ] || { echo "bench-publish-burst: N must be at least 1" >&2; exit 2; }
if [ -z "$bin" ]; then
  bin=${CARGO_TARGET_DIR:-$here/target}/release/action-ledger
  [ -x "$bin" ] || (cd "$here" && cargo build --release --quiet)
fi
bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
[ -x "$bin" ] || { echo "bench-publish-burst: no binary at $bin" >&2; exit 2; }

work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  if [ -n "${KEEP:-}" ]; then echo "kept $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT
fail() { echo "bench-publish-burst: FAIL: $*" >&2; exit 1; }
export SOURCE_DATE_EPOCH=1773100800 GIT_TERMINAL_PROMPT=0
export GIT_CONFIG_NOSYSTEM=1 HOME="$work/home"
mkdir -p "$HOME"
# shellcheck source=scripts/lib-git-http.sh
. "$here/scripts/lib-git-http.sh"

# The server: the hook runs this binary.
mkdir -p "$work/http/srv"
"$bin" -q hooks install --repo "$work/http/srv/server.git" --bin "$bin" >/dev/null
# No authentication here: git http-backend takes pushes only when told so.
git -C "$work/http/srv/server.git" config http.receivepack true
start_git_http "$work/http" || { echo "bench-publish-burst: SKIP: lighttpd is not installed and cannot be (apt-get as root)"; exit 0; }
http_pid=${pids[-1]}
direct="http://127.0.0.1:$http_port/git/server.git"
wait_for lighttpd git ls-remote "$direct"
url=$direct
if [ "$delay" -gt 0 ]; then
  python3 "$here/scripts/faultproxy.py" "$work/proxy.port" "$http_port" "latency:$delay" &
  pids+=($!)
  wait_for faultproxy test -s "$work/proxy.port"
  url="http://127.0.0.1:$(cat "$work/proxy.port")/git/server.git"
  wait_for faultproxy git ls-remote "$url"
fi
: >"$work/http/access.log" # count only the burst's requests

# N sealed spools of 20 events, one producer run each; N empty caches.
python3 "$here/scripts/gen-ledger.py" "$work/spools" "$jobs" 1 20
"$bin" -q seal "$work"/spools/* >/dev/null
for i in $(seq 0 $((jobs - 1))); do git init -q --bare "$work/cache-$i.git"; done

# The burst: every job waits for the start file, then publishes.
mkdir -p "$work/jobs"
for i in $(seq 0 $((jobs - 1))); do
  (
    while [ ! -e "$work/go" ]; do sleep 0.01; done
    set +e
    # shellcheck disable=SC2086 # BENCH_PUBLISH_ARGS is a list of flags
    timeout "${BENCH_JOB_TIMEOUT:-600}" "$bin" -q publish --json --remote "$url" ${BENCH_PUBLISH_ARGS:-} \
      --repo "$work/cache-$i.git" "$work/spools/spool-$(printf %04d "$i")" \
      >"$work/jobs/$i.out" 2>"$work/jobs/$i.err"
    echo "$? $(date +%s.%N)" >"$work/jobs/$i.end"
  ) &
  pids+=($!)
done
burst=("${pids[@]:$((${#pids[@]} - jobs))}")
sleep 0.5 # every job is waiting
start=$(date +%s.%N)
touch "$work/go"
for p in "${burst[@]}"; do wait "$p" || true; done


# A fresh clone (from the server directly: the delay is the jobs' network, not the check's).
git clone -q --bare "$direct" "$work/clone.git"
verified=false
"$bin" -q verify --repo "$work/clone.git" >"$work/verify.out" 2>&1 && verified=true
"$bin" -q log --json --repo "$work/clone.git" >"$work/events.jsonl"
find "$work/spools" -path '*/.clawsweeper-repair/action-events/*/*.json' \
  ! -path '*/_finalizations/*' ! -path '*/_partitions/*' -printf '%f\n' | sed 's/\.json$//' >"$work/expected.txt"
# lighttpd writes its access log out when it stops.
{ kill "$http_pid"; wait "$http_pid"; } 2>/dev/null || true
python3 - "$work" "$jobs" "$delay" "$start" >"$work/burst.json" <<'PY'
import json, math, os, re, sys
work, jobs, delay, start = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
landed = refused = failed = 0
attempts, walls, records = [], [], []
for i in range(jobs):
    code, end = open(f"{work}/jobs/{i}.end").read().split()
    code, wall = int(code), float(end) - start
    walls.append(wall)
    rec = None
    try:
        rec = json.loads(open(f"{work}/jobs/{i}.out").read().strip().splitlines()[-1])
    except (IndexError, ValueError):
        pass
    if code == 0:
        landed += 1
        attempts.append(rec["attempts"] if rec else 0)
    elif code == 1:
        refused += 1
    else:
        failed += 1
    err = open(f"{work}/jobs/{i}.err").read().strip()
    records.append({"job": i, "exit": code, "wall_s": round(wall, 3),
                    "status": rec and rec.get("status"), "attempts": rec and rec.get("attempts"),
                    "error": err[-400:] or None})
with open(f"{work}/jobs.jsonl", "w") as f:
    for r in records:
        f.write(json.dumps(r, sort_keys=True) + "\n")
log = open(f"{work}/http/access.log").read().splitlines()
pushes = sum(1 for line in log if re.match(r"GET \S*/info/refs\?service=git-receive-pack ", line))
packs = sum(1 for line in log if re.match(r"POST \S*/git-receive-pack ", line))
def pct(xs, p):
    xs = sorted(xs)
    return round(xs[max(0, math.ceil(p / 100 * len(xs)) - 1)], 3)
print(json.dumps({
    "type": "burst", "jobs": jobs, "delay_ms": delay, "landed": landed, "refused": refused,
    "failed": failed, "pushes": pushes, "packs_sent": packs, "attempts_total": sum(attempts),
    "attempts_mean": round(sum(attempts) / len(attempts), 2) if attempts else None,
    "attempts_max": max(attempts) if attempts else None,
    "wall_p50_s": pct(walls, 50), "wall_p90_s": pct(walls, 90), "wall_max_s": pct(walls, 100),
    "all_landed_after_s": round(max(walls), 3) if landed == jobs else None,
}, separators=(",", ":")))
PY
cat "$work/burst.json"
python3 - "$work" "$verified" <<'PY' | tee "$work/verify.json"
import collections, json, sys
work, verified = sys.argv[1], sys.argv[2] == "true"
seen = collections.Counter(json.loads(l)["event_id"] for l in open(f"{work}/events.jsonl") if l.strip())
expected = set(open(f"{work}/expected.txt").read().split())
print(json.dumps({
    "type": "verify", "clean": verified, "events": sum(seen.values()), "expected": len(expected),
    "duplicates": sum(1 for n in seen.values() if n > 1),
    "missing": len(expected - set(seen)), "unexpected": len(set(seen) - expected),
}, separators=(",", ":")))
PY
[ "$verified" = true ] || { cat "$work/verify.out" >&2; exit 1; }
python3 - "$work" <<'PY' || exit 1
import json, sys
work = sys.argv[1]
b = json.loads(open(f"{work}/burst.json").read())
v = json.loads(open(f"{work}/verify.json").read())
ok = (b["landed"] == b["jobs"] and v["events"] == v["expected"]
      and v["duplicates"] == v["missing"] == v["unexpected"] == 0)
sys.exit(0 if ok else 1)
PY
