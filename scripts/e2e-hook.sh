#!/usr/bin/env bash
# End-to-end check of the server-side hook with the real `git push` over a local transport:
# a bare server repository with `action-ledger hooks install` accepts valid publications and
# refuses deletions, rewrites, non-fast-forward pushes and broken additions (including values the
# strict privacy profile refuses, and entries that are not plain files), printing the finding to the pusher and leaving the server ref
# unchanged after every refusal. The hook names no build path: it is installed from a copy of the
# binary in a stand-in build directory that is then removed, and it keeps working with the binary
# on PATH; with no binary (or an older one) every push is refused with what to install.
# Usage: scripts/e2e-hook.sh   (BIN=path/to/action-ledger to choose the binary)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
corpus="$here/testdata/corpus/day1"
bin=${BIN:-${CARGO_TARGET_DIR:-$here/target}/debug/action-ledger}
[ -x "$bin" ] || (cd "$here" && cargo build --quiet)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export SOURCE_DATE_EPOCH=1773100800
export GIT_AUTHOR_NAME=tester GIT_AUTHOR_EMAIL=tester@invalid GIT_COMMITTER_NAME=tester GIT_COMMITTER_EMAIL=tester@invalid
fail() { echo "e2e-hook: FAIL: $*" >&2; exit 1; }
pass=0
ok() { pass=$((pass + 1)); echo "e2e-hook: ok: $*"; }
jobs=($(ls "$corpus/shards"))

unset ACTION_LEDGER_BIN
# Install from a copy of the binary in a stand-in build directory, then remove that directory
# (what `cargo clean` does); the hook must not name it.
mkdir -p "$work/build" "$work/path-bin" "$work/tools"
cp "$bin" "$work/build/action-ledger"
"$work/build/action-ledger" -q hooks install --repo "$work/server.git"
[ -x "$work/server.git/hooks/pre-receive" ] || fail "hook not installed"
[ "$(git -C "$work/server.git" config receive.denyDeletes)" = false ] || fail "receive.denyDeletes not turned off (the hook refuses deletions itself)"
[ "$(git -C "$work/server.git" config receive.denyNonFastForwards)" = true ] || fail "receive.denyNonFastForwards not set"
! grep -q -e "$work/build" -e "$(dirname "$bin")" "$work/server.git/hooks/pre-receive" || fail "the hook names a build path"
rm -rf "$work/build"
ok "hooks install wrote an executable pre-receive hook naming no build path, and the receive.* settings"

# A PATH with git and cat but no action-ledger: the push is refused, saying what to install.
for tool in git cat; do ln -s "$(command -v "$tool")" "$work/tools/$tool"; done
"$bin" -q publish --repo "$work/local.git" "$corpus/shards/${jobs[0]}" >/dev/null
if PATH="$work/tools" git -C "$work/local.git" push -q "$work/server.git" main 2>"$work/push.err"; then
  fail "a push was accepted with no action-ledger binary to check it"
fi
grep -q "refusing the push: no action-ledger binary to check it with" "$work/push.err" || fail "no-binary refusal unclear: $(cat "$work/push.err")"
grep -q "install action-ledger .* or newer on this server" "$work/push.err" || fail "the refusal does not say what to install: $(cat "$work/push.err")"
git -C "$work/server.git" rev-parse -q --verify main >/dev/null && fail "the refused push created the server ref"
ok "with no action-ledger binary the push is refused, saying what to install"

# An older binary named by ACTION_LEDGER_BIN is refused too, and not skipped for the one on PATH.
cp "$bin" "$work/path-bin/action-ledger"
mkdir -p "$work/old"
printf '#!/bin/sh\n[ "$1" = --version ] && echo "action-ledger 0.0.0" && exit 0\nexit 0\n' > "$work/old/action-ledger"
chmod +x "$work/old/action-ledger"
if PATH="$work/path-bin:$PATH" ACTION_LEDGER_BIN="$work/old/action-ledger" git -C "$work/local.git" push -q "$work/server.git" main 2>"$work/push.err"; then
  fail "a push was accepted by a verifier older than the hook requires"
fi
grep -q "is action-ledger 0.0.0, older than" "$work/push.err" || fail "older-binary refusal unclear: $(cat "$work/push.err")"
git -C "$work/server.git" rev-parse -q --verify main >/dev/null && fail "the refused push created the server ref"
ok "an older binary is refused with the version it needs"

