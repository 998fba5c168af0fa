#!/usr/bin/env bash
# What a finality layout costs in repository bytes (not a test; nothing is asserted). Replays the
# finality history of REPO (its commits' added and removed files, in order, with the same blobs)
# under other fan-outs of the action and decision directories, with `git fast-import`, and
# prints one JSON line per layout: the objects by type, the pack's bytes with every object whole
# and with git's deltas (`git pack-objects --window=10 --depth=50`, as a full repack stores them),
# the index's bytes (28 an object, as a version-2 `.idx`), and the bytes per action of both. The
# first line is REPO itself as its writers left it (`du` of its objects).
#   nibble6  finality/v1/actions/<h0>/<h1>/…/<h5>/<id>/   (the `nibble` layout)
#   nibble4  four one-hex-digit levels                     (h: SHA-256 of the id, in hex)
#   hex2x3   <h[0:2]>/<h[2:4]>/<h[4:6]>
#   hex2x2   <h[0:2]>/<h[2:4]>
#   flat     <h[0:2]>                                      (the `flat` layout)
# REPO: a repository whose finality records are in the `nibble` layout, for example the one
# `scripts/bench-serve-scale.sh --keep-repo DIR` keeps. Commit messages are replaced by one
# byte in the replays (the same for every layout). Everything else lives in a temporary
# directory, removed on exit.
# Usage: scripts/bench-finality-layouts.sh REPO [LAYOUT...]
set -euo pipefail
repo=${1:?usage: scripts/bench-finality-layouts.sh REPO [LAYOUT...]}
shift
layouts=("$@")
[ ${#layouts[@]} -gt 0 ] || layouts=(nibble6 nibble4 hex2x3 hex2x2 flat)
git -C "$repo" rev-parse --verify -q refs/heads/main >/dev/null || { echo "bench-finality-layouts: $repo has no refs/heads/main" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
actions=$(git -C "$repo" ls-tree -r --name-only refs/heads/main -- finality/v1/actions | grep -c '/action\.json$' || true)
[ "$actions" -gt 0 ] || { echo "bench-finality-layouts: $repo holds no action" >&2; exit 2; }
objects=$(du -sb "$repo/objects" | cut -f1)
printf '{"layout":"as written","actions":%d,"bytes":%d,"bytes_per_action":%d}\n' "$actions" "$objects" $((objects / actions))

git init -q --bare "$work/sim.git"
# The blobs are shared: the replays only add trees and commits.
echo "$(cd "$repo/objects" && pwd)" >"$work/sim.git/objects/info/alternates"

cat >"$work/replay.py" <<'PY'
"""Writes a fast-import stream of REPO's history with the finality paths of LAYOUT."""
import hashlib, re, subprocess, sys
repo, layout = sys.argv[1:3]
def fan(name):
    h = hashlib.sha256(name.encode()).hexdigest()
    return {"nibble6": "/".join(h[:6]), "nibble4": "/".join(h[:4]),
            "hex2x3": f"{h[:2]}/{h[2:4]}/{h[4:6]}", "hex2x2": f"{h[:2]}/{h[2:4]}",
            "flat": h[:2]}[layout]
act = re.compile(r"^finality/v1/actions/(?:[0-9a-f]/){6}([^/]+)/(.*)$")
dec = re.compile(r"^finality/v1/decisions/(?:[0-9a-f]/){6}([^/]+)\.json$")
def remap(path):
    m = act.match(path)
    if m:
        return f"finality/v1/actions/{fan(m.group(1))}/{m.group(1)}/{m.group(2)}"
    m = dec.match(path)
    if m:
        return f"finality/v1/decisions/{fan(m.group(1))}/{m.group(1)}.json"
    return path
log = subprocess.Popen(["git", "-C", repo, "log", "--reverse", "--raw", "--no-abbrev", "-r",
                        "--no-renames", "--format=C %ct", "refs/heads/main"],
                       stdout=subprocess.PIPE, text=True)
out = sys.stdout
def commit(ts, ops):
    out.write(f"commit refs/heads/{layout}\ncommitter a <a@invalid> {ts} +0000\ndata 1\nx\n")
    out.write("".join(ops) + "\n")
ts, ops = None, []
for line in log.stdout:
    if line.startswith("C "):
        if ts is not None:
            commit(ts, ops)
        ts, ops = line.split()[1], []
    elif line.startswith(":"):
        meta, path = line.rstrip("\n").split("\t", 1)
        fields = meta.split()
        if fields[4] == "D":
            ops.append(f"D {remap(path)}\n")
        else:
            ops.append(f"M {fields[1]} {fields[3]} {remap(path)}\n")
if ts is not None:
    commit(ts, ops)
sys.exit(log.wait())
PY

for layout in "${layouts[@]}"; do
  case $layout in nibble6|nibble4|hex2x3|hex2x2|flat) ;; *) echo "bench-finality-layouts: unknown layout $layout" >&2; exit 2 ;; esac
  python3 "$work/replay.py" "$repo" "$layout" | git -C "$work/sim.git" fast-import --quiet
  git -C "$work/sim.git" rev-list --objects "refs/heads/$layout" | cut -d' ' -f1 >"$work/objects"
  counts=$(git -C "$work/sim.git" cat-file --batch-check='%(objecttype)' <"$work/objects" | sort | uniq -c |
    awk '{ printf "%s\"%ss\":%d", (NR > 1 ? "," : ""), $2, $1 }')
  n=$(wc -l <"$work/objects")
  whole=$(git -C "$work/sim.git" pack-objects -q --window=0 --stdout <"$work/objects" | wc -c)
  delta=$(git -C "$work/sim.git" pack-objects -q --window=10 --depth=50 --stdout <"$work/objects" | wc -c)
  idx=$((n * 28))
  printf '{"layout":"%s","actions":%d,%s,"pack_whole":%d,"pack_deltas":%d,"idx":%d,"bytes_per_action_whole":%d,"bytes_per_action_deltas":%d}\n' \
    "$layout" "$actions" "$counts" "$whole" "$delta" "$idx" $(((whole + idx) / actions)) $(((delta + idx) / actions))
done
