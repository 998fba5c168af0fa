#!/usr/bin/env bash
# Process-level races of execution finality against the built binary and real git:
#   1. claims: ROUNDS rounds; each creates an action and starts CLAIMERS `action claim` processes
#      at once with distinct attempt ids. Exactly one wins per round (exit 0, "claimed":true, and
#      the repository's claim.json names its attempt); every other exits 1 with
#      EXECUTION_CLAIM_CONFLICT.
#   2. report against sweep: ROUNDS rounds; each creates an already stale action and starts one
#      `action outcome completed` and one `sweep` at once. Exactly one outcome lands; a losing
#      report exits 1 with OUTCOME_ALREADY_SET and current_status lost_confirmation, a losing
#      sweep does not sweep the action.
#   The repository then passes `git fsck --strict` and `action-ledger verify`.
#   3. claims across machines: REMOTE_ROUNDS rounds of REMOTE_CLAIMERS `action claim --remote`
#      processes, each with its OWN local repository (--repo, a cache) and all pushing to one
#      bare remote with the pre-receive hook installed. Exactly one wins per round (the remote's
#      claim.json names it); every other exits 1 with EXECUTION_CLAIM_CONFLICT and, reading the
#      action back from the remote with `action show --remote`, reports the winner's attempt.
#   4. the other writers through --remote: `run --remote` records its outcome, `sweep --remote`
#      marks a stale action lost_confirmation, `publish --remote` then `compact --remote` fold a
#      day1 month; a second compaction changes nothing. A fresh `git clone` of the remote passes
#      `git fsck --strict` and `action-ledger verify`, and has exactly the commits landed.
# Usage: scripts/finality-race.sh       (uses target/debug/action-ledger, building it when missing)
#        BIN=path/to/action-ledger ROUNDS=50 CLAIMERS=32 REMOTE_ROUNDS=20 REMOTE_CLAIMERS=16 \
#          scripts/finality-race.sh
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
bin=${BIN:-${CARGO_TARGET_DIR:-$here/target}/debug/action-ledger}
[ -x "$bin" ] || (cd "$here" && cargo build --quiet)
rounds=${ROUNDS:-50}
claimers=${CLAIMERS:-32}
remote_rounds=${REMOTE_ROUNDS:-20}
remote_claimers=${REMOTE_CLAIMERS:-16}
work=$(mktemp -d)
trap 'exec 3>&- 2>/dev/null || true; rm -rf "$work"' EXIT
export SOURCE_DATE_EPOCH=1772366400 ACTION_LEDGER_AGENT_ID=race-agent ACTION_LEDGER_PRINCIPAL=race-principal
unset ACTION_LEDGER_NOW
repo="$work/state.git"
fail() { echo "finality-race: FAIL: $*" >&2; exit 1; }
start=$(date +%s)

# A start line for all processes of a round: each waits on a FIFO that this shell holds open
# read-write (so no open blocks); writing one line per process releases them together.
mkfifo "$work/go"
exec 3<>"$work/go"
release() {
  sleep 0.05 # let the processes reach their read (a late one still finds its line)
  for _ in $(seq "$1"); do echo go >&3; done
}

# finality/v1/actions/<h[0:2]>/<h[2:4]>/<id>: the hex2x2 layout of a new repository (h is the
# hex SHA-256 of the id).
record() { echo "finality/v1/actions/$(printf %s "$1" | sha256sum | sed -E 's|^(..)(..).*|\1/\2|')/$1"; }

"$bin" -q action create --repo "$repo" --id warmup --guard-decision gd_warmup -- true >/dev/null

