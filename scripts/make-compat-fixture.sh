#!/usr/bin/env bash
# Writes a backward-compatibility fixture: a state repository made by this build, frozen as a
# `git fast-import` stream, with what this build reads from it. Every later version must import
# the stream, `verify` it clean and print the same `log --json` and `action show --json` bytes
# (src/tests/compat.rs checks each fixture under testdata/compat/). Run it once per release
# whose formats changed, into a new directory; never regenerate a fixture that is checked in.
#
# The repository holds, in the layouts this build writes by default:
# - four jobs of the day1 corpus, three of them compacted into monthly segments and one
#   published after the compaction (hot shards beside segments of the same month);
# - governed actions written by the CLI: completed, failed, closed as cancelled, swept to
#   lost_confirmation, pending approval, and one claimed with its outcome still pending;
# - guard decisions and their actions written by `serve` (`POST /api/guard?record=true`).
#
# Files written into OUT_DIR:
#   repo.fi          the stream (`git fast-export --all --reencode=no`)
#   refs.txt         `git for-each-ref` of the repository: the import must give the same ids
#   log.jsonl        `log --json`
#   actions.jsonl    `action show --json` of every action, in id order, at 2026-03-11T00:00:00Z
#   README.md        what made it
# usage: scripts/make-compat-fixture.sh OUT_DIR
#   (BIN=path/to/action-ledger, BUILT_FROM=the commit it was built from; default: this checkout)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
out=${1:?usage: scripts/make-compat-fixture.sh OUT_DIR}
bin=${BIN:-${CARGO_TARGET_DIR:-$here/target}/release/action-ledger}
[ -x "$bin" ] || (cd "$here" && cargo build --release --quiet)
[ ! -e "$out" ] || { echo "make-compat-fixture: $out exists; a fixture is never regenerated" >&2; exit 2; }
work=$(mktemp -d)
server_pid=
cleanup() {
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
for v in $(env | sed -n 's/^\(CLAWSWEEPER_[A-Z_]*\|ACTION_LEDGER_[A-Z_]*\)=.*/\1/p'); do unset "$v"; done
export SOURCE_DATE_EPOCH=1773100800 # 2026-03-10T00:00:00Z
export ACTION_LEDGER_AGENT_ID=fixture-agent ACTION_LEDGER_PRINCIPAL=fixture-principal
repo="$work/state.git"
# The clock of `action show` (its elapsed_ms of a pending outcome), pinned for the readers too.
SHOW_AT=2026-03-11T00:00:00Z
al() { "$bin" -q "$@"; }

# The ledger: four day1 jobs, three compacted, one published after.
cp -r "$here/testdata/corpus/day1/spools" "$work/spools"
# The four smallest jobs, of three kinds of workflow and two repositories.
jobs=(008-openclaw-clawsweeper-repair-worker-r13550308979-a1 010-openclaw-clawsweeper-repair-worker-r13550308979-a2
  017-openclaw-clawsweeper-review-r13550726447-a1 002-openclaw-openclaw-route-command-r13550108354-a1)
al publish --repo "$repo" $(for j in "${jobs[@]:0:3}"; do echo "$work/spools/$j"; done) >/dev/null
al compact --repo "$repo" --now 2026-05-01 --retention-days 1 >/dev/null
al publish --repo "$repo" "$work/spools/${jobs[3]}" >/dev/null

# Governed actions by the CLI.
at() { ACTION_LEDGER_NOW=$1 "$bin" -q "${@:2}"; }
create() { at "$2" action create --repo "$repo" --id "$1" --guard-decision "gd_${1#act_}" "${@:3}" -- ./deploy.sh "$1" >/dev/null; }
# claim ID NOW: claims with the attempt id attempt-<ID without act_>.
claim() { at "$2" action claim --repo "$repo" "$1" --attempt "attempt-${1#act_}" -- ./deploy.sh "$1" >/dev/null; echo "attempt-${1#act_}"; }
create act_fixture_completed 2026-03-10T01:00:00Z
a=$(claim act_fixture_completed 2026-03-10T01:00:01Z)
at 2026-03-10T01:00:05Z action outcome --repo "$repo" --attempt "$a" act_fixture_completed completed >/dev/null
create act_fixture_failed 2026-03-10T01:01:00Z
a=$(claim act_fixture_failed 2026-03-10T01:01:01Z)
at 2026-03-10T01:01:09Z action outcome --repo "$repo" --attempt "$a" --error "exit 3" act_fixture_failed failed >/dev/null
create act_fixture_cancelled 2026-03-10T01:02:00Z
at 2026-03-10T01:02:30Z action close --repo "$repo" act_fixture_cancelled cancelled >/dev/null
create act_fixture_lost 2026-03-10T01:03:00Z
claim act_fixture_lost 2026-03-10T01:03:01Z >/dev/null
at 2026-03-10T01:30:00Z sweep --repo "$repo" --timeout-minutes 20 >/dev/null
create act_fixture_approval 2026-03-10T01:31:00Z --verdict require_approval
create act_fixture_pending 2026-03-10T01:32:00Z
claim act_fixture_pending 2026-03-10T01:32:01Z >/dev/null

# Guard decisions by serve.
key=fixture-key-0123456789abcdef
printf 'fixture %s\n' "$(printf %s "$key" | sha256sum | cut -d' ' -f1)" >"$work/keys"
ACTION_LEDGER_NOW=2026-03-10T02:00:00Z "$bin" serve --repo "$repo" --listen 127.0.0.1:0 \
  --api-keys "$work/keys" --sweep-every 0 --json >"$work/serve.out" 2>"$work/serve.err" &
server_pid=$!
for _ in $(seq 200); do grep -q listening "$work/serve.out" 2>/dev/null && break; sleep 0.05; done
url=$(sed -n 's/.*"url":"\([^"]*\)".*/\1/p' "$work/serve.out")
[ -n "$url" ] || { echo "make-compat-fixture: serve did not start: $(cat "$work/serve.err")" >&2; exit 2; }
for n in 1 2; do
  curl -sf -X POST "$url/api/guard?record=true" -H "x-api-key: $key" -H 'content-type: application/json' \
    -d "{\"action_type\":\"deploy\",\"declared_goal\":\"fixture $n\",\"agent_id\":\"fixture-agent\",\"act\":{\"kind\":\"shell\",\"command\":\"./deploy.sh guard-$n\"},\"client_capabilities\":[\"execution_claims\"],\"idempotency_key\":\"fixture-guard-$n\"}" >/dev/null
done
kill -TERM "$server_pid"; wait "$server_pid" || true; server_pid=

al verify --repo "$repo"
git -C "$repo" fsck --strict >/dev/null 2>&1
mkdir -p "$out"
git -C "$repo" fast-export --all --reencode=no --signed-tags=verbatim >"$out/repo.fi"
git -C "$repo" for-each-ref --format='%(objectname) %(refname)' >"$out/refs.txt"
al log --repo "$repo" --json >"$out/log.jsonl"
git -C "$repo" ls-tree -r --name-only refs/heads/main finality/v1/actions \
  | sed -n 's|.*/\([^/]*\)/action\.json$|\1|p' | sort | while read -r id; do
  ACTION_LEDGER_NOW=$SHOW_AT "$bin" -q action show --repo "$repo" --json "$id"
done >"$out/actions.jsonl"
cat >"$out/README.md" <<EOF
# Compatibility fixture: action-ledger $("$bin" --version | cut -d' ' -f2)

Written by \`scripts/make-compat-fixture.sh\` with the build of commit
${BUILT_FROM:-$(git -C "$here" rev-parse --short=12 HEAD)} on $(date -u +%Y-%m-%d). Every later version must import
\`repo.fi\` to the ids of \`refs.txt\`, verify it clean, and print \`log.jsonl\` and
\`actions.jsonl\` byte for byte (\`src/tests/compat.rs\`). Never regenerate it: a format change
that breaks it is a breaking change.

- $(wc -l <"$out/log.jsonl") events: four day1 jobs, three folded into segments, one hot after them.
- $(wc -l <"$out/actions.jsonl") governed actions: by the CLI (completed, failed, cancelled,
  lost_confirmation, pending approval, claimed with the outcome pending) and by \`serve\`'s guard.
EOF
echo "make-compat-fixture: wrote $out ($(du -sh "$out" | cut -f1))"
