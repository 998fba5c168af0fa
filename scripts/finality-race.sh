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
# Usage: scripts/finality-race.sh       (uses target/debug/action-ledger, building it when missing)
#        BIN=path/to/action-ledger ROUNDS=50 CLAIMERS=32 scripts/finality-race.sh
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
bin=${BIN:-${CARGO_TARGET_DIR:-$here/target}/debug/action-ledger}
[ -x "$bin" ] || (cd "$here" && cargo build --quiet)
rounds=${ROUNDS:-50}
claimers=${CLAIMERS:-32}
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

# finality/v1/actions/<sha256(id)[0:2]>/<id>
record() { echo "finality/v1/actions/$(printf %s "$1" | sha256sum | cut -c1-2)/$1"; }

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
