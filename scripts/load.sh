#!/usr/bin/env bash
# Load test with a Jepsen-style history check (issue 6).
#
# PUBLISHERS processes each publish RUNS distinct producer runs, 4 processes replay runs that
# others publish, and 2 publish conflicting content under identities the others publish, all at
# once, against a local repository and against a remote one served by `git daemon` on 127.0.0.1
# with the pre-receive hook installed. Every process logs each attempt (source, outcome,
# publication record). The check: every acknowledged publication's paths are in the final tree
# with the bytes that publication wrote; nothing refused left a trace; each conflicting identity
# has exactly one winner; no event appears twice; `verify` and `git fsck --strict` are clean.
# Remote publications land through pending publications (combined landings): after the load no
# publication is left pending, and each refusal mark's publication left nothing in the ledger.
#
# usage: scripts/load.sh [local|remote|both] [PUBLISHERS] [RUNS]   (defaults: both 16 10)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
mode=${1:-both} publishers=${2:-16} runs=${3:-10}
bin=${BIN:-${CARGO_TARGET_DIR:-$here/target}/debug/action-ledger}
# The hook finds its binary through this (it names no build path).
export ACTION_LEDGER_BIN="$bin"
[ -x "$bin" ] || (cd "$here" && cargo build --quiet)
work=$(mktemp -d)
daemon_pid=
cleanup() { [ -n "$daemon_pid" ] && kill "$daemon_pid" 2>/dev/null; [ -n "${KEEP:-}" ] && echo "kept $work" || rm -rf "$work"; }
trap cleanup EXIT
export SOURCE_DATE_EPOCH=1773100800

