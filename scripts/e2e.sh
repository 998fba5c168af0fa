#!/usr/bin/env bash
# End-to-end check of the main job against the built binary and real git:
#   seal --output reproduces the reference shards of every day1 job byte for byte;
#   publishing every spool (and, separately, every shard root) in name order gives a tree equal to
#   expected-state/, manifests equal to expected-import-results.json, one commit per job, and a
#   repository that passes `git fsck --strict`; a replay adds nothing; refusals leave the ref alone;
#   a job that recorded nothing seals and publishes nothing; a failed first publication leaves no
#   repository;
#   the fanout layout differs from expected-state/ only by binding paths and the layout record,
#   and writes each publication as one pack.
#   Everything runs under the default (strict) privacy profile, which gives the same bytes as
#   `--privacy reference` on this corpus.
# Usage: scripts/e2e.sh            (uses target/debug/action-ledger, building it when missing)
#        BIN=path/to/action-ledger scripts/e2e.sh
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
corpus="$here/testdata/corpus/day1"
bin=${BIN:-${CARGO_TARGET_DIR:-$here/target}/debug/action-ledger}
[ -x "$bin" ] || (cd "$here" && cargo build --quiet)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export SOURCE_DATE_EPOCH=1773100800 # 2026-03-10T00:00:00Z: reproducible commits
fail() { echo "e2e: FAIL: $*" >&2; exit 1; }
pass=0
ok() { pass=$((pass + 1)); echo "e2e: ok: $*"; }

cp -r "$corpus/spools" "$work/spools"
jobs=$(ls "$work/spools")
[ "$(echo "$jobs" | wc -l)" -eq 24 ] || fail "expected 24 jobs"

# 1. seal --output reproduces the reference finalize output; the reference seals are reproduced.
for job in $jobs; do
  "$bin" -q seal --output "$work/out/$job" "$work/spools/$job" >/dev/null
  diff -r "$work/out/$job" "$corpus/shards/$job" >/dev/null || fail "seal --output differs for $job"
done
# Sealing takes the producer locks (the reference's producer locks), which leaves an empty _locks/ directory as the
# reference does; git cannot hold empty directories, so the corpus has none. No lock file remains.
diff -r -x _locks "$work/spools" "$corpus/spools" >/dev/null || fail "sealing changed a sealed spool"
[ -z "$(find "$work/spools" -path '*/_locks/*')" ] || fail "a lock file remained after sealing"
ok "seal --output reproduces shards/<job> for all 24 jobs"

# 2. Publish all spools in name order into a new repository (the reference layout).
(cd "$work" && "$bin" -q publish --manifest --layout reference --repo state.git $(for j in $jobs; do echo "spools/$j"; done) >manifests.jsonl)
python3 - "$corpus/expected-import-results.json" "$work/manifests.jsonl" <<'PY' || fail "manifests differ from expected-import-results.json"
import json, sys
expected = [e["result"] for e in json.load(open(sys.argv[1]))]
got = [json.loads(line) for line in open(sys.argv[2])]
assert len(got) == len(expected) == 24, (len(got), len(expected))
for i, (g, e) in enumerate(zip(got, expected)):
    assert list(g) == list(e), f"key order differs at import {i}"
    assert g == e, f"manifest {i} differs"
PY
ok "24 manifests equal expected-import-results.json"
git -C "$work/state.git" fsck --strict >/dev/null 2>&1 || fail "git fsck --strict"
ok "git fsck --strict is clean"
[ "$(git -C "$work/state.git" rev-list --count refs/heads/main)" -eq 24 ] || fail "expected one commit per job"
ok "one commit per job"
git clone -q "$work/state.git" "$work/clone"
diff -r -x .git "$work/clone" "$corpus/expected-state" >/dev/null || fail "tree differs from expected-state/"
ok "tree at refs/heads/main is byte-identical to expected-state/"
"$bin" -q verify --repo "$work/state.git" || fail "verify reports findings on the day1 repository"
ok "verify reports the day1 repository clean"