# From here on the binary is on PATH (a copy in a temp bin dir); pushes go through the hook.
export PATH="$work/path-bin:$PATH"
git -C "$work/local.git" push -q "$work/server.git" main 2>"$work/push.err" || fail "valid first push refused: $(cat "$work/push.err")"
"$bin" -q publish --repo "$work/local.git" "$corpus/shards/${jobs[1]}" >/dev/null
git -C "$work/local.git" push -q "$work/server.git" main 2>"$work/push.err" || fail "valid second push refused: $(cat "$work/push.err")"
ok "valid publications are accepted"
good=$(git -C "$work/server.git" rev-parse main)

git clone -q "$work/server.git" "$work/clone"
cd "$work/clone"
refused() { # name, pattern: push HEAD to main, expect refusal naming the pattern, server unchanged
  local name=$1 pattern=$2
  if git push -q origin HEAD:main 2>"$work/push.err"; then fail "$name was accepted"; fi
  grep -q -- "$pattern" "$work/push.err" || fail "$name: pusher did not see '$pattern': $(cat "$work/push.err")"
  [ "$(git -C "$work/server.git" rev-parse main)" = "$good" ] || fail "$name moved the server ref"
  git reset -q --hard "$good"
  ok "$name is refused ($pattern)"
}
shard=$(git ls-files 'ledger/v1/events/*' | sed -n 1p)
binding=$(git ls-files 'ledger/v1/import-bindings/events/*' | sed -n 1p)
completion=$(git ls-files 'ledger/v1/import-bindings/completed-shard-sets/*' | sed -n 1p)

git rm -q "$shard" && git commit -qm "delete a shard" && refused "deleting a shard" "deleted"
sed -i '1s/"retryable":/"retryable": /' "$shard" && git commit -qam "rewrite a shard" && refused "rewriting a shard" "modified"
git rm -q "$binding" && git commit -qm "delete a binding" && refused "deleting a binding" "deleted"

# Broken additions: a new set published locally, then damaged before the push.
add_job() { # publish job $1 into a scratch copy and copy its new files into the clone
  rm -rf "$work/scratch.git"
  git clone -q --bare "$work/server.git" "$work/scratch.git"
  "$bin" -q publish --repo "$work/scratch.git" "$corpus/shards/$1" >/dev/null
  git fetch -q "$work/scratch.git" main && git reset -q --hard FETCH_HEAD
}
add_job "${jobs[2]}"
newshard=$(git diff --name-only "$good" HEAD -- 'ledger/v1/events/*' | sed -n 1p)
sed -i '1s/"retryable":/"retryable": /' "$newshard" && git commit -qam "non-canonical new shard" && refused "a non-canonical new shard" "shard-invalid"
add_job "${jobs[2]}"
newcompletion=$(git diff --name-only "$good" HEAD -- 'ledger/v1/import-bindings/completed-shard-sets/*' | sed -n 1p)
git rm -q "$newcompletion" && git commit -qm "no completion" && refused "a set without completion marker" "completion-missing"
add_job "${jobs[2]}"
newbinding=$(git diff --name-only "$good" HEAD -- 'ledger/v1/import-bindings/events/*' | sed -n 1p)
git rm -q "$newbinding" && git commit -qm "no event binding" && refused "a set missing an event binding" "event-binding-missing"
git reset -q --hard "$good"
echo "hello" > ledger/v1/notes.txt && git add ledger/v1/notes.txt && git commit -qm "unknown file" && refused "an unknown file under ledger/v1" "unknown-path"
fake=$(printf 'f%.0s' $(seq 64))
mkdir -p ledger/v1/import-bindings/events/ff/ff   # the fanout layout (the default)
printf '{"event_id":"%s","parent_event_id":null,"schema":"clawsweeper.action-ledger-import-event","schema_version":1,"semantic_sha256":"%s"}\n' "$fake" "$fake" > "ledger/v1/import-bindings/events/ff/ff/$fake.json"
git add -A && git commit -qm "orphan binding" && refused "an orphan event binding" "event-binding-orphan"
git reset -q --hard "$good"
printf '{}\n' > "ledger/v1/import-bindings/events/$fake.json"
git add -A && git commit -qm "reference-layout binding" && refused "a binding at a reference-layout path in a fanout repository" "layout-mixed"

