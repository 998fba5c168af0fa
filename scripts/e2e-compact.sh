#!/usr/bin/env bash
# End-to-end check of compaction and `log` (monthly segments) against the built binary and real git:
#   1. publish all 24 day1 spools, then `compact` with a window that covers March 2026: the
#      manifest reproduces every removed shard's exact bytes (cut from the segment blobs read with
#      git cat-file), `log --json` is byte-identical before and after, `verify` is clean (also as a
#      push range), a second `compact` makes no commit, `git fsck --strict` is clean, and the tree
#      has fewer entries (the counts and timings are printed);
#   2. a late replay of a day1 spool is unchanged; a late new shard set for March lands hot, the
#      next compaction folds it (manifest generation 2), `log` reads the same before and after;
#   3. through the pre-receive hook (real `git push`): forged compactions (a tampered segment
#      byte, a forged manifest entry) and a shard deletion without a manifest are refused with
#      their rules, and the server ref stays; the real compaction and the late fold are accepted.
# Usage: scripts/e2e-compact.sh   (BIN=path/to/action-ledger to choose the binary)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
corpus="$here/testdata/corpus/day1"
bin=${BIN:-${CARGO_TARGET_DIR:-$here/target}/debug/action-ledger}
# The hook finds its binary through this (it names no build path).
export ACTION_LEDGER_BIN="$bin"
[ -x "$bin" ] || (cd "$here" && cargo build --quiet)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export SOURCE_DATE_EPOCH=1773100800
export GIT_AUTHOR_NAME=tester GIT_AUTHOR_EMAIL=tester@invalid GIT_COMMITTER_NAME=tester GIT_COMMITTER_EMAIL=tester@invalid
fail() { echo "e2e-compact: FAIL: $*" >&2; exit 1; }
pass=0
ok() { pass=$((pass + 1)); echo "e2e-compact: ok: $*"; }
now() { date +%s.%N; }
took() { python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.2f}s')" "$1" "$(now)"; }
state="$work/state.git"
git_state() { git -C "$state" "$@"; }
window=(--now 2026-05-01 --retention-days 1)

# 1. The day1 repository, compacted.
cp -r "$corpus/spools" "$work/spools"
jobs=$(ls "$work/spools")
t=$(now)
(cd "$work" && "$bin" -q publish --repo state.git $(for j in $jobs; do echo "spools/$j"; done) >/dev/null)
echo "e2e-compact: published 24 spools in $(took "$t")"
before=$(git_state rev-parse refs/heads/main)
files_before=$(git_state ls-tree -r refs/heads/main | wc -l)
entries_before=$(git_state ls-tree -r -t refs/heads/main | wc -l)
t=$(now); "$bin" -q log --repo "$state" --json >"$work/log-before.jsonl"; log_before_time=$(took "$t")
t=$(now); "$bin" -q verify --repo "$state" || fail "verify before compaction"; verify_before_time=$(took "$t")
[ "$(wc -l <"$work/log-before.jsonl")" -eq 5091 ] || fail "log --json does not print 5,091 events"

t=$(now)
"$bin" compact --repo "$state" "${window[@]}" --json >"$work/compact.jsonl" || fail "compact failed"
compact_time=$(took "$t")
after=$(git_state rev-parse refs/heads/main)
[ "$after" != "$before" ] || fail "compact made no commit"
[ "$(git_state rev-parse "$after^")" = "$before" ] || fail "the compaction commit is not a child of the tip"
ok "compact folded March 2026 in one commit on top of the tip ($compact_time)"

python3 - "$state" "$before" "$after" <<'PY' || fail "the manifest does not reproduce every removed shard"
import hashlib, json, subprocess, sys
repo, before, after = sys.argv[1:]
def git(*args):
    return subprocess.run(["git", "-C", repo, *args], check=True, capture_output=True).stdout