# Sources: one sealed spool per producer run, and a conflicting variant for two of them.
total=$((publishers * runs))
python3 "$here/scripts/gen-ledger.py" "$work/spools" "$total" 1 4
"$bin" -q seal "$work"/spools/* >/dev/null
for v in 0 1; do
  src="$work/spools/spool-$(printf %04d "$v")"
  dst="$work/variants/variant-$v"
  mkdir -p "$work/variants" && cp -r "$src" "$dst"
  rm -r "$dst/.clawsweeper-repair/action-events/_finalizations"
  victim=$(find "$dst/.clawsweeper-repair/action-events" -path '*/openclaw-repo-*/*.json' | sort | sed -n 1p)
  rm "$victim"   # same producer run, one event fewer: a different shard set under the same identity
  "$bin" -q seal "$dst" >/dev/null
done

target_args() { # label, cache name -> publish arguments for that process
  if [ "$1" = local ]; then
    echo "--repo $work/local.git"
  else
    echo "--repo $work/remote-$2.git --remote git://127.0.0.1:$port/server.git"
  fi
}

run_load() { # label (local | remote)
  local label=$1
  local logs="$work/logs-$label"; mkdir -p "$logs"
  local start end
  start=$(date +%s.%N)
  local pids=()
  for p in $(seq 0 $((publishers - 1))); do
    ( for r in $(seq 0 $((runs - 1))); do
        src="$work/spools/spool-$(printf %04d $((p * runs + r)))"
        set +e; out=$("$bin" -q publish --json $(target_args "$label" "cache-$p") "$src" 2>"$logs/err-$p-$r"); rc=$?; set -e
        printf '{"process":"publisher-%s","source":"%s","exit":%s,"record":%s}\n' "$p" "$src" "$rc" "${out:-null}" >>"$logs/history.jsonl"
      done ) &
    pids+=($!)
  done
  for q in 0 1 2 3; do
    ( for r in $(seq 0 $((runs - 1))); do
        src="$work/spools/spool-$(printf %04d $(( (q * 7919 + r * 104729) % total )))"
        set +e; out=$("$bin" -q publish --json $(target_args "$label" "replay-$q") "$src" 2>/dev/null); rc=$?; set -e
        printf '{"process":"replayer-%s","source":"%s","exit":%s,"record":%s}\n' "$q" "$src" "$rc" "${out:-null}" >>"$logs/history.jsonl"
      done ) &
    pids+=($!)
  done
  for v in 0 1; do
    ( src="$work/variants/variant-$v"
      set +e; out=$("$bin" -q publish --json $(target_args "$label" "variant-$v") "$src" 2>"$logs/variant-$v.err"); rc=$?; set -e
      printf '{"process":"conflicter-%s","source":"%s","exit":%s,"record":%s}\n' "$v" "$src" "$rc" "${out:-null}" >>"$logs/history.jsonl" ) &
    pids+=($!)
  done
  wait "${pids[@]}" # not the git daemon
  end=$(date +%s.%N)
  echo "$start $end" >"$logs/clock"
}

check() { # label, git dir of the final state
  local label=$1 repo=$2
  "$bin" -q verify --repo "$repo" || { echo "load[$label]: FAIL: verify reports findings"; exit 1; }
  git -C "$repo" fsck --strict >/dev/null 2>&1 || { echo "load[$label]: FAIL: git fsck --strict"; exit 1; }
  git -C "$repo" ls-tree -r main | awk '{print $3" "$4}' >"$work/tree-$label.txt"
  # Expected bytes of every shard a source can publish: the seal output of each source.
  for src in "$work"/spools/* "$work"/variants/*; do
    [ -d "$work/expected/$(basename "$src")" ] || "$bin" -q seal --output "$work/expected/$(basename "$src")" "$src" >/dev/null
  done
  python3 - "$work" "$label" "$publishers" <<'PY'
import json, os, subprocess, sys, hashlib
work, label, publishers = sys.argv[1], sys.argv[2], int(sys.argv[3])
tree = {}
for line in open(os.path.join(work, f"tree-{label}.txt")):
    oid, path = line.rstrip("\n").split(" ", 1)
    tree[path] = oid
def blob_id(data): return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
history = [json.loads(l) for l in open(os.path.join(work, f"logs-{label}", "history.jsonl"))]
start, end = map(float, open(os.path.join(work, f"logs-{label}", "clock")).read().split())
acked = [h for h in history if h["exit"] == 0]
refused = [h for h in history if h["exit"] != 0]
lost, leaked, wrong = [], [], []
for h in acked:
    m = h["record"]["manifest"]
    for p in m["paths"]:
        if p not in tree: lost.append((h["source"], p))
    exp_root = os.path.join(work, "expected", os.path.basename(h["source"]))
    for p in m["eventPaths"]:
        data = open(os.path.join(exp_root, p), "rb").read()
        if h["record"]["status"] == "created" and tree.get(p) != blob_id(data): wrong.append(p)
for h in refused:
    exp_root = os.path.join(work, "expected", os.path.basename(h["source"]))
    for dirpath, _, files in os.walk(exp_root):
        for f in files:
            p = os.path.relpath(os.path.join(dirpath, f), exp_root)
            data = open(os.path.join(dirpath, f), "rb").read()
            if tree.get(p) == blob_id(data): leaked.append((h["source"], p))
# Each conflicting identity: exactly one of original and variant acknowledged.
conflicts = 0
for v in (0, 1):
    orig = [h for h in history if h["source"].endswith(f"spool-{v:04d}") and h["process"].startswith("publisher")]
    var = [h for h in history if h["source"].endswith(f"variant-{v}")]
    winners = sum(1 for h in orig + var if h["exit"] == 0)
    losers = [h for h in orig + var if h["exit"] != 0]
    assert winners == 1 and len(losers) == 1 and losers[0]["exit"] == 1, (v, orig, var)
    conflicts += 1
publisher_refusals = [h for h in refused if h["process"].startswith(("publisher", "replayer"))
                      and not any(h["source"].endswith(f"spool-{v:04d}") for v in (0, 1))]
events = [p for p in tree if p.startswith("ledger/v1/import-bindings/events/")]
retries = sum(h["record"]["attempts"] - 1 for h in acked)
assert not lost, f"lost: {lost[:5]}"
assert not wrong, f"wrong bytes: {wrong[:5]}"
assert not leaked, f"refused publications left files: {leaked[:5]}"
assert not publisher_refusals, f"unexpected refusals: {publisher_refusals[:3]}"
secs = end - start
print(f"load[{label}]: attempted {len(history)}, acknowledged {len(acked)} "
      f"({sum(1 for h in acked if h['record']['status'] == 'created')} created, "
      f"{sum(1 for h in acked if h['record']['status'] == 'unchanged')} unchanged), retries {retries}, "
      f"conflicts refused {conflicts}, lost 0, duplicated 0, events {len(events)}, "
      f"{len(acked) / secs:.1f} publications/s over {secs:.1f} s with {publishers} publishers")
PY
}

check_pending() { # git dir of the remote: the combined landings' refs (publish --remote parks
  # a publication under refs/ledger/incoming/<key> when the ledger moved under it, and the
  # first pending job lands every pending one). After `maintain --remote` lands what is left
  # (a direct landing leaves its incoming ref for the next lander to delete), nothing is
  # pending; every refusal mark names a publication none of whose shards is in the ledger
  # (its event bindings may be: an event it shares with the publication that won carries the
  # same binding bytes, written by the winner).
  local repo=$1
  "$bin" -q maintain --remote "$repo" --repo "$work/maint.git" >/dev/null || { echo "load[remote]: FAIL: maintain --remote"; exit 1; }
  [ -z "$(git -C "$repo" for-each-ref refs/ledger/incoming/)" ] || { echo "load[remote]: FAIL: pending publications left"; exit 1; }
  local marks=0
  for mark in $(git -C "$repo" for-each-ref --format='%(objectname)' refs/ledger/refused/); do
    marks=$((marks + 1))
    git -C "$repo" diff-tree -r --no-commit-id --root --diff-filter=A "$mark^" -- ledger/v1/events/ | while IFS=$'\t' read -r meta path; do
      blob=$(echo "$meta" | cut -d' ' -f4)
      [ "$(git -C "$repo" rev-parse -q --verify "main:$path" || true)" != "$blob" ] ||
        { echo "load[remote]: FAIL: refused publication $mark left $path in the ledger"; exit 1; }
    done
  done
  "$bin" -q verify --repo "$repo" || { echo "load[remote]: FAIL: verify after maintain --remote"; exit 1; }
  echo "load[remote]: pending publications: none left; $marks refusal mark(s), none with a shard in the ledger"
}

if [ "$mode" = local ] || [ "$mode" = both ]; then
  "$bin" -q hooks install --repo "$work/local.git" # creates the shared repository
  run_load local
  check local "$work/local.git"
fi
if [ "$mode" = remote ] || [ "$mode" = both ]; then
  mkdir -p "$work/served"
  "$bin" -q hooks install --repo "$work/served/server.git"
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()')
  git daemon --reuseaddr --listen=127.0.0.1 --port="$port" --base-path="$work/served" \
    --export-all --enable=receive-pack --informative-errors "$work/served" 2>"$work/daemon.log" &
  daemon_pid=$!
  for _ in $(seq 50); do git ls-remote "git://127.0.0.1:$port/server.git" >/dev/null 2>&1 && break; sleep 0.1; done
  run_load remote
  check remote "$work/served/server.git"
  check_pending "$work/served/server.git"
fi
echo "load: passed"
