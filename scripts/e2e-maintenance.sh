#!/usr/bin/env bash
# Git's own maintenance beside every writer (issue 43, item 4): git documents these as safe to
# run while other processes write, so none of our writes may fail beside them.
#
# A loop runs, over and over on the state repository, each of:
#   git prune-packed; git repack -d; git repack -A -d; git repack --cruft -d; git gc --quiet;
#   git pack-refs --all;
#   git commit-graph write --reachable; git maintenance run --task=<t> for t in gc,
#   commit-graph, loose-objects, incremental-repack, pack-refs
# while these writers run ROUNDS rounds each, in parallel with one another (bounded):
#   publish (a new sealed spool each round), action create / claim / outcome, sweep,
#   compact (once a round), run, and serve (create, claim and outcome over HTTP).
# Expected: zero failed writes; every write landed; `verify` and `git fsck --strict` clean.
# Not in the loop: `git repack -a -d` without -A/-k/--cruft drops every unreachable packed object
# at once, also a writer's objects that its ref update has not made reachable yet; git documents
# -A (what gc runs) and cruft packs for repositories written concurrently.
#
# usage: scripts/e2e-maintenance.sh [ROUNDS]   (default 6; BIN=path/to/action-ledger)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
rounds=${1:-6}
bin=${BIN:-${CARGO_TARGET_DIR:-$here/target}/debug/action-ledger}
[ -x "$bin" ] || (cd "$here" && cargo build --quiet)
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  [ -n "${KEEP:-}" ] && echo "kept $work" || rm -rf "$work"
}
trap cleanup EXIT
export SOURCE_DATE_EPOCH=1773100800 ACTION_LEDGER_AGENT_ID=agent-1 ACTION_LEDGER_PRINCIPAL=principal-1
export GIT_CONFIG_NOSYSTEM=1 HOME="$work/home" GIT_TERMINAL_PROMPT=0
mkdir -p "$HOME" "$work/out" "$work/fail"
fail() { echo "e2e-maintenance: FAIL: $*" >&2; exit 1; }
ok() { echo "e2e-maintenance: ok: $*"; }
repo=$work/state.git
git init -q --bare --initial-branch=main "$repo"
git --git-dir "$repo" config gc.auto 0 # only the loop runs maintenance
python3 "$here/scripts/gen-ledger.py" "$work/src" "$rounds" 1 4
"$bin" -q seal "$work"/src/* >/dev/null
spools=($(ls -d "$work"/src/*))

# The maintenance loop, until told to stop; it counts its runs.
maintenance() {
  local n=0
  local -a tasks=(
    "prune-packed" "repack -d -q" "repack -A -d -q" "repack --cruft -d -q" "gc --quiet"
    "pack-refs --all"
    "commit-graph write --reachable"
    "maintenance run --task=gc" "maintenance run --task=commit-graph"
    "maintenance run --task=loose-objects" "maintenance run --task=incremental-repack"
    "maintenance run --task=pack-refs"
  )
  while [ ! -e "$work/stop" ]; do
    for t in "${tasks[@]}"; do
      # shellcheck disable=SC2086 # the task is a word list
      git --git-dir "$repo" $t >>"$work/out/maintenance.log" 2>&1 || echo "git $t failed" >>"$work/out/maintenance.log"
      n=$((n + 1))
    done
  done
  echo "$n" >"$work/maintenance.count"
}
maintenance &
mpid=$!
pids+=($mpid)

w() { # writer, label, args...: a failed write is noted under fail/
  local writer=$1 label=$2; shift 2
  if ! "$bin" "$@" >"$work/out/$label.out" 2>"$work/out/$label.err"; then
    cp "$work/out/$label.err" "$work/fail/$label"
  fi
}
act='{"kind":"shell","command":"true"}'
publisher() {
  for i in $(seq 0 $((rounds - 1))); do w publish "publish-$i" -q publish --repo "$repo" "${spools[$i]}"; done
}
actor() {
  for i in $(seq "$rounds"); do
    w action "create-$i" -q action create --repo "$repo" --id "act_m_$i" --guard-decision "gd_$i" --act "$act"
    w action "claim-$i" -q action claim --repo "$repo" "act_m_$i" --attempt "attempt-maint-$(printf %010d "$i")" --act "$act"
    w action "outcome-$i" -q action outcome --repo "$repo" "act_m_$i" completed --attempt "attempt-maint-$(printf %010d "$i")"
    w action "create-run-$i" -q action create --repo "$repo" --id "act_r_$i" --guard-decision "gdr_$i" -- true
    w run "run-$i" -q run --repo "$repo" --action "act_r_$i" -- true
  done
}
sweeper() {
  for i in $(seq "$rounds"); do
    w sweep "sweep-$i" -q sweep --repo "$repo"
    w compact "compact-$i" -q compact --repo "$repo" --now 2026-05-01 --retention-days 1
  done
}
"$bin" serve --repo "$repo" --listen 127.0.0.1:0 --insecure-no-auth --json >"$work/out/serve.out" 2>"$work/out/serve.err" &
spid=$!
pids+=($spid)
surl=
for _ in $(seq 100); do
  surl=$(grep -o '"url":"[^"]*"' "$work/out/serve.out" 2>/dev/null | cut -d'"' -f4 || true)
  [ -n "$surl" ] && break
  sleep 0.1
done
[ -n "$surl" ] || fail "serve did not start: $(cat "$work/out/serve.err")"
server_client() {
  timeout 600 python3 - "$surl" "$((rounds * 4))" >"$work/out/http.out" 2>&1 <<'PY' || cp "$work/out/http.out" "$work/fail/serve"
import json, sys, urllib.request, urllib.error
url, n = sys.argv[1], int(sys.argv[2])
act = {"kind": "shell", "command": "true"}
bad = 0
def call(m, p, b, want):
    global bad
    req = urllib.request.Request(url + p, data=json.dumps(b).encode(), method=m,
        headers={"Content-Type": "application/json"})
    try:
        status = urllib.request.urlopen(req, timeout=60).status
        body = ""
    except urllib.error.HTTPError as e:
        status, body = e.code, e.read().decode()
    if status != want:
        bad += 1
        print("FAILED", m, p, status, body)
for i in range(n):
    aid, att = f"act_s_{i}", f"attempt-serve-{i:010d}"
    call("POST", "/api/actions", {"action_id": aid, "action_type": "b", "agent_id": "agent-1", "act": act,
        "client_capabilities": ["execution_claims"]}, 201)
    call("PATCH", f"/api/actions/{aid}", {"claim_execution": True, "attempt_id": att, "agent_id": "agent-1", "act": act}, 200)
    call("POST", f"/api/actions/{aid}/outcome", {"status": "completed", "attempt_id": att}, 200)
print("http writes:", 3 * n, "failed:", bad)
sys.exit(1 if bad else 0)
PY
}
publisher & p1=$!
actor & p2=$!
sweeper & p3=$!
server_client & p4=$!
wait $p1 $p2 $p3 $p4 || true
touch "$work/stop"
wait "$mpid" || true
kill -TERM "$spid"
wait "$spid" || fail "serve did not stop cleanly: $(tail -5 "$work/out/serve.err")"
runs=$(cat "$work/maintenance.count" 2>/dev/null || echo 0)
[ "$runs" -gt 0 ] || fail "the maintenance loop did not run"
if [ -n "$(ls "$work/fail")" ]; then
  for f in "$work"/fail/*; do echo "--- $(basename "$f"):"; head -5 "$f"; done >&2
  fail "$(ls "$work/fail" | wc -l) write(s) failed beside git maintenance ($runs maintenance runs)"
fi
ok "$((rounds * 10)) CLI writes and $((rounds * 12)) HTTP writes beside $runs git maintenance runs: none failed"

# Everything landed, and the repository is sound.
"$bin" -q action show --repo "$repo" "act_m_$rounds" | grep -q 'outcome: *completed' || fail "the last CLI outcome is missing"
"$bin" -q action show --repo "$repo" "act_s_$((rounds * 4 - 1))" | grep -q 'outcome: *completed' || fail "the last HTTP outcome is missing"
"$bin" -q verify --repo "$repo" >"$work/out/verify.out" 2>&1 || fail "verify: $(tail -5 "$work/out/verify.out")"
git --git-dir "$repo" fsck --strict --no-progress >"$work/out/fsck.out" 2>&1 || fail "git fsck: $(tail -5 "$work/out/fsck.out")"
ok "every write landed; verify and git fsck --strict are clean"