removed = [l.split("\t", 1)[1] for l in git("diff", "--name-status", before, after).decode().splitlines() if l.startswith("D\t")]
added = [l.split("\t", 1)[1] for l in git("diff", "--name-status", before, after).decode().splitlines() if l.startswith("A\t")]
assert all(p.startswith("ledger/v1/events/") for p in removed), removed
assert len(removed) == 97, len(removed)
manifest_bytes = git("cat-file", "blob", f"{after}:ledger/v1/segments/2026/03/manifest.json")
manifest = json.loads(manifest_bytes)
assert manifest_bytes == (json.dumps(manifest, separators=(",", ":"), sort_keys=True) + "\n").encode(), "manifest is not canonical"
assert sorted(added) == sorted(["ledger/v1/segments/2026/03/manifest.json"] + [f"ledger/v1/segments/2026/03/{s['name']}" for s in manifest["segments"]]), added
segments = {}
for s in manifest["segments"]:
    data = git("cat-file", "blob", f"{after}:ledger/v1/segments/2026/03/{s['name']}")
    assert hashlib.sha256(data).hexdigest() == s["sha256"] and len(data) == s["bytes"], s["name"]
    lines = data.splitlines(keepends=True)
    assert len(lines) == s["lines"] and len(data) <= 8 * 1024 * 1024 and len(lines) <= 4096
    segments[s["name"]] = lines
entries = {e["path"]: e for e in manifest["shards"]}
assert sorted(entries) == sorted(removed)
for path in removed:
    e = entries[path]
    original = git("cat-file", "blob", f"{before}:{path}")
    cut = b"".join(segments[e["segment"]][e["first_line"] - 1 : e["first_line"] - 1 + e["lines"]])
    assert cut == original, path
    assert hashlib.sha256(original).hexdigest() == e["sha256"], path
    assert e["events"] == e["lines"] == original.count(b"\n"), path
print(f"e2e-compact: {len(removed)} shards reproduced byte for byte from {len(segments)} segments")
PY
ok "manifest.json reproduces every removed shard's exact bytes from the segment blobs"

t=$(now); "$bin" -q log --repo "$state" --json >"$work/log-after.jsonl"; log_after_time=$(took "$t")
cmp -s "$work/log-before.jsonl" "$work/log-after.jsonl" || fail "log --json differs after compaction"
"$bin" -q log --repo "$state" --rev "$before" --subject openclaw/openclaw --type review.item >"$work/h-before.txt"
"$bin" -q log --repo "$state" --subject openclaw/openclaw --type review.item >"$work/h-after.txt"
cmp -s "$work/h-before.txt" "$work/h-after.txt" && [ -s "$work/h-after.txt" ] || fail "filtered log differs"
ok "log --json prints the same 5,091 lines before and after (and a filtered readable log too)"
t=$(now); "$bin" -q verify --repo "$state" || fail "verify after compaction"; verify_after_time=$(took "$t")
"$bin" -q verify --repo "$state" --range "$before..$after" || fail "verify --range over the compaction"
ok "verify is clean after compaction, and the compaction verifies as a push"
"$bin" compact --repo "$state" "${window[@]}" 2>"$work/again.err" >/dev/null || fail "second compact failed"
[ "$(git_state rev-parse refs/heads/main)" = "$after" ] || fail "a second compact made a commit"
grep -q "nothing to compact" "$work/again.err" || fail "second compact did not say unchanged"
ok "a second compact creates no commit"
git_state fsck --strict >/dev/null 2>&1 || fail "git fsck --strict"
ok "git fsck --strict is clean"
files_after=$(git_state ls-tree -r refs/heads/main | wc -l)
entries_after=$(git_state ls-tree -r -t refs/heads/main | wc -l)
[ "$entries_after" -lt "$entries_before" ] || fail "the tree did not shrink"
segments=$(git_state ls-tree --name-only refs/heads/main ledger/v1/segments/2026/03/ | grep -c 'segment-')
ok "the tree shrank: $files_before -> $files_after files, $entries_before -> $entries_after entries with trees ($segments segments + manifest for 97 shards)"
echo "e2e-compact: timings (this binary): compact $compact_time; log --json $log_before_time before, $log_after_time after; verify $verify_before_time before, $verify_after_time after"

# 2. Late publications into the compacted month.
first=$(echo "$jobs" | sed -n 1p)
"$bin" -q publish --manifest --repo "$state" "$work/spools/$first" >"$work/replay.json"
[ "$(git_state rev-parse refs/heads/main)" = "$after" ] || fail "a late replay made a commit"
grep -q '"created":0' "$work/replay.json" || fail "a late replay created shards"
ok "a late replay of a compacted job is unchanged"
mkdir "$work/late"
echo '{"phase":"review.item","status":"started","component":"review-runner","identity":{"item":9},"subject":{"repository":"openclaw/openclaw","kind":"issue","number":9},"retryable":true,"mutation":false}' |
  env CLAWSWEEPER_ACTION_LEDGER_FORCE=1 GITHUB_REPOSITORY=openclaw/clawsweeper GITHUB_SHA=0123456789abcdef0123456789abcdef01234567 \
    GITHUB_WORKFLOW=late-review GITHUB_JOB=review GITHUB_RUN_ID=13559999999 GITHUB_RUN_ATTEMPT=1 \
    CLAWSWEEPER_ACTION_LEDGER_PARTITION_DATE=2026-03-20 CLAWSWEEPER_ACTION_LEDGER_INVOCATION=late \
    "$bin" -q record --spool "$work/late" >/dev/null