# 3. Replay: nothing changes.
tip=$(git -C "$work/state.git" rev-parse refs/heads/main)
(cd "$work" && "$bin" -q publish --manifest --repo state.git $(for j in $jobs; do echo "spools/$j"; done) >replay.jsonl)
[ "$(git -C "$work/state.git" rev-parse refs/heads/main)" = "$tip" ] || fail "replay moved the ref"
python3 - "$work/replay.jsonl" <<'PY' || fail "replay manifests are not all unchanged"
import json, sys
got = [json.loads(line) for line in open(sys.argv[1])]
assert len(got) == 24 and all(g["created"] == 0 and g["unchanged"] > 0 for g in got)
PY
ok "replaying all 24 spools adds no commit and reports every shard unchanged"

# 4. Shard roots as sources give the same tree and manifests; so does the reference's privacy
#    profile (everything above ran under the default, strict).
(cd "$work" && "$bin" -q publish --manifest --layout reference --repo shards.git $(for j in $jobs; do echo "$corpus/shards/$j"; done) >shard-manifests.jsonl)
cmp -s "$work/shard-manifests.jsonl" "$work/manifests.jsonl" || fail "shard-root manifests differ"
[ "$(git -C "$work/shards.git" rev-parse 'refs/heads/main^{tree}')" = "$(git -C "$work/state.git" rev-parse 'refs/heads/main^{tree}')" ] || fail "shard-root tree differs"
ok "publishing shards/<job> gives the same manifests and tree"
(cd "$work" && "$bin" -q publish --manifest --privacy reference --layout reference --repo reference.git $(for j in $jobs; do echo "$corpus/shards/$j"; done) >reference-manifests.jsonl)
cmp -s "$work/reference-manifests.jsonl" "$work/manifests.jsonl" || fail "--privacy reference manifests differ"
[ "$(git -C "$work/reference.git" rev-parse 'refs/heads/main^{tree}')" = "$(git -C "$work/state.git" rev-parse 'refs/heads/main^{tree}')" ] || fail "--privacy reference tree differs"
ok "the day1 corpus publishes the same under the strict (default) and reference privacy profiles"

# 5. Refusals leave the ref unchanged.
expect_refusal() { # code, pattern, args...
  local code=$1 pattern=$2; shift 2
  set +e
  "$bin" publish --repo "$work/state.git" "$@" >"$work/out.txt" 2>"$work/err.txt"
  local rc=$?
  set -e
  [ "$rc" -eq "$code" ] || fail "exit $rc (want $code) for $*: $(cat "$work/err.txt")"
  grep -q "$pattern" "$work/err.txt" || fail "message for $* lacks '$pattern': $(cat "$work/err.txt")"
  [ "$(git -C "$work/state.git" rev-parse refs/heads/main)" = "$tip" ] || fail "refusal moved the ref"
}
first=$(echo "$jobs" | sed -n 1p)
cp -r "$work/spools/$first" "$work/unsealed"
rm -r "$work/unsealed/.clawsweeper-repair/action-events/_finalizations"
expect_refusal 1 "run \`action-ledger seal" "$work/unsealed"
ok "an unsealed spool is refused with a hint to run seal"

# Same producer run, one event fewer, sealed again: a different shard set under a reserved identity.
cp -r "$work/unsealed" "$work/fewer"
victim=$(find "$work/fewer/.clawsweeper-repair/action-events" -name '*.json' -path '*-*/*' ! -path '*/_*' | sort | sed -n 1p)
rm "$victim"
"$bin" -q seal "$work/fewer" >/dev/null
expect_refusal 1 "shard-set binding conflict" "$work/fewer"
ok "a different event set under a published producer run is a conflict"

cp -r "$corpus/shards/$first" "$work/noncanonical"
shard=$(find "$work/noncanonical" -name '*.jsonl' | sort | sed -n 1p)
sed -i '1s/^{"action":{/{"action": {/' "$shard"
expect_refusal 2 "not canonical" "$work/noncanonical"
ok "non-canonical shard bytes are refused"

git -C "$work/state.git" fsck --strict >/dev/null 2>&1 || fail "git fsck after refusals"