# Entries that are not plain 100644 files, committed with plumbing (a clone would check them out
# as a link, an executable or an empty submodule directory): refused as entry-mode, with the mode.
add_job "${jobs[2]}"
newshard=$(git diff --name-only "$good" HEAD -- 'ledger/v1/events/*' | sed -n 1p)
git update-index --cacheinfo "120000,$(git hash-object -w "$newshard"),$newshard"
git commit -q --amend -m "a new shard as a symbolic link" && refused "a new shard committed as a symbolic link (120000)" "entry-mode: a symbolic link (mode 120000)"
add_job "${jobs[2]}"
newbinding=$(git diff --name-only "$good" HEAD -- 'ledger/v1/import-bindings/events/*' | sed -n 1p)
git update-index --chmod=+x "$newbinding"
git commit -q --amend -m "a new binding as an executable" && refused "a new event binding committed executable (100755)" "entry-mode: an executable file (mode 100755)"
git update-index --add --cacheinfo "160000,$good,ledger/v1/events/2026/vendored"
git commit -q -m "a submodule" && refused "a submodule under ledger/v1 (160000)" "entry-mode: a submodule (commit link) (mode 160000)"
git update-index --add --cacheinfo "120000,$(printf '../../ledger' | git hash-object -w --stdin),finality/v1/actions"
git commit -q -m "a link at a directory position" && refused "a symbolic link where finality/v1/actions belongs" "entry-mode: a symbolic link (mode 120000)"

# A set the reference accepts but the strict profile refuses (a synthetic Slack webhook URL),
# published locally with --privacy reference: the hook checks additions under strict.
leaky="$work/leaky"
mkdir -p "$leaky"
CLAWSWEEPER_ACTION_LEDGER_FORCE=1 CLAWSWEEPER_ACTION_LEDGER_PARTITION_DATE=2026-03-10 \
  GITHUB_REPOSITORY=openclaw/clawsweeper GITHUB_WORKFLOW=notify GITHUB_JOB=notify \
  GITHUB_SHA=0123456789abcdef0123456789abcdef01234567 GITHUB_RUN_ID=99 GITHUB_RUN_ATTEMPT=1 \
  "$bin" -q record --privacy reference --spool "$leaky" >/dev/null <<'JSON'
{"phase":"notification.delivery","status":"sent","component":"notifier","identity":{"n":1},
 "subject":{"repository":"openclaw/openclaw","kind":"notification",
 "subjectId":"https://hooks.slack.com/services/T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX"},
 "retryable":false,"mutation":false}
JSON
"$bin" -q seal --privacy reference "$leaky" >/dev/null
git reset -q --hard "$good"
rm -rf "$work/scratch.git"
git clone -q --bare "$work/server.git" "$work/scratch.git"
"$bin" -q publish --repo "$work/scratch.git" "$leaky" 2>"$work/publish.err" && fail "publish accepted a strict-privacy value"
grep -q "slack-webhook (gitleaks:slack-webhook-url)" "$work/publish.err" || fail "publish refusal lacks the family: $(cat "$work/publish.err")"
"$bin" -q publish --privacy reference --repo "$work/scratch.git" "$leaky" >/dev/null
git fetch -q "$work/scratch.git" main && git reset -q --hard FETCH_HEAD
refused "a set with a value the strict profile refuses" "privacy-strict"

# History rewrites and deletions of the ledger ref.
git reset -q --hard "$good~1"
git commit -q --allow-empty -m "divergent"
if git push -q -f origin HEAD:main 2>"$work/push.err"; then fail "non-fast-forward push accepted"; fi
[ "$(git -C "$work/server.git" rev-parse main)" = "$good" ] || fail "non-fast-forward push moved the ref"
ok "a non-fast-forward push is refused"
if git push -q origin :main 2>"$work/push.err"; then fail "ref deletion accepted"; fi
[ "$(git -C "$work/server.git" rev-parse main)" = "$good" ] || fail "ref deletion changed the ref"
ok "deleting the ledger ref is refused"

# A later valid publication is still accepted, and the server verifies clean.
git -C "$work/local.git" fetch -q "$work/server.git" main
"$bin" -q publish --repo "$work/local.git" "$corpus/shards/${jobs[3]}" >/dev/null
git -C "$work/local.git" push -q "$work/server.git" main 2>"$work/push.err" || fail "valid later push refused: $(cat "$work/push.err")"
"$bin" -q verify --repo "$work/server.git" || fail "server does not verify clean"
git -C "$work/server.git" fsck --strict >/dev/null 2>&1 || fail "git fsck --strict on the server"
ok "a later valid publication is accepted; the server verifies clean and passes fsck --strict"

