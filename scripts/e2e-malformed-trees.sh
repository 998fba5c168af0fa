#!/usr/bin/env bash
# Trees that are not well-formed, planted with plumbing as any tool can (`git hash-object -t tree
# --literally`): a name twice, a name both file and directory, entries out of git's order, a
# non-regular entry, a zero-padded mode, and the names `.git` and `..`, at the paths that publish, compaction and the finality operations edit and
# at other depths. For each:
#   - the writer (publish, compact, action create) refuses with exit 2, names the tree and points
#     at verify and git fsck, and leaves the ref unchanged;
#   - `verify` of the planted tip and `verify --range` of the planting commit report the rule
#     (tree-duplicate-entry, tree-file-directory-conflict, tree-unsorted, entry-mode,
#     tree-not-canonical, tree-bad-name);
#   - the pre-receive hook refuses the push, also on a server without receive.fsckObjects.
# Usage: scripts/e2e-malformed-trees.sh   (BIN=path/to/action-ledger to choose the binary)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
corpus="$here/testdata/corpus/day1"
bin=${BIN:-${CARGO_TARGET_DIR:-$here/target}/debug/action-ledger}
# The hook finds its binary through this (it names no build path).
export ACTION_LEDGER_BIN="$bin"
[ -x "$bin" ] || (cd "$here" && cargo build --quiet)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export SOURCE_DATE_EPOCH=1773100800 ACTION_LEDGER_AGENT_ID=e2e-agent ACTION_LEDGER_PRINCIPAL=e2e-principal
export GIT_AUTHOR_NAME=tester GIT_AUTHOR_EMAIL=tester@invalid GIT_COMMITTER_NAME=tester GIT_COMMITTER_EMAIL=tester@invalid
unset ACTION_LEDGER_NOW
fail() { echo "e2e-malformed-trees: FAIL: $*" >&2; exit 1; }
pass=0
ok() { pass=$((pass + 1)); echo "e2e-malformed-trees: ok: $*"; }
jobs=($(ls "$corpus/shards"))

# plant.py REPO COMMIT DIR KIND: prints a commit on COMMIT whose tree at DIR has the defect KIND.
cat >"$work/plant.py" <<'PY'
import subprocess, sys
repo, base, target, kind = sys.argv[1:5]
def git(*args, data=None):
    return subprocess.run(["git", "-C", repo, *args], input=data, capture_output=True, check=True).stdout
def entries(tree):
    raw, out, i = git("cat-file", "tree", tree), [], 0
    while i < len(raw):
        sp = raw.index(b" ", i); nul = raw.index(b"\0", sp)
        out.append([raw[i:sp], raw[sp + 1:nul], raw[nul + 1:nul + 21]])
        i = nul + 21
    return out
def write(es):
    raw = b"".join(m + b" " + n + b"\0" + o for m, n, o in es)
    return git("hash-object", "-t", "tree", "--literally", "-w", "--stdin", data=raw).strip().decode()
blob = bytes.fromhex(git("hash-object", "-w", "--stdin", data=b"x\n").strip().decode())
chain = [git("rev-parse", base + "^{tree}").strip().decode()]
names = [n for n in target.split("/") if n]
for name in names:
    e = next(e for e in entries(chain[-1]) if e[1] == name.encode())
    chain.append(e[2].hex())
leaf = entries(chain.pop())
subtree = next((e for e in leaf if e[0] == b"40000"), None)
if kind == "duplicate":
    leaf.insert(1, list(leaf[0]))
elif kind == "file-directory":
    assert subtree, "needs a subtree"
    leaf.append([b"100644", subtree[1], blob]); leaf.sort(key=lambda e: e[1] + (b"/" if e[0] == b"40000" else b""))
elif kind == "unsorted":
    leaf.append([b"100644", b"zz-extra", blob]); leaf.reverse()
elif kind == "symlink":
    leaf.append([b"120000", b"zz-link", blob])
elif kind == "zero-padded":
    assert subtree, "needs a subtree"
    subtree[0] = b"040000"
elif kind in ("dotgit", "dotdot"):
    leaf.insert(0, [b"40000", b".git" if kind == "dotgit" else b"..", bytes.fromhex(chain[-1] if chain else git("rev-parse", base + "^{tree}").strip().decode())])
else:
    raise SystemExit("unknown kind " + kind)
tid = write(leaf)
for name in reversed(names):
    parent = entries(chain.pop())
    for e in parent:
        if e[1] == name.encode(): e[2] = bytes.fromhex(tid)
    tid = write(parent)
print(git("commit-tree", tid, "-p", base, "-m", "plant " + kind + " at " + (target or "the root")).strip().decode())
PY
plant() { python3 "$work/plant.py" "$@"; }

# A ledger with events, a governed action and a finality tree; then a server without
# receive.fsckObjects, so that only the hook stands between a malformed push and the ref.
repo="$work/state.git"
"$bin" -q publish --repo "$repo" "$corpus/shards/${jobs[0]}" "$corpus/shards/${jobs[1]}" >/dev/null
"$bin" -q action create --repo "$repo" --id act_e2e_1 --guard-decision gd_e2e_1 -- true >/dev/null
good=$(git -C "$repo" rev-parse main)
"$bin" -q hooks install --repo "$work/server.git"
git -C "$work/server.git" config receive.fsckObjects false
git -C "$repo" push -q "$work/server.git" main 2>"$work/push.err" || fail "valid push refused: $(cat "$work/push.err")"

