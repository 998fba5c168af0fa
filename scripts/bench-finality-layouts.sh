#!/usr/bin/env bash
# What a finality layout costs in repository bytes (not a test; nothing is asserted). Replays the
# finality history of REPO (its commits' added and removed files, in order, with the same blobs)
# under other fan-outs of the action and decision directories, with `git fast-import`, and
# prints one JSON line per layout. With --tiles K the history is replayed K times in a row, each
# time with every action and decision id renamed (`<id>-<k>`), so that a history of
# K × REPO's actions is weighed without running `serve` that long: the tree fan-out, which is
# what a layout changes, sees K times the ids.
#   nibble6  finality/v1/actions/<h0>/<h1>/…/<h5>/<id>/   (the `nibble` layout of 0.1.x)
#   nibble4  four one-hex-digit levels                     (h: SHA-256 of the id, in hex)
#   hex2x3   <h[0:2]>/<h[2:4]>/<h[4:6]>
#   hex2x2   <h[0:2]>/<h[2:4]>                               (the `hex2x2` layout, the default)
#   hex3x2   <h[0:3]>/<h[3:6]>
#   hex3     <h[0:3]>
#   flat     <h[0:2]>                                      (the `flat` layout)
# Each line holds, for the trees and commits of the replay (the blobs are REPO's, the same for
# every layout, and weighed once, on the first line): the objects by type, and the bytes per
# action of
#   - the whole replay: a pack with every object whole, and one with git's deltas
#     (`git pack-objects --window=10 --depth=50 --no-reuse-delta`, as a full repack stores
#     them), each with its index (28 bytes an object, as a version-2 `.idx`);
#   - the last replay of REPO (with --tiles K > 1): the objects it added, as a pack of whole
#     objects and as a thin pack of deltas against what was there before it: what an action
#     adds to a history of that size, whole and with deltas.
# The first line is REPO itself as its writers left it (`du` of its objects) and its blobs,
# packed with git's deltas, per action. Commit messages are replaced by one byte in the replays
# (the same for every layout). Everything else lives in a temporary directory, removed on exit.
# REPO: a repository with finality records in any layout, migrated or not (a migration's moves
# cancel out in the replay), for example the one `scripts/bench-serve-scale.sh --keep-repo DIR`
# keeps. Its layout record is not replayed (the replay's layouts are the script's).
# Usage: scripts/bench-finality-layouts.sh [--tiles K] REPO [LAYOUT...]
set -euo pipefail
tiles=1
if [ "${1:-}" = --tiles ]; then
  tiles=${2:?usage: scripts/bench-finality-layouts.sh [--tiles K] REPO [LAYOUT...]}
  shift 2