# 1. Claims.
for r in $(seq "$rounds"); do
  id="act_claim_$r"
  "$bin" -q action create --repo "$repo" --id "$id" --guard-decision "gd_$r" -- true >/dev/null
  d="$work/claims/$r"
  mkdir -p "$d"
  for i in $(seq "$claimers"); do
    (
      read -r _ <&3
      set +e
      "$bin" -q action claim --json --repo "$repo" "$id" --attempt "race-$r-attempt-$(printf %04d "$i")" -- true \
        >"$d/$i.out" 2>"$d/$i.err"
      echo $? >"$d/$i.rc"
    ) &
  done
  release "$claimers"
  wait
  winners=$(grep -l '"claimed":true' "$d"/*.out | wc -l)
  [ "$winners" -eq 1 ] || fail "round $r: $winners winners"
  conflicts=$(grep -l '"code":"EXECUTION_CLAIM_CONFLICT"' "$d"/*.out | wc -l)
  [ "$conflicts" -eq $((claimers - 1)) ] || fail "round $r: $conflicts conflicts: $(cat "$d"/*.out "$d"/*.err)"
  [ "$(cat "$d"/*.rc | grep -c '^0$')" -eq 1 ] && [ "$(cat "$d"/*.rc | grep -c '^1$')" -eq $((claimers - 1)) ] \
    || fail "round $r: exit codes $(cat "$d"/*.rc | tr '\n' ' ')"
  won=$(grep -h '"claimed":true' "$d"/*.out | sed 's/.*"attempt_id":"\([^"]*\)".*/\1/')
  git -C "$repo" cat-file -p "HEAD:$(record "$id")/claim.json" | grep -q "\"attempt_id\":\"$won\"" \
    || fail "round $r: the recorded claim is not the winner's ($won)"
done
echo "finality-race: ok: $rounds rounds of $claimers concurrent claims: one winner each, every loser EXECUTION_CLAIM_CONFLICT"

# 2. A report racing the sweep: the action is created 16 minutes in the past (by its clock).
stale=$(date -u -d '-16 minutes' +%Y-%m-%dT%H:%M:%SZ)
reports=0
sweeps=0
for r in $(seq "$rounds"); do
  id="act_sweep_$r"
  ACTION_LEDGER_NOW="$stale" "$bin" -q action create --repo "$repo" --id "$id" --guard-decision "gd_s$r" -- true >/dev/null
  d="$work/sweeps/$r"
  mkdir -p "$d"
  (
    read -r _ <&3
    # A random delay of up to 50 ms for the report lets both sides win some rounds.
    sleep "0.0$((RANDOM % 6))"
    set +e
    "$bin" -q action outcome --json --repo "$repo" "$id" completed --summary "raced the sweep" >"$d/report.out" 2>"$d/report.err"
    echo $? >"$d/report.rc"
  ) &
  (
    read -r _ <&3
    set +e
    "$bin" -q sweep --json --repo "$repo" >"$d/sweep.out" 2>"$d/sweep.err"
    echo $? >"$d/sweep.rc"
  ) &
  release 2
  wait
  [ "$(cat "$d/sweep.rc")" -eq 0 ] || fail "round $r: sweep failed: $(cat "$d/sweep.err")"
  status=$(git -C "$repo" cat-file -p "HEAD:$(record "$id")/outcome.json" | sed 's/.*"status":"\([a-z_]*\)".*/\1/')
  case "$status" in
    completed)
      reports=$((reports + 1))
      [ "$(cat "$d/report.rc")" -eq 0 ] || fail "round $r: completed, but the report failed"
      ! grep -q "\"type\":\"swept\".*\"action_id\":\"$id\"\|\"action_id\":\"$id\".*\"type\":\"swept\"" "$d/sweep.out" \
        || fail "round $r: completed, yet the sweep says it swept the action"
      ;;
    lost_confirmation)
      sweeps=$((sweeps + 1))
      [ "$(cat "$d/report.rc")" -eq 1 ] || fail "round $r: swept, but the report exited $(cat "$d/report.rc")"
      grep -q '"code":"OUTCOME_ALREADY_SET"' "$d/report.out" && grep -q '"current_status":"lost_confirmation"' "$d/report.out" \
        || fail "round $r: the losing report was not told the current status: $(cat "$d/report.out")"
      ;;
    *) fail "round $r: outcome is $status" ;;
  esac
done
echo "finality-race: ok: $rounds rounds of a report racing the sweep: one outcome each (report won $reports, sweep won $sweeps)"