day=$(git -C "$repo" ls-tree -r --name-only main -- ledger/v1/events | sed -n 1p | cut -d/ -f1-6)
month=$(echo "$day" | cut -d/ -f1-5)
# The directory of act_e2e_1, in whatever layout the repository has.
action_dir=$(git -C "$repo" ls-tree -r --name-only main -- finality/v1/actions | grep '/act_e2e_1/action\.json$' | sed 's|/action\.json$||')
[ -n "$action_dir" ] || fail "no action directory of act_e2e_1"
rule_of() { case $1 in duplicate) echo tree-duplicate-entry ;; file-directory) echo tree-file-directory-conflict ;;
  unsorted) echo tree-unsorted ;; symlink) echo entry-mode ;; zero-padded) echo tree-not-canonical ;;
  dotgit|dotdot) echo tree-bad-name ;; esac; }

# expect_refused NAME KIND PLACE COMMAND...: plant KIND at PLACE as the tip, run COMMAND (a writer
# whose edits pass through PLACE); it exits 2 naming the tree, and the ref stays.
expect_refused() {
  local name=$1 kind=$2 place=$3
  shift 3
  local planted
  planted=$(plant "$repo" "$good" "$place" "$kind")
  git -C "$repo" update-ref refs/heads/main "$planted" "$good"
  set +e
  "$@" >"$work/out" 2>"$work/err"
  local rc=$?
  set -e
  [ "$rc" -eq 2 ] || fail "$name on a $kind tree at $place: exit $rc, not 2: $(cat "$work/err")"
  grep -q "the tree at ${place:-the root} is malformed" "$work/err" || fail "$name: message does not name the tree: $(cat "$work/err")"
  grep -q "git fsck" "$work/err" || fail "$name: message does not point at git fsck: $(cat "$work/err")"
  [ "$(git -C "$repo" rev-parse main)" = "$planted" ] || fail "$name moved the ref"
  # verify of the planted tip and of the push range report the rule.
  local rule
  rule=$(rule_of "$kind")
  "$bin" verify --repo "$repo" >"$work/v.out" 2>&1 && fail "verify of a $kind tree at $place is clean"
  grep -q "$rule" "$work/v.out" || fail "verify does not report $rule for $place: $(cat "$work/v.out")"
  "$bin" verify --repo "$repo" --range "$good..$planted" >"$work/v.out" 2>&1 && fail "verify --range of a $kind tree at $place is clean"
  grep -q "$rule" "$work/v.out" || fail "verify --range does not report $rule for $place: $(cat "$work/v.out")"
  git -C "$repo" update-ref refs/heads/main "$good" "$planted"
  ok "$name refuses a tree with a $kind defect at ${place:-the root}; verify and verify --range report $rule"
}

publish_new() { "$bin" -q publish --repo "$repo" "$corpus/shards/${jobs[2]}"; }
create_new() { "$bin" -q action create --repo "$repo" --id act_e2e_2 --guard-decision gd_e2e_2 -- true; }
compact_all() { "$bin" -q compact --repo "$repo" --now 2026-05-01 --retention-days 1; }
for kind in duplicate file-directory unsorted symlink zero-padded dotgit dotdot; do
  expect_refused "publish" "$kind" "$month" publish_new
  expect_refused "publish" "$kind" "ledger/v1/import-bindings" publish_new
  expect_refused "compact" "$kind" "$month" compact_all
  expect_refused "action create" "$kind" "finality/v1/actions" create_new
done
expect_refused "publish" duplicate "$day" publish_new
expect_refused "publish" unsorted "" publish_new
expect_refused "action claim" unsorted "$action_dir" "$bin" -q action claim --repo "$repo" act_e2e_1 --attempt e2e-attempt-000000001 -- true

# The hook refuses each kind, although the server does not fsck pushed objects.
for kind in duplicate file-directory unsorted symlink zero-padded dotgit dotdot; do
  planted=$(plant "$repo" "$good" "$month" "$kind")
  git -C "$repo" update-ref refs/heads/main "$planted" "$good"
  if git -C "$repo" push -q "$work/server.git" main 2>"$work/push.err"; then fail "the hook accepted a $kind tree"; fi
  grep -q "$(rule_of "$kind")" "$work/push.err" || fail "the pusher did not see $(rule_of "$kind"): $(cat "$work/push.err")"
  [ "$(git -C "$work/server.git" rev-parse main)" = "$good" ] || fail "a refused push moved the server ref"
  git -C "$repo" update-ref refs/heads/main "$good" "$planted"
  ok "the hook refuses a push with a $kind defect in the tree at $month ($(rule_of "$kind"))"
done

"$bin" -q publish --repo "$repo" "$corpus/shards/${jobs[2]}" >/dev/null || fail "publish on the repaired tip"
"$bin" -q verify --repo "$repo" || fail "verify after the repair"
# The planted objects stay in the repository, unreachable; a clone holds only what the ref reaches.
git clone -q --bare --no-local "$repo" "$work/fresh.git"
git -C "$work/fresh.git" fsck --strict >/dev/null 2>&1 || fail "fsck of a fresh clone after the repair"
ok "after the tip is repaired, publish works; verify and fsck of a fresh clone are clean"
echo "e2e-malformed-trees: $pass passed, 0 failed"
