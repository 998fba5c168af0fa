#!/usr/bin/env bash
# Crash test: kill every writer with SIGKILL at random moments, then check that the repository is
# intact (`git fsck --strict`, `action-ledger verify`), that the ref holds either the old tip or
# complete operations on it, and that retrying the operation completes.
#
# Modes (each in its own function below):
#   publish      a publication (issue 6); the replay completes, no event lost or duplicated
#   publish-remote  three jobs publishing to one remote (with the hook) at once through pending
#                publications, one of them killed; the remote verifies, each publication is
#                landed, refused with a mark, or pending; `maintain --remote` and the killed
#                job's retry complete it, every event once
#   seal         sealing a spool; the retry completes and the spool equals one sealed unharmed
#   compact      a compaction; the retry completes, `log` prints the same events, a third run
#                changes nothing
#   create       `action create`; the retry under the same id exits 0 and the action is running
#   claim        `action claim`; the retry with the same attempt exits 0, or the claim landed
#                with that attempt
#   outcome      `action outcome`; the retry exits 0, or the outcome landed with that status
#   sweep        `sweep` over stale actions; the retry sweeps what is left, every one ends
#                lost_confirmation
#   run-wrapper  kill `run` itself (and then its orphaned child); the action is unclaimed (a
#                new `run` completes), claimed with the outcome pending (the attempt's report
#                completes) or complete
#   run-child    kill the command `run` started; `run` exits 128+9 and records `failed` with the
#                signal, or exits 0 and records `completed` when the command ended first
#   serve        `serve` under load (8 clients creating, claiming and reporting); every
#                acknowledged claim and outcome is in the repository with what was
#                acknowledged, an unacknowledged one landed whole or not at all, and a restarted
#                server serves a full create/claim/outcome
#   maintain     `maintain --all` consolidating the packs while a publisher lands beside it;
#                no object is lost (fsck, verify, the replay), and the packs of a killed
#                consolidation are merged by the next one
#   migrate      `maintain` moving a `flat` repository (the 0.1.0 compatibility fixture and 300
#                more actions), and in every other run the same records in the `nibble` layout
#                of 0.1.x, to the `hex2x2` layout; the ref holds the old layout or the new
#                one, never a mix, verify is clean, and the retry migrates with every action
#                shown as before
#   projection   `record` and `seal` delivering live-projection requests to an HTTPS CrabFleet
#                stand-in (scripts/crash-projection.py), killed at random until RUNS of them
#                died mid-run: counted at the stand-in, no request is lost (every event was
#                answered 2xx or has its projection.failed event) and none is delivered twice
#
# A kill inside a ref update can leave `<ref>.lock` behind (as with git); the next writer
# reclaims it when the killed writer had noted itself as its owner, and otherwise refuses with a
# message naming the lock; the script then removes it as an operator would once no writer runs.
# Such runs are counted.
#
# usage: scripts/crash.sh [RUNS] [MODE...]   (default 200 runs of publish; `all`: every mode;
#        RUNS per mode). BIN: the binary (default: the debug build). SERVE_RUNS_PER_REPO: runs of
#        `serve` into one repository before a new one (default 100).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
runs=${1:-200}
shift || true
modes=("$@")
[ ${#modes[@]} -gt 0 ] || modes=(publish)
[ "${modes[*]}" != all ] || modes=(publish publish-remote seal compact create claim outcome sweep run-wrapper run-child serve maintain migrate projection)
bin=${BIN:-${CARGO_TARGET_DIR:-$here/target}/debug/action-ledger}
[ -x "$bin" ] || (cd "$here" && cargo build --quiet)
work=$(mktemp -d)
server_pid=
keep=
cleanup() {
  [ -z "$server_pid" ] || kill -9 "$server_pid" 2>/dev/null || true
  if [ -n "$keep" ]; then echo "crash: the failed run's files are kept in $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT
export SOURCE_DATE_EPOCH=1773100800
export ACTION_LEDGER_AGENT_ID=crash-agent ACTION_LEDGER_PRINCIPAL=crash-principal
unset ACTION_LEDGER_NOW
mode=publish
fail() { echo "crash: FAIL ($mode, run $1): $2" >&2; keep=1; exit 1; }
# `git fsck --strict` of $2; on a finding, fails run $1 with fsck's first lines.
fsck() {
  local out
  out=$(git -C "$2" fsck --strict 2>&1) || fail "$1" "git fsck --strict: $(printf %s "$out" | grep -v '^Checking\|^dangling' | head -5)"
}

# A random pause of 0 to $1 milliseconds.
pause() {
  local ms=$(((RANDOM * 32768 + RANDOM) % $1))
  sleep "$(printf '%d.%03d' $((ms / 1000)) $((ms % 1000)))"
}

# Starts "$@" in the background, kills it with SIGKILL after a random pause of up to $window ms,
# reaps it, and counts whether it was killed or had finished.
killed=0 finished=0 stale_locks=0
kill_at_random() {
  "$@" >/dev/null 2>&1 &
  local pid=$!
  pause "$window"
  kill -9 "$pid" 2>/dev/null || true
  count_kill "$pid"
}
# Runs "$@" once, unharmed, and sets the kill window to 5/4 of the time it took (so some kills
# land after the operation completed, and the rest anywhere inside it).
calibrate() {
  local t0 t1
  t0=$(date +%s%N)
  "$@" >/dev/null
  t1=$(date +%s%N)
  window=$(((t1 - t0) / 800000))
  [ "$window" -ge 20 ] || window=20
}
# Reaps $1 and counts it: 137 is SIGKILL (a process that had already exited keeps its status).
count_kill() {
  local rc=0
  wait "$1" 2>/dev/null || rc=$?
  if [ "$rc" -eq 137 ]; then killed=$((killed + 1)); else finished=$((finished + 1)); fi
  progress
}
# Every 100 runs a line on stderr, so a long run stopped early still has a record.
progress() {
  local n=$((killed + finished))
  [ $((n % 100)) -ne 0 ] || echo "crash: $mode: $n runs killed so far ($killed mid-operation), every check before them passed" >&2
}

# The repository after a kill: fsck and verify clean, the ref on the old tip ($2) or at most $3
# commits ahead of it; a stale ref lock is removed (and counted). An old tip of `none` (a
# repository killed in its first operation) takes any tip, and no ref at all.
check_repo() { # run, old tip, most commits landed
  local repo=$4 after
  fsck "$1" "$repo"
  after=$(git -C "$repo" rev-parse -q --verify main || echo none)
  if [ "$2" != none ] && [ "$after" != "$2" ]; then
    git -C "$repo" merge-base --is-ancestor "$2" "$after" || fail "$1" "the ref left the old tip's history"
    [ "$(git -C "$repo" rev-list --count "$2..$after")" -le "$3" ] || fail "$1" "more than $3 commits landed"
  fi
  # No ref yet: no ledger, nothing to verify.
  [ "$after" = none ] || "$bin" -q verify --repo "$repo" >/dev/null || fail "$1" "verify after the kill"
  if [ -e "$repo/refs/heads/main.lock" ]; then
    stale_locks=$((stale_locks + 1))
    rm "$repo/refs/heads/main.lock"
  fi
}

report() { # what the mode checked
  echo "crash: $mode: $runs runs, $killed killed mid-operation, $finished finished before the kill, $stale_locks stale ref locks removed; $1"
  killed=0 finished=0 stale_locks=0
}

# finality/v1/actions/<h[0:2]>/<h[2:4]>/<id>/<file> (the hex2x2 layout of a new repository; h is
# the hex SHA-256 of the id): the file's text at main, or nothing.
fanout() { printf %s "$1" | sha256sum | sed -E 's|^(..)(..).*|\1/\2|'; }
record() { # repo, id, file
  git -C "$1" cat-file -p "main:finality/v1/actions/$(fanout "$2")/$2/$3" 2>/dev/null || true
}
field() { sed -n "s/.*\"$1\":\"\([^\"]*\)\".*/\1/p"; }

mode_publish() {
  local w=$work/publish debris_seen=0
  mkdir -p "$w"
  python3 "$here/scripts/gen-ledger.py" "$w/spools" "$((runs + 1))" 1 5
  "$bin" -q seal "$w"/spools/* >/dev/null
  local repo="$w/state.git"
  calibrate "$bin" -q publish --repo "$repo" "$w/spools/spool-0000"
  for i in $(seq 1 "$runs"); do
    local src="$w/spools/spool-$(printf %04d "$i")" before out
    before=$(git -C "$repo" rev-parse main)
    kill_at_random "$bin" -q publish --repo "$repo" "$src"
    check_repo "$i" "$before" 1 "$repo"
    [ -z "$(find "$repo/objects" -name 'tmp_al_*')" ] || debris_seen=$((debris_seen + 1))
    out=$("$bin" -q publish --json --repo "$repo" "$src") || fail "$i" "replay after the kill did not complete"
    case "$out" in *'"status":"created"'*|*'"status":"unchanged"'*) ;; *) fail "$i" "unexpected replay result: $out" ;; esac
    # A publication that wrote a pack removed the temporary pack files of the killed writer.
    case "$out" in *'"status":"created"'*)
      [ -z "$(find "$repo/objects/pack" -name 'tmp_al_*')" ] || fail "$i" "temporary pack files of a dead writer were left behind" ;;
    esac
  done
  "$bin" -q verify --repo "$repo" || fail end "final verify"
  fsck end "$repo"
  local events
  events=$(git -C "$repo" ls-tree -r --name-only main -- ledger/v1/import-bindings/events | wc -l)
  [ "$events" -eq $(((runs + 1) * 5)) ] || fail end "expected $(((runs + 1) * 5)) events, found $events"
  report "$debris_seen kills left temporary files (removed by the next pack); fsck, verify and every replay passed; $events events, none lost or duplicated"
}

mode_seal() {
  local w=$work/seal
  mkdir -p "$w"
  python3 "$here/scripts/gen-ledger.py" "$w/spools" "$runs" 2 20
  cp -a "$w/spools" "$w/unharmed"
  calibrate "$bin" -q seal "$w/unharmed/spool-0000"
  "$bin" -q seal "$w"/unharmed/* >/dev/null
  for i in $(seq 0 $((runs - 1))); do
    local name spool
    name=spool-$(printf %04d "$i") spool=$w/spools/spool-$(printf %04d "$i")
    kill_at_random "$bin" -q seal "$spool"
    "$bin" -q seal "$spool" >/dev/null 2>"$w/err" || fail "$i" "the retry of seal failed: $(cat "$w/err")"
    # A kill between writing a seal record's staging file and linking it leaves that file
    # (`<record>.<pid>.<uuid>.tmp`); the retry removes the staging files of dead sealers, so
    # the spool must then be exactly the one sealed unharmed.
    [ -z "$(find "$spool" -name '*.tmp')" ] || fail "$i" "the retry left a staging file of the killed sealer: $(find "$spool" -name '*.tmp' | head -3)"
    diff -r "$spool" "$w/unharmed/$name" >"$w/diff" || fail "$i" "the spool differs from one sealed unharmed: $(head -5 "$w/diff")"
  done
  "$bin" -q publish --repo "$w/state.git" "$w"/spools/* >/dev/null || fail end "publishing the sealed spools"
  "$bin" -q verify --repo "$w/state.git" >/dev/null || fail end "verify"
  report "every retry removed the killed sealer's staging file and left the spool byte for byte as sealed unharmed; they all publish and verify"
}

mode_compact() {
  local w=$work/compact base events
  mkdir -p "$w"
  python3 "$here/scripts/gen-ledger.py" "$w/spools" 24 2 10
  "$bin" -q seal "$w"/spools/* >/dev/null
  base=$w/base.git
  "$bin" -q publish --repo "$base" "$w"/spools/* >/dev/null
  events=$("$bin" -q log --repo "$base" | wc -l)
  local args=(--retention-days 30 --now 2026-12-01)
  cp -a "$base" "$w/calibrate.git"
  calibrate "$bin" -q compact --repo "$w/calibrate.git" "${args[@]}"
  for i in $(seq 1 "$runs"); do
    local repo=$w/r.git before
    rm -rf "$repo"
    cp -a "$base" "$repo"
    before=$(git -C "$repo" rev-parse main)
    kill_at_random "$bin" -q compact --repo "$repo" "${args[@]}"
    check_repo "$i" "$before" 1 "$repo"
    "$bin" -q compact --repo "$repo" "${args[@]}" >/dev/null 2>"$w/err" || fail "$i" "the retry of compact failed: $(cat "$w/err")"
    [ "$("$bin" -q log --repo "$repo" | wc -l)" -eq "$events" ] || fail "$i" "log does not print the $events events after the retry"
    [ -n "$(git -C "$repo" ls-tree -r --name-only main -- ledger/v1/segments)" ] || fail "$i" "the retry left no segment"
    before=$(git -C "$repo" rev-parse main)
    "$bin" -q compact --repo "$repo" "${args[@]}" >/dev/null || fail "$i" "a run after the retry failed"
    [ "$(git -C "$repo" rev-parse main)" = "$before" ] || fail "$i" "a run after the retry changed the ledger"
    check_repo "$i" "$before" 0 "$repo"
  done
  report "every retry completed with all $events events in segments, and a further run changed nothing"
}

mode_create() {
  local repo=$work/create.git before
  "$bin" -q action create --repo "$repo" --id warmup --guard-decision gd_warmup -- true >/dev/null
  calibrate "$bin" -q action create --repo "$repo" --id calibrate --guard-decision gd_calibrate -- true
  for i in $(seq 1 "$runs"); do
    before=$(git -C "$repo" rev-parse main)
    local create=("$bin" -q action create --repo "$repo" --id "act_create_$i" --guard-decision "gd_$i" -- true)
    kill_at_random "${create[@]}"
    check_repo "$i" "$before" 1 "$repo"
    "${create[@]}" >/dev/null 2>"$work/err" || fail "$i" "the retry of create failed: $(cat "$work/err")"
    [ "$(record "$repo" "act_create_$i" action.json | field lifecycle)" = running ] || fail "$i" "the action is not running after the retry"
  done
  report "every retry exited 0 and the action is running"
}

mode_claim() {
  local repo=$work/claim.git before attempt
  "$bin" -q action create --repo "$repo" --id calibrate --guard-decision gd_calibrate -- true >/dev/null
  calibrate "$bin" -q action claim --repo "$repo" calibrate --attempt crash-attempt-calibrate -- true
  for i in $(seq 1 "$runs"); do
    "$bin" -q action create --repo "$repo" --id "act_claim_$i" --guard-decision "gd_$i" -- true >/dev/null
    before=$(git -C "$repo" rev-parse main)
    attempt=crash-attempt-$(printf %06d "$i")
    local claim=("$bin" -q action claim --repo "$repo" "act_claim_$i" --attempt "$attempt" -- true)
    kill_at_random "${claim[@]}"
    check_repo "$i" "$before" 1 "$repo"
    if ! "${claim[@]}" >/dev/null 2>"$work/err"; then
      [ "$(record "$repo" "act_claim_$i" claim.json | field attempt_id)" = "$attempt" ] ||
        fail "$i" "the retry was refused and the claim is not the attempt's: $(cat "$work/err")"
    fi
    [ "$(record "$repo" "act_claim_$i" claim.json | field attempt_id)" = "$attempt" ] || fail "$i" "no claim by the attempt after the retry"
  done
  report "after every retry the action is claimed by the killed attempt, once"
}

mode_outcome() {
  local repo=$work/outcome.git before attempt
  "$bin" -q action create --repo "$repo" --id calibrate --guard-decision gd_calibrate -- true >/dev/null
  "$bin" -q action claim --repo "$repo" calibrate --attempt crash-attempt-calibrate -- true >/dev/null
  calibrate "$bin" -q action outcome --repo "$repo" calibrate completed --attempt crash-attempt-calibrate
  for i in $(seq 1 "$runs"); do
    attempt=crash-attempt-$(printf %06d "$i")
    "$bin" -q action create --repo "$repo" --id "act_outcome_$i" --guard-decision "gd_$i" -- true >/dev/null
    "$bin" -q action claim --repo "$repo" "act_outcome_$i" --attempt "$attempt" -- true >/dev/null
    before=$(git -C "$repo" rev-parse main)
    local outcome=("$bin" -q action outcome --repo "$repo" "act_outcome_$i" failed --error "run $i" --attempt "$attempt")
    kill_at_random "${outcome[@]}"
    check_repo "$i" "$before" 1 "$repo"
    "${outcome[@]}" >/dev/null 2>"$work/err" || grep -q 'OUTCOME_ALREADY_SET' "$work/err" ||
      fail "$i" "the retry of the outcome failed: $(cat "$work/err")"
    [ "$(record "$repo" "act_outcome_$i" outcome.json | field status)" = failed ] || fail "$i" "the outcome is not the one reported"
    [ "$(record "$repo" "act_outcome_$i" outcome.json | field error_message)" = "run $i" ] || fail "$i" "the outcome's error is not the one reported"
  done
  report "after every retry the outcome is the reported one, once"
}

mode_sweep() {
  local repo=$work/sweep.git before stale=2026-01-01T00:00:00Z
  ACTION_LEDGER_NOW=$stale "$bin" -q action create --repo "$repo" --id calibrate --guard-decision gd_calibrate -- true >/dev/null
  calibrate "$bin" -q sweep --repo "$repo"
  for i in $(seq 1 "$runs"); do
    for k in 1 2 3; do
      ACTION_LEDGER_NOW=$stale "$bin" -q action create --repo "$repo" --id "act_sweep_${i}_$k" --guard-decision "gd_$i" -- true >/dev/null
    done
    before=$(git -C "$repo" rev-parse main)
    kill_at_random "$bin" -q sweep --repo "$repo"
    check_repo "$i" "$before" 1 "$repo"
    "$bin" -q sweep --repo "$repo" >/dev/null 2>"$work/err" || fail "$i" "the retry of sweep failed: $(cat "$work/err")"
    for k in 1 2 3; do
      [ "$(record "$repo" "act_sweep_${i}_$k" outcome.json | field status)" = lost_confirmation ] || fail "$i" "act_sweep_${i}_$k was not swept"
    done
    before=$(git -C "$repo" rev-parse main)
    "$bin" -q sweep --repo "$repo" >/dev/null || fail "$i" "a sweep after the retry failed"
    [ "$(git -C "$repo" rev-parse main)" = "$before" ] || fail "$i" "a sweep with nothing stale changed the ledger"
  done
  report "every retry swept what was left; every stale action ended lost_confirmation; a further sweep changed nothing"
}

mode_run_wrapper() {
  local repo=$work/run-wrapper.git before attempt unclaimed=0 pending=0 complete=0
  "$bin" -q action create --repo "$repo" --id calibrate --guard-decision gd_calibrate -- sleep 0.05 >/dev/null
  calibrate "$bin" -q run --repo "$repo" --action calibrate --attempt crash-attempt-calibrate -- sleep 0.05
  for i in $(seq 1 "$runs"); do
    local id=act_wrapper_$i
    attempt=crash-attempt-$(printf %06d "$i")
    "$bin" -q action create --repo "$repo" --id "$id" --guard-decision "gd_$i" -- sleep 0.05 >/dev/null
    before=$(git -C "$repo" rev-parse main)
    # Its own process group, so the orphaned child can be found and ended after the kill.
    setsid "$bin" -q run --repo "$repo" --action "$id" --attempt "$attempt" -- sleep 0.05 >/dev/null 2>&1 &
    local pid=$!
    pause "$window"
    kill -9 "$pid" 2>/dev/null || true
    count_kill "$pid"
    kill -9 -- "-$pid" 2>/dev/null || true
    check_repo "$i" "$before" 2 "$repo"
    if [ -z "$(record "$repo" "$id" claim.json)" ]; then
      unclaimed=$((unclaimed + 1))
      "$bin" -q run --repo "$repo" --action "$id" --attempt "$attempt" -- sleep 0.05 >/dev/null 2>"$work/err" ||
        fail "$i" "a new run of the unclaimed action failed: $(cat "$work/err")"
    elif [ -z "$(record "$repo" "$id" outcome.json)" ]; then
      pending=$((pending + 1))
      "$bin" -q action outcome --repo "$repo" "$id" completed --attempt "$attempt" >/dev/null 2>"$work/err" ||
        fail "$i" "the attempt's report failed: $(cat "$work/err")"
    else
      complete=$((complete + 1))
    fi
    [ "$(record "$repo" "$id" claim.json | field attempt_id)" = "$attempt" ] || fail "$i" "the claim is not the attempt's"
    [ "$(record "$repo" "$id" outcome.json | field status)" = completed ] || fail "$i" "the outcome is not completed"
  done
  report "$unclaimed left unclaimed (a new run completed), $pending claimed with the outcome pending (the attempt's report completed), $complete complete"
}

mode_run_child() {
  local repo=$work/run-child.git before attempt child_killed=0 child_done=0
  for i in $(seq 1 "$runs"); do
    local id=act_child_$i pidfile=$work/child.pid rc=0
    rm -f "$pidfile"
    attempt=crash-attempt-$(printf %06d "$i")
    local cmd=(sh -c 'echo $$ >"$0.tmp" && mv "$0.tmp" "$0" && exec sleep 0.1' "$pidfile")
    "$bin" -q action create --repo "$repo" --id "$id" --guard-decision "gd_$i" -- "${cmd[@]}" >/dev/null
    before=$(git -C "$repo" rev-parse main)
    "$bin" -q run --repo "$repo" --action "$id" --attempt "$attempt" -- "${cmd[@]}" >/dev/null 2>"$work/err" &
    local pid=$!
    while [ ! -s "$pidfile" ] && kill -0 "$pid" 2>/dev/null; do sleep 0.005; done
    pause 150
    [ -s "$pidfile" ] && kill -9 "$(cat "$pidfile")" 2>/dev/null || true
    wait "$pid" || rc=$?
    check_repo "$i" "$before" 2 "$repo"
    local status error
    status=$(record "$repo" "$id" outcome.json | field status)
    error=$(record "$repo" "$id" outcome.json | field error_message)
    case "$rc/$status" in
      0/completed) child_done=$((child_done + 1)) ;;
      137/failed)
        child_killed=$((child_killed + 1))
        [ "$error" = "command killed by signal 9" ] || fail "$i" "the failure does not name the signal: $error" ;;
      *) fail "$i" "run exited $rc with the outcome '$status' ($(cat "$work/err"))" ;;
    esac
    killed=$child_killed finished=$child_done
    progress
  done
  report "every run exited 137 with the outcome failed (\"command killed by signal 9\"), or 0 with completed when the command ended first"
}

# The serve load: N client threads loop create -> claim -> outcome until the server goes away,
# logging `sent`/`ack` lines (kind, action id, attempt or status) as they go.
serve_client() {
  cat >"$work/client.py" <<'EOF'
import json, sys, threading, urllib.request, urllib.error
url, log_path, prefix, threads = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
ACT = {"kind": "shell", "command": "true"}
lock = threading.Lock()
log = open(log_path, "a", buffering=1)
def note(*words):
    with lock:
        log.write(" ".join(words) + "\n")
def call(method, path, body):
    req = urllib.request.Request(url + path, data=json.dumps(body).encode(), method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())
def worker(t):
    n = 0
    try:
        while True:
            n += 1
            aid, attempt = f"{prefix}_{t}_{n}", f"attempt-{prefix}-{t:04d}-{n:06d}"
            note("sent", "create", aid)
            s, _ = call("POST", "/api/actions", {"action_id": aid, "action_type": "build", "agent_id": "agent-1",
                        "act": ACT, "client_capabilities": ["execution_claims"]})
            if s not in (200, 201): note("refused", "create", aid, str(s)); continue
            note("ack", "create", aid)
            note("sent", "claim", aid, attempt)
            s, b = call("PATCH", f"/api/actions/{aid}", {"claim_execution": True, "attempt_id": attempt,
                        "agent_id": "agent-1", "act": ACT})
            if s != 200: note("refused", "claim", aid, str(s)); continue
            note("ack", "claim", aid, attempt)
            note("sent", "outcome", aid, "completed")
            s, _ = call("POST", f"/api/actions/{aid}/outcome", {"status": "completed", "attempt_id": attempt})
            if s != 200: note("refused", "outcome", aid, str(s)); continue
            note("ack", "outcome", aid, "completed")
    except Exception:  # the server went away (reset, refused, truncated answer)
        return
ts = [threading.Thread(target=worker, args=(t,)) for t in range(threads)]
for t in ts: t.start()
for t in ts: t.join()
EOF
  cat >"$work/audit.py" <<'EOF'
# Every acknowledged claim/outcome is in the repository as acknowledged; every record present is
# whole (parses as JSON with its id); a sent but unacknowledged one is absent or complete.
import hashlib, json, subprocess, sys
repo, log_path = sys.argv[1], sys.argv[2]
FILE = {"create": "action.json", "claim": "claim.json", "outcome": "outcome.json"}
lines = [l.split() for l in open(log_path)]
# One `git cat-file --batch` for every record the log names (a process per record made the
# audit most of a run's time).
def path(aid, kind):
    h = hashlib.sha256(aid.encode()).hexdigest()
    return f"main:finality/v1/actions/{h[:2]}/{h[2:4]}/{aid}/{FILE[kind]}"
paths = sorted({path(l[2], l[1]) for l in lines})
out = subprocess.run(["git", "-C", repo, "cat-file", "--batch"], input="".join(p + "\n" for p in paths).encode(),
                     capture_output=True, check=True).stdout
found, at = {}, 0
for p in paths:
    end = out.index(b"\n", at)
    head = out[at:end].split()
    if head[-1] == b"missing":
        at = end + 1
        continue
    size = int(head[2])
    found[p] = out[end + 1:end + 1 + size]
    at = end + 1 + size + 1
assert at == len(out), "cat-file answered more than was asked"
def rec(aid, kind):
    p = path(aid, kind)
    if p not in found: return None
    v = json.loads(found[p])
    assert v["action_id"] == aid, (aid, kind, v)
    return v
acked = {"create": 0, "claim": 0, "outcome": 0}; unacked_landed = 0; unacked_absent = 0
ack = {(l[1], l[2]) for l in lines if l[0] == "ack"}
for l in lines:
    kind, aid = l[1], l[2]
    v = rec(aid, kind)
    if l[0] == "ack":
        acked[kind] += 1
        if v is None: sys.exit(f"acknowledged {kind} of {aid} is missing")
        if kind == "claim" and v["attempt_id"] != l[3]: sys.exit(f"acknowledged claim of {aid} has attempt {v['attempt_id']}")
        if kind == "outcome" and v["status"] != l[3]: sys.exit(f"acknowledged outcome of {aid} has status {v['status']}")
    elif l[0] == "sent" and (kind, aid) not in ack:
        if v is None: unacked_absent += 1
        else:
            unacked_landed += 1
            if kind == "claim" and v["attempt_id"] != l[3]: sys.exit(f"unacknowledged claim of {aid} landed with another attempt")
print(acked["create"], acked["claim"], acked["outcome"], unacked_landed, unacked_absent)
EOF
}

# Sets `url` to the URL of the server $server_pid once it printed it to $2 (run $1). It waits
# up to 60 s while the server lives: on a loaded machine a start took more than 4 s.
serve_url() {
  url=
  for _ in $(seq 6000); do
    # The background job may not have created the file yet.
    url=$(sed -n 's/.*"url":"\([^"]*\)".*/\1/p' "$2" 2>/dev/null || true)
    [ -z "$url" ] || break
    kill -0 "$server_pid" 2>/dev/null || fail "$1" "the server exited at its start: $(cat "$work/serve.err")"
    sleep 0.01
  done
  [ -n "$url" ] || fail "$1" "the server did not start within 60 s: $(cat "$work/serve.err")"
}

# The retry after the kills into repository $1 (run $2): a restarted server serves a full
# create, claim and outcome, stops cleanly on SIGTERM, and the repository verifies.
serve_retry() {
  local url
  "$bin" -q serve --repo "$1" --listen 127.0.0.1:0 --insecure-no-auth --json >"$work/serve.out" 2>"$work/serve.err" &
  server_pid=$!
  serve_url "$2" "$work/serve.out"
  timeout 20 python3 - "$url" <<'EOF' || fail "$2" "a restarted server did not serve a full create, claim and outcome"
import json, sys, urllib.request
url = sys.argv[1]
def call(m, p, b):
    r = urllib.request.urlopen(urllib.request.Request(url + p, data=json.dumps(b).encode(), method=m, headers={"Content-Type": "application/json"}), timeout=10)
    return r.status
act = {"kind": "shell", "command": "true"}
assert call("POST", "/api/actions", {"action_id": "after_restart", "action_type": "b", "agent_id": "agent-1", "act": act, "client_capabilities": ["execution_claims"]}) == 201
assert call("PATCH", "/api/actions/after_restart", {"claim_execution": True, "attempt_id": "attempt-after-restart", "agent_id": "agent-1", "act": act}) == 200
assert call("POST", "/api/actions/after_restart/outcome", {"status": "completed", "attempt_id": "attempt-after-restart"}) == 200
EOF
  kill -TERM "$server_pid"
  wait "$server_pid" || fail "$2" "the restarted server did not stop cleanly"
  server_pid=
  "$bin" -q verify --repo "$1" >/dev/null || fail "$2" "verify after the restarted server"
}

mode_serve() {
  serve_client
  # A new repository every $per_repo runs: the checks after each kill (fsck, verify) read the
  # whole repository, so one repository of 1,000 runs (300,000 actions) made runs ever slower.
  local per_repo=${SERVE_RUNS_PER_REPO:-100} repos=1
  local repo=$work/serve-1.git acks=(0 0 0) landed=0 absent=0
  window=3000
  for i in $(seq 1 "$runs"); do
    if [ "$i" -gt 1 ] && [ $(((i - 1) % per_repo)) -eq 0 ]; then
      serve_retry "$repo" "$((i - 1))"
      rm -rf "$repo"
      repos=$((repos + 1))
      repo=$work/serve-$repos.git
    fi
    local out=$work/serve.out log=$work/serve-$i.log before url client
    before=$(git -C "$repo" rev-parse -q --verify main 2>/dev/null || echo none)
    "$bin" -q serve --repo "$repo" --listen 127.0.0.1:0 --insecure-no-auth --json >"$out" 2>"$work/serve.err" &
    server_pid=$!
    serve_url "$i" "$out"
    : >"$log"
    python3 "$work/client.py" "$url" "$log" "s$i" 8 &
    client=$!
    sleep 0.5
    pause "$window"
    kill -9 "$server_pid"
    wait "$server_pid" 2>/dev/null || true
    server_pid=
    killed=$((killed + 1))
    progress
    wait "$client" || fail "$i" "the client failed"
    check_repo "$i" "$before" 1000000 "$repo"
    local counts
    counts=$(python3 "$work/audit.py" "$repo" "$log" 2>&1) || fail "$i" "audit: $counts"
    read -r c1 c2 c3 l a <<<"$counts"
    acks=($((acks[0] + c1)) $((acks[1] + c2)) $((acks[2] + c3)))
    landed=$((landed + l)) absent=$((absent + a))
    rm -f "$log"
  done
  serve_retry "$repo" end
  report "acknowledged and found: ${acks[0]} creations, ${acks[1]} claims, ${acks[2]} outcomes; unacknowledged: $landed landed whole, $absent absent; $repos repositories of up to $per_repo runs each, each then served a full create, claim and outcome by a restarted server and verified"
}

mode_maintain() {
  local w=$work/maintain debris_seen=0 events
  mkdir -p "$w"
  python3 "$here/scripts/gen-ledger.py" "$w/spools" "$((runs + 1))" 1 5
  "$bin" -q seal "$w"/spools/* >/dev/null
  local repo="$w/state.git"
  "$bin" -q publish --repo "$repo" "$w/spools/spool-0000" >/dev/null
  calibrate "$bin" -q maintain --all --repo "$repo"
  for i in $(seq 1 "$runs"); do
    local src="$w/spools/spool-$(printf %04d "$i")" before pub out
    before=$(git -C "$repo" rev-parse main)
    # A publisher runs beside the consolidation that is killed: neither may lose an object.
    "$bin" -q publish --repo "$repo" "$src" >/dev/null 2>&1 &
    pub=$!
    kill_at_random "$bin" -q maintain --all --repo "$repo"
    wait "$pub" || fail "$i" "the publication beside the consolidation failed"
    [ "$(git -C "$repo" rev-parse main~1)" = "$before" ] || fail "$i" "the publication did not land one commit"
    check_repo "$i" "$before" 1 "$repo"
    [ -z "$(find "$repo/objects/pack" -name 'tmp_al_*')" ] || debris_seen=$((debris_seen + 1))
    out=$("$bin" -q publish --json --repo "$repo" "$src") || fail "$i" "replay after the kill did not complete"
    case "$out" in *'"status":"unchanged"'*) ;; *) fail "$i" "unexpected replay result: $out" ;; esac
  done
  "$bin" -q maintain --all --repo "$repo" >/dev/null || fail end "maintain after the runs"
  [ "$(find "$repo/objects/pack" -name '*.idx' | wc -l)" -eq 1 ] || fail end "maintain --all left more than one pack"
  "$bin" -q verify --repo "$repo" || fail end "final verify"
  fsck end "$repo"
  events=$(git -C "$repo" ls-tree -r --name-only main -- ledger/v1/import-bindings/events | wc -l)
  [ "$events" -eq $(((runs + 1) * 5)) ] || fail end "expected $(((runs + 1) * 5)) events, found $events"
  report "$debris_seen kills left temporary pack files (removed by the next pack written); fsck, verify and every replay passed; $events events, none lost; one pack after the final maintain"
}

mode_migrate() {
  local w=$work/migrate tmpl old=0 new=0
  mkdir -p "$w"
  tmpl=$w/template.git
  git init -q --bare --initial-branch=main "$tmpl"
  git -C "$tmpl" fast-import --quiet <"$here/testdata/compat/0.1.0/repo.fi"
  # More records than the fixture's, so that most kills fall inside the migration; a third of
  # them keep their outcome pending (pending-index entries), the rest complete.
  for i in $(seq 1 300); do
    "$bin" -q action create --repo "$tmpl" --id "act_mig_$i" --guard-decision "gd_mig_$i" -- true >/dev/null
    if [ $((i % 3)) -ne 0 ]; then
      "$bin" -q action claim --repo "$tmpl" "act_mig_$i" --attempt "crash-attempt-mig-$(printf %06d "$i")" -- true >/dev/null
      "$bin" -q action outcome --repo "$tmpl" "act_mig_$i" completed --attempt "crash-attempt-mig-$(printf %06d "$i")" >/dev/null
    fi
  done
  git -C "$tmpl" cat-file -e main:finality/v1/layout.json 2>/dev/null && fail setup "the template is not flat"
  # The same records as the 0.1.x default (`nibble`) wrote them: migrated to the current
  # layout (which builds the pending index), then moved to nibble's paths in one commit with
  # git's plumbing, with nibble's layout record.
  local nibble=$w/nibble.git
  cp -a "$tmpl" "$nibble"
  "$bin" -q maintain --repo "$nibble" >/dev/null
  python3 - "$nibble" <<'PY'
import hashlib, os, re, subprocess, sys
repo = sys.argv[1]
git = lambda *a, **k: subprocess.run(["git", "-C", repo, *a], check=True, text=True,
                                     capture_output=True, **k).stdout
rec = re.compile(r"^finality/v1/(actions|decisions)/[0-9a-f]{2}/[0-9a-f]{2}/(.*)$")
blob = git("hash-object", "-w", "--stdin", input='{"layout":"nibble","schema":"action-ledger.finality-layout","schema_version":1}\n').strip()
lines = []
for line in git("ls-tree", "-r", "--full-tree", "main").splitlines():
    meta, path = line.split("\t", 1)
    m = rec.match(path)
    if m:
        ident = m.group(2).split("/")[0]
        ident = ident[:-5] if m.group(1) == "decisions" else ident
        h = hashlib.sha256(ident.encode()).hexdigest()
        path = f"finality/v1/{m.group(1)}/{'/'.join(h[:6])}/{m.group(2)}"
    elif path == "finality/v1/layout.json":
        meta = f"100644 blob {blob}"
    lines.append(f"{meta}\t{path}\n")
env = dict(os.environ, GIT_INDEX_FILE=os.path.join(repo, "nibble.index"))
subprocess.run(["git", "-C", repo, "update-index", "--index-info"], input="".join(lines),
               text=True, check=True, env=env)
tree = subprocess.run(["git", "-C", repo, "write-tree"], text=True, check=True, env=env,
                      capture_output=True).stdout.strip()
os.remove(env["GIT_INDEX_FILE"])
commit = git("commit-tree", tree, "-p", "main", "-m", "test: the nibble layout of 0.1.x").strip()
git("update-ref", "refs/heads/main", commit)
PY
  git -C "$nibble" cat-file -p main:finality/v1/layout.json | grep -q '"nibble"' || fail setup "the nibble template has no nibble record"
  "$bin" -q verify --repo "$nibble" >/dev/null || fail setup "the nibble template does not verify"
  local ids=(act_mig_1 act_mig_3 act_mig_299 act_mig_300) shown_before
  shown_before=$(for id in "${ids[@]}"; do ACTION_LEDGER_NOW=2026-03-11T00:00:00Z "$bin" -q action show --repo "$tmpl" --json "$id"; done)
  cp -a "$tmpl" "$w/calibrate.git"
  calibrate "$bin" -q maintain --repo "$w/calibrate.git"
  local from=flat
  for i in $(seq 1 "$runs"); do
    # Every other run starts from the nibble layout.
    if [ $((i % 2)) -eq 0 ]; then tmpl=$nibble from=nibble; else tmpl=$w/template.git from=flat; fi
    local repo=$w/run.git before after shown
    rm -rf "$repo"
    cp -a "$tmpl" "$repo"
    before=$(git -C "$repo" rev-parse main)
    kill_at_random "$bin" -q maintain --repo "$repo"
    check_repo "$i" "$before" 1 "$repo"
    after=$(git -C "$repo" rev-parse main)
    if [ "$after" = "$before" ]; then
      old=$((old + 1))
    else
      new=$((new + 1))
      git -C "$repo" cat-file -p main:finality/v1/layout.json | grep -q '"hex2x2"' || fail "$i" "the ref moved without the new layout record ($from)"
    fi
    "$bin" -q maintain --repo "$repo" >/dev/null 2>"$work/err" || fail "$i" "the retry of maintain failed ($from): $(cat "$work/err")"
    git -C "$repo" cat-file -p main:finality/v1/layout.json | grep -q '"hex2x2"' || fail "$i" "no hex2x2 layout record after the retry ($from)"
    [ "$(git -C "$repo" rev-list --count "$before..main")" -eq 1 ] || fail "$i" "the migration took more than one commit"
    "$bin" -q verify --repo "$repo" >/dev/null || fail "$i" "verify after the retry"
    shown=$(for id in "${ids[@]}"; do ACTION_LEDGER_NOW=2026-03-11T00:00:00Z "$bin" -q action show --repo "$repo" --json "$id"; done)
    [ "$shown" = "$shown_before" ] || fail "$i" "action show differs after the migration"
  done
  report "from flat and from nibble in turn: the ref held the old layout after $old kills and the migrated one after $new, never a mix; fsck and verify clean after each; every retry migrated in one commit and showed the same actions"
}

mode_publish_remote() {
  local w=$work/publish-remote
  mkdir -p "$w"
  python3 "$here/scripts/gen-ledger.py" "$w/spools" "$((runs * 3 + 1))" 1 5
  "$bin" -q seal "$w"/spools/* >/dev/null
  local remote="$w/remote.git" pending_seen=0
  "$bin" -q hooks install --repo "$remote" --bin "$bin"
  calibrate "$bin" -q publish --remote "$remote" --repo "$w/cache-0.git" "$w/spools/spool-0000"
  window=$((window * 3))
  for i in $(seq 1 "$runs"); do
    local before victim pids=() j src
    before=$(git -C "$remote" rev-parse main)
    victim=$((RANDOM % 3))
    for j in 0 1 2; do
      src="$w/spools/spool-$(printf %04d $(((i - 1) * 3 + j + 1)))"
      "$bin" -q publish --remote "$remote" --repo "$w/cache-$i-$j.git" --wait 60 "$src" >/dev/null 2>&1 &
      pids+=($!)
    done
    pause "$window"
    kill -9 "${pids[$victim]}" 2>/dev/null || true
    for j in 0 1 2; do
      if [ "$j" = "$victim" ]; then count_kill "${pids[$j]}"
      else wait "${pids[$j]}" || fail "$i" "job $j (not killed) did not land"; fi
    done
    check_repo "$i" "$before" 3 "$remote"
    # Every publication is landed, refused (none is here: no conflicts), or pending.
    [ -z "$(git -C "$remote" for-each-ref refs/ledger/refused/)" ] || fail "$i" "a publication without conflict was refused"
    [ -z "$(git -C "$remote" for-each-ref refs/ledger/incoming/)" ] || pending_seen=$((pending_seen + 1))
    "$bin" -q maintain --remote "$remote" --repo "$w/maint.git" >/dev/null || fail "$i" "maintain --remote after the kill"
    [ -z "$(git -C "$remote" for-each-ref refs/ledger/)" ] || fail "$i" "maintain --remote left refs under refs/ledger/"
    src="$w/spools/spool-$(printf %04d $(((i - 1) * 3 + victim + 1)))"
    out=$("$bin" -q publish --json --remote "$remote" --repo "$w/cache-$i-$victim.git" "$src") || fail "$i" "the killed job's retry did not complete"
    case "$out" in *'"status":"created"'*|*'"status":"unchanged"'*) ;; *) fail "$i" "unexpected retry result: $out" ;; esac
    "$bin" -q maintain --remote "$remote" --repo "$w/maint.git" >/dev/null || fail "$i" "maintain --remote after the retry"
  done
  "$bin" -q verify --repo "$remote" || fail end "final verify"
  fsck end "$remote"
  local events
  events=$(git -C "$remote" ls-tree -r --name-only main -- ledger/v1/import-bindings/events | wc -l)
  [ "$events" -eq $(((runs * 3 + 1) * 5)) ] || fail end "expected $(((runs * 3 + 1) * 5)) events, found $events"
  report "$pending_seen kills left a publication pending (landed by maintain --remote); fsck, verify and every retry passed; $events events, none lost or duplicated"
}

mode_projection() {
  local out
  out=$(python3 "$here/scripts/crash-projection.py" "$bin" "$runs" "$work/projection") || { keep=1; fail end "lost or duplicated deliveries (or a failed unharmed run): $out"; }
  echo "crash: projection: $out"
  echo "crash: projection: every event was answered 2xx by the stand-in or has its projection.failed event (0 lost), none was received twice (0 duplicated), every outbox entry is settled"
}

for mode in "${modes[@]}"; do
  case "$mode" in
    publish | seal | compact | create | claim | outcome | sweep | serve | maintain | migrate | projection) "mode_$mode" ;;
    run-wrapper) mode_run_wrapper ;;
    publish-remote) mode_publish_remote ;;
    run-child) mode_run_child ;;
    *) echo "crash: unknown mode $mode (publish publish-remote seal compact create claim outcome sweep run-wrapper run-child serve maintain migrate projection all)" >&2; exit 2 ;;
  esac
done
echo "crash: ${modes[*]}: $runs runs each, all passed"