# A job that recorded nothing (a post-job step with `if: always()`): seal prints no paths and
# writes nothing, publish makes no commit; a failed first publication leaves no repository.
mkdir -p "$work/nothing/.clawsweeper-repair/action-events" "$work/bare"
sealed=$("$bin" -q seal --paths "$work/nothing" "$work/bare")
[ "$sealed" = $'{"paths":[]}\n{"paths":[]}' ] || fail "seal of an empty job printed $sealed"
[ -z "$(find "$work/nothing" -mindepth 3)" ] || fail "seal of an empty job wrote into its spool"
[ -z "$(find "$work/bare" -mindepth 1)" ] || fail "seal of an empty root wrote into it"
published=$("$bin" -q publish --json --repo "$work/state.git" "$work/nothing" "$work/bare")
[ "$(grep -c '"status":"empty"' <<<"$published")" -eq 2 ] || fail "publish of an empty job: $published"
[ "$(git -C "$work/state.git" rev-parse refs/heads/main)" = "$tip" ] || fail "an empty job moved the ref"
set +e
"$bin" -q publish --repo "$work/fresh/new.git" "$work/unsealed" 2>/dev/null
rc=$?
set -e
[ "$rc" -eq 1 ] && [ ! -e "$work/fresh" ] || fail "a failed first publication left a repository (exit $rc)"
ok "an empty job seals and publishes nothing; a failed first publication leaves no repository"

# 6. The default layout (fanout): same bytes, binding paths two hex levels deeper, one layout
#    record; the same manifests once binding paths are mapped back; one pack per publication.
(cd "$work" && "$bin" -q publish --manifest --repo fanout.git $(for j in $jobs; do echo "spools/$j"; done) >fanout.jsonl)
git -C "$work/fanout.git" fsck --strict >/dev/null 2>&1 || fail "git fsck --strict (fanout)"
"$bin" -q verify --repo "$work/fanout.git" || fail "verify reports findings on the fanout repository"
git clone -q "$work/fanout.git" "$work/fanout"
python3 - "$work/fanout" "$corpus/expected-state" "$work/fanout.jsonl" "$work/manifests.jsonl" <<'PY' || fail "fanout tree or manifests differ beyond binding paths and the layout record"
import json, os, re, sys
fan, ref, fan_manifests, ref_manifests = sys.argv[1:5]
def tree(root):
    out = {}
    for d, dirs, files in os.walk(root):
        dirs[:] = [x for x in dirs if x != ".git"]
        for f in files:
            p = os.path.relpath(os.path.join(d, f), root)
            out[p] = open(os.path.join(d, f), "rb").read()
    return out
pat = re.compile(r"^(ledger/v1/import-bindings/[a-z-]+)/([0-9a-f]{2})/([0-9a-f]{2})/(([0-9a-f]{64})\.json)$")
def back(p):
    m = pat.match(p)
    if m:
        assert m.group(5)[:2] == m.group(2) and m.group(5)[2:4] == m.group(3), p
        return m.group(1) + "/" + m.group(4)
    assert not p.startswith("ledger/v1/import-bindings/"), "not a fanout path: " + p
    return p
f = tree(fan)
record = f.pop("ledger/v1/layout.json")
assert record == b'{"layout":"fanout","schema":"action-ledger.state-layout","schema_version":1}\n', record
mapped = {back(p): b for p, b in f.items()}
assert len(mapped) == len(f)
assert mapped == tree(ref), "fanout tree differs from expected-state/ beyond binding paths"
for g, e in zip(open(fan_manifests), open(ref_manifests)):
    g, e = json.loads(g), json.loads(e)
    for k in ("reservationPaths", "completionPaths", "paths"):
        g[k] = sorted(back(p) for p in g[k])
    assert g == e, "manifest differs"
PY
ok "fanout: the tree is expected-state/ with binding paths two hex levels deeper plus the layout record"
packs=$(find "$work/fanout.git/objects/pack" -name 'pack-*.pack' | wc -l)
# Each publication writes one pack and rolls the small ones up geometrically, so the count stays
# logarithmic in the number of publications (at most log2(24) + 1).
[ "$packs" -ge 1 ] && [ "$packs" -le 6 ] || fail "expected at most 6 packs after 24 publications (geometric roll-up), found $packs"
ok "fanout: 24 publications left $packs pack(s)"
echo "e2e: $pass passed, 0 failed"
