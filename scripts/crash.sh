#!/usr/bin/env bash
# Crash test (issue 6): kill `publish` with SIGKILL at random moments, then check that the
# repository is intact (`git fsck --strict`, `action-ledger verify`), that the ref holds either
# the old tip or a complete publication, and that replaying the publication completes.
#
# A kill inside the ref update itself can leave `refs/heads/main.lock` behind (as with git); the
# next writer reclaims it when the killed writer had noted itself as its owner, and otherwise
# refuses with a message naming the lock; the script then removes it as an operator would once
# no publisher runs. Such runs are counted.
#
# With `maintain` as the second argument, each run instead publishes the next spool while
# `maintain --all` consolidates the packs beside it, kills the consolidation at a random moment,
# and checks the same (no object lost: fsck, verify, the replay; the packs of a killed
# consolidation are merged by the next one).
#
# usage: scripts/crash.sh [RUNS] [publish|maintain]   (default 200 publish)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
runs=${1:-200}
mode=${2:-publish}
case $mode in publish|maintain) ;; *) echo "crash: mode is publish or maintain" >&2; exit 2 ;; esac
bin=${BIN:-${CARGO_TARGET_DIR:-$here/target}/debug/action-ledger}
[ -x "$bin" ] || (cd "$here" && cargo build --quiet)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export SOURCE_DATE_EPOCH=1773100800
fail() { echo "crash: FAIL (run $1): $2" >&2; exit 1; }

python3 "$here/scripts/gen-ledger.py" "$work/spools" "$runs" 1 5
"$bin" -q seal "$work"/spools/* >/dev/null
repo="$work/state.git"
"$bin" -q publish --repo "$repo" "$work/spools/spool-0000" >/dev/null
killed=0 completed_before_kill=0 stale_locks=0 debris_seen=0
if [ "$mode" = maintain ]; then
  packs() { find "$repo/objects/pack" -name '*.idx' | wc -l; }
  for i in $(seq 1 $((runs - 1))); do
    src="$work/spools/spool-$(printf %04d "$i")"
    before=$(git -C "$repo" rev-parse main)
    "$bin" -q publish --repo "$repo" "$src" >/dev/null 2>&1 &
    pub=$!
    "$bin" -q maintain --all --repo "$repo" >/dev/null 2>&1 &
    pid=$!
    sleep "0.$(printf %03d $((RANDOM % 400)))"
    if kill -9 "$pid" 2>/dev/null; then killed=$((killed + 1)); else completed_before_kill=$((completed_before_kill + 1)); fi
    wait "$pid" 2>/dev/null || true
    wait "$pub" || fail "$i" "the publication beside the consolidation failed"
    [ "$(git -C "$repo" rev-parse main~1)" = "$before" ] || fail "$i" "the publication did not land one commit"
    git -C "$repo" fsck --strict >/dev/null 2>&1 || fail "$i" "git fsck --strict after the kill"
    "$bin" -q verify --repo "$repo" || fail "$i" "verify after the kill"
    debris=$(find "$repo/objects/pack" -name 'tmp_al_*' | wc -l)
    [ "$debris" -eq 0 ] || debris_seen=$((debris_seen + 1))
    out=$("$bin" -q publish --json --repo "$repo" "$src") || fail "$i" "replay after the kill did not complete"
    case "$out" in *'"status":"unchanged"'*) ;; *) fail "$i" "unexpected replay result: $out" ;; esac
  done
  "$bin" -q maintain --all --repo "$repo" >/dev/null || fail end "maintain after the runs"
  [ "$(packs)" -eq 1 ] || fail end "maintain --all left $(packs) packs"
  "$bin" -q verify --repo "$repo" || fail end "final verify"
  git -C "$repo" fsck --strict >/dev/null 2>&1 || fail end "final fsck"
  events=$(git -C "$repo" ls-tree -r --name-only main -- ledger/v1/import-bindings/events | wc -l)
  [ "$events" -eq $((runs * 5)) ] || fail end "expected $((runs * 5)) events, found $events"
  echo "crash: $((runs - 1)) runs of maintain beside a publisher, $killed killed mid-consolidation, $completed_before_kill finished before the kill, $debris_seen kills left temporary files (removed by the next pack written); fsck, verify and every replay passed; $events events, none lost; one pack at the end"
  echo "crash: $((runs - 1)) passed, 0 failed"
  exit 0
fi
for i in $(seq 1 $((runs - 1))); do
  src="$work/spools/spool-$(printf %04d "$i")"
  before=$(git -C "$repo" rev-parse main)
  "$bin" -q publish --repo "$repo" "$src" >/dev/null 2>&1 &
  pid=$!
  # A random moment inside the publication (a debug publish of 5 events takes ~30-200 ms).
  sleep "0.$(printf %03d $((RANDOM % 200)))"
  if kill -9 "$pid" 2>/dev/null; then killed=$((killed + 1)); else completed_before_kill=$((completed_before_kill + 1)); fi
  wait "$pid" 2>/dev/null || true
  git -C "$repo" fsck --strict >/dev/null 2>&1 || fail "$i" "git fsck --strict after the kill"
  after=$(git -C "$repo" rev-parse main)
  if [ "$after" != "$before" ]; then
    [ "$(git -C "$repo" rev-parse main~1)" = "$before" ] || fail "$i" "the ref moved to something other than one commit on the old tip"
  fi
  "$bin" -q verify --repo "$repo" || fail "$i" "verify after the kill"
  if [ -e "$repo/refs/heads/main.lock" ]; then
    stale_locks=$((stale_locks + 1))
    rm "$repo/refs/heads/main.lock"
  fi
  debris=$(find "$repo/objects" -name 'tmp_al_*' | wc -l)
  [ "$debris" -eq 0 ] || debris_seen=$((debris_seen + 1))
  out=$("$bin" -q publish --json --repo "$repo" "$src") || fail "$i" "replay after the kill did not complete"
  case "$out" in *'"status":"created"'*|*'"status":"unchanged"'*) ;; *) fail "$i" "unexpected replay result: $out" ;; esac
  # A publication that wrote a pack removed the temporary pack files of the killed writer.
  case "$out" in *'"status":"created"'*)
    [ -z "$(find "$repo/objects/pack" -name 'tmp_al_*')" ] || fail "$i" "temporary pack files of a dead writer were left behind" ;;
  esac
done
"$bin" -q verify --repo "$repo" || fail end "final verify"
git -C "$repo" fsck --strict >/dev/null 2>&1 || fail end "final fsck"
events=$(git -C "$repo" ls-tree -r --name-only main -- ledger/v1/import-bindings/events | wc -l)
[ "$events" -eq $((runs * 5)) ] || fail end "expected $((runs * 5)) events, found $events"
echo "crash: $((runs - 1)) runs, $killed killed mid-publication, $completed_before_kill finished before the kill, $stale_locks stale ref locks removed, $debris_seen kills left temporary files (removed by the next pack); fsck, verify and every replay passed; $events events, none lost or duplicated"
echo "crash: $((runs - 1)) passed, 0 failed"
