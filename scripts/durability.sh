#!/usr/bin/env bash
# Durability order of every write, checked on the system calls of the built binary (strace):
#   a first publication into a new repository, an update, a replay, action create, claim and
#   outcome, compact, and hooks install. For each traced run the checker asserts that
#   - every file renamed or linked into the repository was fsynced after its last write;
#   - the directory of every such rename was fsynced before the ref moved (objects) or before the
#     command acknowledged (printed its result), and the ref's own directory likewise;
#   - a new repository's files and directories (HEAD, config, …) were fsynced before the staging
#     directory was renamed to its final name, and the parent directory after;
#   - each ref move came after every earlier object rename and its directory fsync;
#   - no file was left in the repository that was written but not fsynced;
#   - each run that should move the ref did (no vacuous pass).
# Usage: scripts/durability.sh   (BIN=path/to/action-ledger; needs strace, prints a skip line
#        when it is missing)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
if ! command -v strace >/dev/null 2>&1; then
  echo "durability: SKIP: strace is not installed (apt-get install strace)"
  exit 0
fi
bin=${BIN:-${CARGO_TARGET_DIR:-$here/target}/debug/action-ledger}
[ -x "$bin" ] || (cd "$here" && cargo build --quiet)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export SOURCE_DATE_EPOCH=1772366400 ACTION_LEDGER_AGENT_ID=dur-agent ACTION_LEDGER_PRINCIPAL=dur-principal
unset ACTION_LEDGER_NOW
repo="$work/state.git"
cp -r "$here/testdata/corpus/day1/spools" "$work/spools"
jobs=$(ls "$work/spools")
first=$(echo "$jobs" | head -n 1)
rest=$(echo "$jobs" | tail -n +2)
n=0
# traced NAME MOVES -- COMMAND...: run COMMAND under strace; MOVES is 1 when the ref must move.
traced() {
  local name=$1 moves=$2
  shift 3
  n=$((n + 1))
  strace -f -y -qq -o "$work/$n.trace" \
    -e trace=openat,open,creat,write,pwrite64,writev,fsync,fdatasync,rename,renameat,renameat2,link,linkat,unlink,unlinkat,mkdir,mkdirat \
    "$@" >"$work/$n.out" 2>"$work/$n.err" || { cat "$work/$n.err" >&2; echo "durability: FAIL: $name exited non-zero" >&2; exit 1; }
  python3 "$work/check.py" "$repo" "$moves" "$name" "$work/$n.trace" || failed=1
}
failed=0

cat >"$work/check.py" <<'PY'
import os, re, sys
repo, moves, name, trace = sys.argv[1], sys.argv[2] == "1", sys.argv[3], sys.argv[4]
repo = os.path.realpath(repo)
line_re = re.compile(r'^(\d+)\s+(\w+)\((.*)\)\s+=\s+(-?\d+)')
fd_re = re.compile(r'^-?\d+<(.*)>$')
def split_args(s):
    out, depth, cur, q, esc = [], 0, '', False, False
    for ch in s:
        if q:
            cur += ch
            if esc: esc = False
            elif ch == '\\': esc = True
            elif ch == '"': q = False
            continue
        if ch == '"': q = True; cur += ch; continue
        if ch in '[{<(': depth += 1
        if ch in ']}>)': depth -= 1
        if ch == ',' and depth == 0: out.append(cur.strip()); cur = ''; continue
        cur += ch
    if cur.strip(): out.append(cur.strip())
    return out
def fd_path(arg):
    m = fd_re.match(arg)
    return m.group(1) if m else None
def str_arg(arg):
    return arg[1:-1] if arg.startswith('"') else None
def resolve(dirarg, patharg):
    p = str_arg(patharg)
    if p is None: return None
    if p.startswith('/'): return os.path.normpath(p)
    base = fd_path(dirarg) if dirarg is not None else os.getcwd()
    return os.path.normpath(os.path.join(base or '', p))
def inside(path, root):
    return path == root or path.startswith(root + '/')