fi
case $tiles in '' | *[!0-9]* | 0) echo "bench-finality-layouts: --tiles wants a positive integer" >&2; exit 2 ;; esac
repo=${1:?usage: scripts/bench-finality-layouts.sh [--tiles K] REPO [LAYOUT...]}
shift
layouts=("$@")
[ ${#layouts[@]} -gt 0 ] || layouts=(nibble6 nibble4 hex2x3 hex2x2 hex3 flat)
git -C "$repo" rev-parse --verify -q refs/heads/main >/dev/null || { echo "bench-finality-layouts: $repo has no refs/heads/main" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
actions=$(git -C "$repo" ls-tree -r --name-only refs/heads/main -- finality/v1/actions | grep -c '/action\.json$' || true)
[ "$actions" -gt 0 ] || { echo "bench-finality-layouts: $repo holds no action" >&2; exit 2; }
objects=$(du -sb "$repo/objects" | cut -f1)
git -C "$repo" rev-list --objects refs/heads/main | cut -d' ' -f1 |
  git -C "$repo" cat-file --batch-check='%(objectname) %(objecttype)' | awk '$2 == "blob" { print $1 }' >"$work/blobs"
nblobs=$(wc -l <"$work/blobs")
blob_bytes=$(git -C "$repo" pack-objects -q --window=10 --depth=50 --no-reuse-delta --stdout <"$work/blobs" | wc -c)
printf '{"layout":"as written","actions":%d,"bytes":%d,"bytes_per_action":%d,"blobs":%d,"blob_bytes_per_action_deltas":%d}\n' \
  "$actions" "$objects" $((objects / actions)) "$nblobs" $(((blob_bytes + 28 * nblobs) / actions))

git init -q --bare "$work/sim.git"
# The blobs are shared: the replays only add trees and commits.
echo "$(cd "$repo/objects" && pwd)" >"$work/sim.git/objects/info/alternates"

cat >"$work/replay.py" <<'PY'
"""Writes a fast-import stream of REPO's history with the finality paths of LAYOUT, TILES times."""
import hashlib, re, subprocess, sys
repo, layout, tiles = sys.argv[1], sys.argv[2], int(sys.argv[3])
def fan(name):
    h = hashlib.sha256(name.encode()).hexdigest()
    return {"nibble6": "/".join(h[:6]), "nibble4": "/".join(h[:4]),
            "hex2x3": f"{h[:2]}/{h[2:4]}/{h[4:6]}", "hex2x2": f"{h[:2]}/{h[2:4]}",
            "hex3": h[:3], "hex3x2": f"{h[:3]}/{h[3:6]}",
            "flat": h[:2]}[layout]
# The fan-out of any layout a path may be in (REPO may have been migrated: its older commits
# use older paths): six one-hex-digit levels (nibble), two or one two-hex-digit levels.
levels = r"(?:(?:[0-9a-f]/){6}|(?:[0-9a-f]{2}/){1,2})"
act = re.compile(rf"^finality/v1/actions/{levels}([^/]+)/(.*)$")
dec = re.compile(rf"^finality/v1/decisions/{levels}([^/]+)\.json$")
pen = re.compile(r"^(finality/v1/pending/[^/]+/[^/]+/[0-9]+)\.([^/]+)$")
def remap(path, tile):
    sfx = f"-{tile}" if tile else ""
    m = act.match(path)
    if m:
        i = m.group(1) + sfx
        return f"finality/v1/actions/{fan(i)}/{i}/{m.group(2)}"
    m = dec.match(path)
    if m:
        i = m.group(1) + sfx
        return f"finality/v1/decisions/{fan(i)}/{i}.json"
    m = pen.match(path)
    if m:
        return f"{m.group(1)}.{m.group(2)}{sfx}"
    return path
log = subprocess.run(["git", "-C", repo, "log", "--reverse", "--raw", "--no-abbrev", "-r",
                      "--no-renames", "--format=C %ct", "refs/heads/main"],
                     stdout=subprocess.PIPE, text=True, check=True).stdout
history, ts, ops = [], None, []
for line in log.splitlines():
    if line.startswith("C "):
        if ts is not None:
            history.append((ts, ops))
        ts, ops = line.split()[1], []
    elif line.startswith(":"):
        meta, path = line.split("\t", 1)
        f = meta.split()
        ops.append((f[4] == "D", f[1], f[3] if f[4] != "D" else f[2], path))
if ts is not None:
    history.append((ts, ops))
out = sys.stdout
def net(ops, tile):
    """A commit's operations on the replay's paths: a migration's moves (a record deleted at
    one path and added at another, the same blob) land on one path here, and cancel out."""
    mapped = [(d, mode, oid, remap(path, tile)) for d, mode, oid, path in ops]
    deleted = {(p, oid) for d, _, oid, p in mapped if d}
    added = {(p, oid) for d, _, oid, p in mapped if not d}
    return [op for op in mapped if (op[3], op[2]) not in (deleted & added)]
for tile in range(tiles):
    if tile == tiles - 1 and tiles > 1:
        # The state before the last tile, so that the last tile's increment can be measured.
        out.write(f"reset refs/heads/{layout}-before\nfrom refs/heads/{layout}\n\n")
    for ts, ops in history:
        out.write(f"commit refs/heads/{layout}\ncommitter a <a@invalid> {ts} +0000\ndata 1\nx\n")
        for deleted, mode, oid, path in net(ops, tile):
            if path == "finality/v1/layout.json":
                continue
            if deleted:
                out.write(f"D {path}\n")
            else:
                out.write(f"M {mode} {oid} {path}\n")
        out.write("\n")
PY

# Bytes of a pack of the objects named on stdin (args: pack-objects' options).
pack_bytes() { git -C "$work/sim.git" pack-objects -q "$@" --stdout | wc -c; }
total=$((actions * tiles))
for layout in "${layouts[@]}"; do
  case $layout in nibble6|nibble4|hex2x3|hex2x2|hex3x2|hex3|flat) ;; *) echo "bench-finality-layouts: unknown layout $layout" >&2; exit 2 ;; esac
  python3 "$work/replay.py" "$repo" "$layout" "$tiles" | git -C "$work/sim.git" fast-import --quiet
  # Trees and commits only: the blobs are REPO's, shared by every layout and tile.
  git -C "$work/sim.git" rev-list --objects "refs/heads/$layout" | cut -d' ' -f1 |
    git -C "$work/sim.git" cat-file --batch-check='%(objectname) %(objecttype)' |
    awk '$2 != "blob" { print $1 > "'"$work"'/objects"; n[$2]++ } END { printf "\"trees\":%d,\"commits\":%d", n["tree"], n["commit"] > "'"$work"'/counts" }'
  n=$(wc -l <"$work/objects")
  if [ "$tiles" -eq 1 ]; then
    whole=$(pack_bytes --window=0 --no-reuse-delta <"$work/objects")
    delta=$(pack_bytes --window=10 --depth=50 --no-reuse-delta <"$work/objects")
    weighed=$(printf ',"per_action_whole":%d,"per_action_deltas":%d' $(((whole + 28 * n) / total)) $(((delta + 28 * n) / total)))
  else
    # What the last replay added: whole, and as a thin pack against what was there before it.
    git -C "$work/sim.git" rev-list --objects "refs/heads/$layout" "^refs/heads/$layout-before" | cut -d' ' -f1 |
      git -C "$work/sim.git" cat-file --batch-check='%(objectname) %(objecttype)' | awk '$2 != "blob" { print $1 }' >"$work/last"
    m=$(wc -l <"$work/last")
    last_whole=$(pack_bytes --window=0 --no-reuse-delta <"$work/last")
    last_delta=$(printf '%s\n' "$(git -C "$work/sim.git" rev-parse "refs/heads/$layout")" "^$(git -C "$work/sim.git" rev-parse "refs/heads/$layout-before")" |
      git -C "$work/sim.git" pack-objects -q --revs --thin --window=10 --depth=50 --no-reuse-delta --stdout | wc -c)
    # The last replay's blobs are REPO's, reachable before it too, so neither pack holds one.
    weighed=$(printf ',"last_objects":%d,"last_per_action_whole":%d,"last_per_action_deltas":%d' \
      "$m" $(((last_whole + 28 * m) / actions)) $(((last_delta + 28 * m) / actions)))
  fi
  printf '{"layout":"%s","actions":%d,%s%s}\n' "$layout" "$total" "$(cat "$work/counts")" "$weighed"
  git -C "$work/sim.git" update-ref -d "refs/heads/$layout"
  git -C "$work/sim.git" update-ref -d "refs/heads/$layout-before" 2>/dev/null || true
  git -C "$work/sim.git" gc -q --prune=now 2>/dev/null || true
done