"$bin" -q seal "$work/late" >/dev/null
"$bin" -q publish --repo "$state" "$work/late" >/dev/null
hot=$(git_state rev-parse refs/heads/main)
[ "$(git_state ls-tree -r --name-only "$hot" ledger/v1/events | wc -l)" -eq 1 ] || fail "the late set is not hot"
"$bin" -q verify --repo "$state" || fail "verify with a late hot set"
"$bin" -q log --repo "$state" --json >"$work/log-hot.jsonl"
[ "$(wc -l <"$work/log-hot.jsonl")" -eq 5092 ] || fail "the late event is not in the log"
"$bin" -q compact --repo "$state" "${window[@]}" >/dev/null
late_fold=$(git_state rev-parse refs/heads/main)
[ "$late_fold" != "$hot" ] || fail "the late set was not folded"
[ -z "$(git_state ls-tree -r --name-only "$late_fold" ledger/v1/events)" ] || fail "hot shards remain"
git_state cat-file blob "$late_fold:ledger/v1/segments/2026/03/manifest.json" | grep -q '^{"generation":2,' || fail "manifest generation is not 2"
"$bin" -q log --repo "$state" --json | cmp -s - "$work/log-hot.jsonl" || fail "log differs after the late fold"
"$bin" -q verify --repo "$state" || fail "verify after the late fold"
"$bin" -q verify --repo "$state" --range "$hot..$late_fold" || fail "verify --range over the late fold"
ok "a late new set lands hot beside the segments; the next compaction folds it (generation 2), log unchanged"

# 3. Through the hook.
"$bin" -q hooks install --repo "$work/server.git"
git_state push -q "$work/server.git" "$before:refs/heads/main" 2>"$work/push.err" || fail "pushing the day1 history was refused: $(cat "$work/push.err")"
git clone -q "$state" "$work/clone"
cd "$work/clone"
git checkout -q "$after"
refused() { # name, pattern: push HEAD to the server, expect a refusal naming the pattern
  local name=$1 pattern=$2
  if git push -q "$work/server.git" HEAD:refs/heads/main 2>"$work/push.err"; then fail "$name was accepted"; fi
  grep -q -- "$pattern" "$work/push.err" || fail "$name: the pusher did not see '$pattern': $(cat "$work/push.err")"
  [ "$(git -C "$work/server.git" rev-parse main)" = "$before" ] || fail "$name moved the server ref"
  git reset -q --hard "$after"
  ok "$name is refused ($pattern)"
}
sed -i '0,/"schema_version":1/s//"schema_version":2/' ledger/v1/segments/2026/03/segment-0001.jsonl
git commit -q --amend -am "compaction with a tampered segment byte"
refused "a compaction with a tampered segment byte" "segment-digest-mismatch"
python3 - <<'PY'
import hashlib, json
p = "ledger/v1/segments/2026/03/manifest.json"
m = json.load(open(p))
m["shards"][0]["sha256"] = hashlib.sha256(b"forged").hexdigest()
open(p, "w").write(json.dumps(m, separators=(",", ":"), sort_keys=True) + "\n")
PY
git commit -q --amend -am "compaction with a forged manifest entry"
refused "a compaction with a forged manifest entry" "manifest-entry-mismatch"
git reset -q --hard "$before"
git rm -q "$(git ls-files 'ledger/v1/events/*' | sed -n 1p)"
git commit -q -m "delete a shard without a manifest"
refused "a shard deletion without a manifest" "deleted"
git push -q "$work/server.git" "$after:refs/heads/main" 2>"$work/push.err" || fail "the compaction was refused: $(cat "$work/push.err")"
git push -q "$work/server.git" "$late_fold:refs/heads/main" 2>"$work/push.err" || fail "the late publication and its fold were refused: $(cat "$work/push.err")"
"$bin" -q verify --repo "$work/server.git" || fail "the server does not verify clean"
git -C "$work/server.git" fsck --strict >/dev/null 2>&1 || fail "git fsck --strict on the server"
ok "the compaction, the late publication and its fold are accepted; the server verifies clean"
echo "e2e-compact: $pass passed, 0 failed"