errors = []
last_write, synced, created = {}, {}, set()
dir_synced = {}
pending_dirs = []   # (dir, seq of rename, what)
object_renames = [] # seq
ref_moves = []
acked = False
seq = 0
staging_root = None
for raw in open(trace, errors='replace'):
    m = line_re.match(raw)
    if not m or int(m.group(4)) < 0: continue
    seq += 1
    call, args = m.group(2), split_args(m.group(3))
    if call in ('write', 'pwrite64', 'writev'):
        p = fd_path(args[0])
        if p is None: continue
        if args[0].startswith('1<') or args[0].startswith('2<'):
            if args[0].startswith('1<') and ref_moves:
                acked = True
                for d, s, what in pending_dirs:
                    if dir_synced.get(d, -1) < s:
                        errors.append(f"acknowledged before the directory of {what} was fsynced: {d}")
                pending_dirs = []
            continue
        last_write[p] = seq
    elif call in ('fsync', 'fdatasync'):
        p = fd_path(args[0])
        if p is None: continue
        synced[p] = seq
        dir_synced[p] = seq
    elif call in ('openat', 'open', 'creat'):
        flags = args[2] if call == 'openat' else (args[1] if len(args) > 1 else '')
        p = resolve(args[0] if call == 'openat' else None, args[1] if call == 'openat' else args[0])
        if p and 'O_CREAT' in flags: created.add(p)
    elif call in ('unlink', 'unlinkat'):
        p = resolve(args[0] if call == 'unlinkat' else None, args[1] if call == 'unlinkat' else args[0])
        if p:
            created.discard(p); last_write.pop(p, None)
    elif call in ('rename', 'renameat', 'renameat2', 'link', 'linkat'):
        if call in ('rename', 'link'):
            src, dst = resolve(None, args[0]), resolve(None, args[1])
        else:
            src, dst = resolve(args[0], args[1]), resolve(args[2], args[3])
        if src is None or dst is None: continue
        if not inside(dst, repo):
            # Inside a staging directory: checked when the staging directory moves.
            for table in (last_write, synced):
                if src in table: table[dst] = table.pop(src)
            created.discard(src); created.add(dst)
            continue
        if dst == repo:
            # A new repository: every file written below the staging directory was fsynced, and
            # the staging directory itself, before this rename.
            for p, w in last_write.items():
                if inside(p, src) and synced.get(p, -1) < w:
                    errors.append(f"new repository file not fsynced before it appeared: {p}")
            for p in created:
                if inside(p, src) and p not in synced:
                    errors.append(f"new repository entry not fsynced before it appeared: {p}")
            if dir_synced.get(src, -1) < 0:
                errors.append(f"staging directory not fsynced before its rename: {src}")
            pending_dirs.append((os.path.dirname(dst), seq, 'the new repository'))
            # The repository's entries now live under dst.
            for table in (last_write, synced, dir_synced):
                for p in list(table):
                    if inside(p, src): table[dst + p[len(src):]] = table.pop(p)
            created = {dst + p[len(src):] if inside(p, src) else p for p in created}
            continue
        w = last_write.get(src)
        if w is None or synced.get(src, -1) < w:
            errors.append(f"renamed into the repository before it was fsynced: {src} -> {dst}")
        rel = os.path.relpath(dst, repo)
        what = rel
        if rel.startswith('refs/') or rel == 'HEAD':
            for d, s, w2 in pending_dirs:
                if w2.startswith('objects/') and dir_synced.get(d, -1) < s:
                    errors.append(f"ref {rel} moved before the directory of {w2} was fsynced")
            ref_moves.append(seq)
        elif rel.startswith('objects/'):
            object_renames.append(seq)
        pending_dirs.append((os.path.dirname(dst), seq, what))
        for table in (last_write, synced):
            if src in table: table[dst] = table.pop(src)
        created.discard(src); created.add(dst)
# Files written inside the repository and left there must be durable.
for p, w in last_write.items():
    if inside(p, repo) and os.path.exists(p) and synced.get(p, -1) < w:
        errors.append(f"file written in the repository and never fsynced: {p}")
# Directories of renames that no acknowledgement checked (nothing printed): synced by the end.
for d, s, what in pending_dirs:
    if dir_synced.get(d, -1) < s:
        errors.append(f"directory of {what} never fsynced after the rename: {d}")
if moves and not ref_moves:
    errors.append("the ref did not move")
if not moves and ref_moves:
    errors.append("the ref moved on an operation that should change nothing")
if errors:
    for e in errors: print(f"durability: FAIL: {name}: {e}", file=sys.stderr)
    sys.exit(1)
print(f"durability: ok: {name}: {len(object_renames)} object file(s), {len(ref_moves)} ref move(s), fsync before every rename")
PY

cd "$work"
traced "first publication (new repository)" 1 -- "$bin" -q publish --repo "$repo" "spools/$first"
# shellcheck disable=SC2086
traced "publication on an existing tip" 1 -- "$bin" -q publish --repo "$repo" $(for j in $rest; do echo "spools/$j"; done)
traced "replay (no change)" 0 -- "$bin" -q publish --repo "$repo" "spools/$first"
traced "action create (loose objects)" 1 -- "$bin" -q action create --repo "$repo" --id act_dur_1 --guard-decision gd_dur_1 -- true
traced "action claim" 1 -- "$bin" -q action claim --repo "$repo" act_dur_1 --attempt dur-attempt-0000000001 -- true
traced "action outcome" 1 -- "$bin" -q action outcome --repo "$repo" act_dur_1 completed --attempt dur-attempt-0000000001
traced "compact" 1 -- "$bin" -q compact --repo "$repo" --now 2026-05-01 --retention-days 1
traced "hooks install (the hook and config replaced)" 0 -- "$bin" -q hooks install --repo "$repo"
[ "$failed" -eq 0 ] || { echo "durability: FAIL: see above" >&2; exit 1; }
git -C "$repo" fsck --strict --no-progress >/dev/null 2>&1 || { echo "durability: FAIL: git fsck" >&2; exit 1; }
"$bin" -q verify --repo "$repo" || { echo "durability: FAIL: verify" >&2; exit 1; }
echo "durability: ok: $n traced runs; fsck and verify clean"