git -C "$repo" fsck --strict --no-dangling >/dev/null 2>"$work/fsck.err" || fail "git fsck --strict: $(cat "$work/fsck.err")"
"$bin" -q verify --repo "$repo" || fail "verify found problems"
commits=$(git -C "$repo" rev-list --count HEAD)
expected=$((1 + rounds * 2 + rounds * 2))
[ "$commits" -eq "$expected" ] || fail "$commits commits, expected $expected (one per create, claim and outcome)"
# Every losing writer that got as far as building its commit left it unreachable: the races
# were decided by the compare-and-swap, not by who read first.
refused=$(git -C "$repo" fsck --unreachable --no-reflogs 2>/dev/null | grep -c '^unreachable commit' || true)
echo "finality-race: ok: git fsck --strict and verify are clean; $commits commits landed, $refused losing commits refused by the compare-and-swap; $(($(date +%s) - start)) s"

# 3. Claims across machines: one bare remote with the hook, one local cache per claimer.
remote="$work/remote.git"
"$bin" -q hooks install --repo "$remote"
[ -x "$remote/hooks/pre-receive" ] || fail "hooks install left no executable pre-receive hook"
# The hook runs the binary under test, wherever the installed hook looks for it first.
export ACTION_LEDGER_BIN="$bin"
rstart=$(date +%s)
"$bin" -q action create --remote "$remote" --repo "$work/creator.git" --id remote_warmup --guard-decision gd_rw -- true >/dev/null
for r in $(seq "$remote_rounds"); do
  id="act_remote_claim_$r"
  "$bin" -q action create --remote "$remote" --repo "$work/creator.git" --id "$id" --guard-decision "gd_r$r" -- true >/dev/null
  d="$work/remote-claims/$r"
  mkdir -p "$d"
  for i in $(seq "$remote_claimers"); do
    (
      read -r _ <&3
      set +e
      "$bin" -q action claim --json --remote "$remote" --repo "$work/machine-$i.git" "$id" \
        --attempt "remote-$r-attempt-$(printf %04d "$i")" -- true >"$d/$i.out" 2>"$d/$i.err"
      rc=$?
      echo $rc >"$d/$i.rc"
      # A loser reconciles by reading the action back from the remote, never by claiming again.
      if [ $rc -ne 0 ]; then
        "$bin" -q action show --json --remote "$remote" --repo "$work/machine-$i.git" "$id" >"$d/$i.show" 2>&1
      fi
    ) &
  done
  release "$remote_claimers"
  wait
  winners=$(grep -l '"claimed":true' "$d"/*.out | wc -l)
  [ "$winners" -eq 1 ] || fail "remote round $r: $winners winners: $(cat "$d"/*.out "$d"/*.err)"
  conflicts=$(grep -l '"code":"EXECUTION_CLAIM_CONFLICT"' "$d"/*.out | wc -l)
  [ "$conflicts" -eq $((remote_claimers - 1)) ] || fail "remote round $r: $conflicts conflicts: $(cat "$d"/*.out "$d"/*.err)"
  [ "$(cat "$d"/*.rc | grep -c '^0$')" -eq 1 ] && [ "$(cat "$d"/*.rc | grep -c '^1$')" -eq $((remote_claimers - 1)) ] \
    || fail "remote round $r: exit codes $(cat "$d"/*.rc | tr '\n' ' ')"
  won=$(grep -h '"claimed":true' "$d"/*.out | sed 's/.*"attempt_id":"\([^"]*\)".*/\1/')
  git -C "$remote" cat-file -p "refs/heads/main:$(record "$id")/claim.json" | grep -q "\"attempt_id\":\"$won\"" \
    || fail "remote round $r: the remote's claim is not the winner's ($won)"
  for show in "$d"/*.show; do
    grep -q "\"claim\":{[^}]*\"attempt_id\":\"$won\"" "$show" \
      || fail "remote round $r: a loser does not report the winner $won: $(cat "$show")"
  done
done
echo "finality-race: ok: $remote_rounds rounds of $remote_claimers claimers on separate repositories pushing to one remote with the hook: one winner each, every loser EXECUTION_CLAIM_CONFLICT and reports the winner; $(($(date +%s) - rstart)) s"

# 4. run, sweep, publish and compact through --remote.
"$bin" -q action create --remote "$remote" --repo "$work/creator.git" --id act_remote_run --guard-decision gd_run -- true >/dev/null
"$bin" -q run --remote "$remote" --repo "$work/runner.git" --action act_remote_run -- true \
  || fail "run --remote exited $?"
git -C "$remote" cat-file -p "refs/heads/main:$(record act_remote_run)/outcome.json" | grep -q '"status":"completed"' \
  || fail "run --remote did not record completed on the remote"
ACTION_LEDGER_NOW="$stale" "$bin" -q action create --remote "$remote" --repo "$work/creator.git" --id act_remote_stale --guard-decision gd_st -- true >/dev/null
# The sweeper's cache never saw it: a first sweep remembers it, one 16 minutes later (on the
# sweeper's clock) sweeps it.
"$bin" -q sweep --json --remote "$remote" --repo "$work/sweeper.git" >"$work/remote-sweep.out" || fail "sweep --remote failed"
grep -q '"swept":0' "$work/remote-sweep.out" || fail "sweep --remote swept a first sighting: $(cat "$work/remote-sweep.out")"
ACTION_LEDGER_NOW="$(date -u -d '+16 minutes' +%Y-%m-%dT%H:%M:%SZ)" \
  "$bin" -q sweep --json --remote "$remote" --repo "$work/sweeper.git" >"$work/remote-sweep.out" || fail "sweep --remote failed"
grep -q '"type":"swept".*"action_id":"act_remote_stale"\|"action_id":"act_remote_stale".*"type":"swept"' "$work/remote-sweep.out" \
  || fail "sweep --remote did not sweep the stale action: $(cat "$work/remote-sweep.out")"
git -C "$remote" cat-file -p "refs/heads/main:$(record act_remote_stale)/outcome.json" | grep -q '"status":"lost_confirmation"' \
  || fail "sweep --remote did not record lost_confirmation on the remote"
day1="$here/testdata/corpus/day1/spools"
spool=$(ls "$day1" | head -1)
cp -r "$day1/$spool" "$work/spool"
"$bin" -q publish --remote "$remote" --repo "$work/publisher.git" "$work/spool" >/dev/null || fail "publish --remote failed"
"$bin" -q compact --json --remote "$remote" --repo "$work/compactor.git" --now 2026-05-01 --retention-days 1 >"$work/remote-compact.out" \
  || fail "compact --remote failed: $(cat "$work/remote-compact.out")"
grep -q '"status":"created".*"type":"compaction"' "$work/remote-compact.out" || fail "compact --remote made no commit: $(cat "$work/remote-compact.out")"
git -C "$remote" ls-tree -r --name-only refs/heads/main | grep -q '^ledger/v1/segments/2026/03/' \
  || fail "compact --remote left no segment on the remote"
"$bin" -q compact --json --remote "$remote" --repo "$work/other-compactor.git" --now 2026-05-01 --retention-days 1 >"$work/remote-compact2.out" \
  || fail "the second compact --remote failed"
grep -q '"status":"unchanged".*"type":"compaction"' "$work/remote-compact2.out" || fail "a second compact --remote changed something"
echo "finality-race: ok: run, sweep, publish and compact land through --remote (the hook accepted each push)"

git clone --quiet --bare "$remote" "$work/clone.git"
git -C "$work/clone.git" fsck --strict --no-dangling >/dev/null 2>"$work/fsck.err" || fail "git fsck --strict of a clone of the remote: $(cat "$work/fsck.err")"
"$bin" -q verify --repo "$work/clone.git" || fail "verify of a fresh clone of the remote found problems"
commits=$(git -C "$work/clone.git" rev-list --count HEAD)
# warmup create, then per round a create and a claim; run: create, claim, outcome; sweep:
# create and sweep; publish; compact.
expected=$((1 + remote_rounds * 2 + 3 + 2 + 1 + 1))
[ "$commits" -eq "$expected" ] || fail "the remote has $commits commits, expected $expected"
echo "finality-race: ok: a fresh clone of the remote passes git fsck --strict and verify ($commits commits); $(($(date +%s) - start)) s in all"