# Pending publications (refs/ledger/incoming/<key>) and refusal marks through the real hook.
# key: sha256 of "<path>\t<blob>\n" for every file the commit adds over its parent, by path.
key_of() { git -C "$1" diff-tree -r --no-commit-id --diff-filter=A "$2^" "$2" |
  awk -F'\t' '{ split($1, m, " "); print $2 "\t" m[4] }' | LC_ALL=C sort | sha256sum | cut -c1-64; }
tip=$(git -C "$work/server.git" rev-parse main)
rm -rf "$work/scratch.git"
git clone -q --bare "$work/server.git" "$work/scratch.git"
"$bin" -q publish --repo "$work/scratch.git" "$corpus/shards/${jobs[4]}" >/dev/null
pub=$(git -C "$work/scratch.git" rev-parse main)
key=$(key_of "$work/scratch.git" "$pub")
push_ref() { git -C "$work/scratch.git" push -q "$work/server.git" "$1" 2>"$work/push.err"; }
if push_ref "$pub:refs/ledger/incoming/$(printf '%064d' 0)"; then fail "a pending publication under another key was accepted"; fi
grep -q "is not the key of what it adds" "$work/push.err" || fail "misnamed pending publication: $(cat "$work/push.err")"
if push_ref "$pub:refs/ledger/other"; then fail "a ref elsewhere under refs/ledger/ was accepted"; fi
ok "a pending publication under another name, and another ref under refs/ledger/, are refused"
push_ref "$pub:refs/ledger/incoming/$key" || fail "an honest pending publication was refused: $(cat "$work/push.err")"
if push_ref ":refs/ledger/incoming/$key"; then fail "a pending publication was deleted before it landed"; fi
grep -q "deleted only once a ledger ref holds every file it adds" "$work/push.err" || fail "deletion refusal unclear: $(cat "$work/push.err")"
if push_ref "$tip:refs/ledger/refused/$key"; then fail "a refusal mark was accepted without its publication's deletion"; fi
[ "$(git -C "$work/server.git" rev-parse main)" = "$tip" ] || fail "a refused push moved the ledger"
ok "an honest pending publication is accepted; deleting it unlanded, or a stray refusal mark, is refused"
"$bin" -q maintain --remote "$work/server.git" --repo "$work/maint.git" --json >"$work/maint.json" || fail "maintain --remote failed"
grep -q '"landed":1' "$work/maint.json" && grep -q '"left":0' "$work/maint.json" || fail "maintain --remote: $(cat "$work/maint.json")"
[ -z "$(git -C "$work/server.git" for-each-ref refs/ledger/)" ] || fail "maintain --remote left refs under refs/ledger/"
[ "$(git -C "$work/server.git" rev-parse main^)" = "$tip" ] || fail "maintain --remote did not land one commit on the tip"
"$bin" -q verify --repo "$work/server.git" || fail "server does not verify clean after maintain --remote"
ok "maintain --remote lands a pending publication through the hook with one commit, and deletes its ref"

# Jobs publishing at once through the hook, each with its own cache: all land, nothing is left
# pending, every event once.
for i in 5 6 7 8 9 10; do
  "$bin" -q publish --remote "$work/server.git" --repo "$work/job-$i.git" --wait 120 "$corpus/shards/${jobs[$i]}" >"$work/job-$i.out" 2>&1 &
done
wait_all=0
for j in $(jobs -p); do wait "$j" || wait_all=1; done
[ "$wait_all" = 0 ] || fail "a concurrent publish failed: $(cat "$work"/job-*.out)"
[ -z "$(git -C "$work/server.git" for-each-ref refs/ledger/refused/)" ] || fail "a concurrent publication was refused"
"$bin" -q maintain --remote "$work/server.git" --repo "$work/maint.git" >/dev/null || fail "maintain --remote after the burst"
[ -z "$(git -C "$work/server.git" for-each-ref refs/ledger/)" ] || fail "pending publications left after the burst"
"$bin" -q verify --repo "$work/server.git" || fail "server does not verify clean after the burst"
git -C "$work/server.git" fsck --strict >/dev/null 2>&1 || fail "git fsck --strict after the burst"
ok "six jobs publishing at once through the hook all land; the server verifies clean"
echo "e2e-hook: $pass passed, 0 failed"
