#!/usr/bin/env bash
# Benchmark (issue 7; a benchmark, not a test: check.sh does not run it). Builds the release
# binary, generates synthetic spools of realistic events (scripts/gen-spools.py: the day1 corpus
# replayed with new identities) and measures, side by side in one run:
#   (1) publish of N sealed events into an empty repository vs `git fast-import` writing the same
#       final files (taken from our published tree) as one commit into an empty bare repository;
#   (2) publishing one 1,000-event spool into a repository holding M events, one holding M/10 and
#       an empty one (median of --repeat runs, each on a fresh `cp -a` of the cached base);
#   (3) verify of the M-event repository (whole revision) vs `git cat-file --batch` reading the
#       blobs of the same tree (with --skip-large: the N-event repository of (1));
#   (4) peak RSS (and wall and CPU time) of every measured command, with the peaks of its
#       anonymous and its file-backed part (sampled every 5 ms: scripts/mem-peak.py); on their
#       own lines the three memory figures of publish: every spool of the large base in one
#       process (measured when the base is built, kept with it), N events into an empty
#       repository, 1,000 into M;
#   (5) seal + publish of the N events end to end, an unchanged replay of the same publish, and
#       the CPU time compared with the reference pipeline (about 1,000 s for 98,362 events).
# One line per measurement and per ratio on stdout; a JSON summary is written to --out.
#
# usage: scripts/bench.sh [--events N] [--large M] [--skip-large] [--repeat K] [--out FILE.json]
#   --events N    events of figures (1) and (5) (default 100000)
#   --large M     events of the large base repository of (2) and (3) (default 1000000); the
#                 middle one holds M/10
#   --skip-large  skip (2), run (3) on the N-event repository
#   --repeat K    runs of each publication of (2) (default 3; the median is reported)
#   --out FILE    JSON summary (default: action-ledger-bench-<UTC time>-<pid>.json under $TMPDIR)
# Environment: BIN (binary, used as it is; default ${CARGO_TARGET_DIR:-target}/release/action-ledger,
# built first with `cargo build --release`), BENCH_CACHE (base repositories, kept between runs; default
# ~/.cache/action-ledger-bench; the generated spools are kept there too), BENCH_REBUILD=1 (rebuild the cached bases), KEEP=1 (keep the
# work directory), TMPDIR.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"

events=100000 large=1000000 skip_large= repeat=3 out=
increment=1000
per_spool=10000 # events per generated spool: stays within the spool limits (256 producers)
while [ $# -gt 0 ]; do
  case $1 in
    --events) events=$2; shift 2 ;;
    --large) large=$2; shift 2 ;;
    --skip-large) skip_large=1; shift ;;
    --repeat) repeat=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
for v in "$events" "$large" "$repeat"; do
  [[ $v =~ ^[1-9][0-9]*$ ]] || { echo "bench: counts must be positive integers" >&2; exit 2; }
done
[ -n "$skip_large" ] || [ "$large" -ge 10 ] || { echo "bench: --large must be >= 10" >&2; exit 2; }

export SOURCE_DATE_EPOCH=1773100800
export LC_ALL=C
gen="$here/scripts/gen-spools.py"
cache=${BENCH_CACHE:-$HOME/.cache/action-ledger-bench}
work=$(mktemp -d "${TMPDIR:-/tmp}/action-ledger-bench.XXXXXX")
[ -n "$out" ] || out="${TMPDIR:-/tmp}/action-ledger-bench-$(date -u +%Y%m%dT%H%M%SZ)-$$.json"
cleanup() { if [ -n "${KEEP:-}" ]; then echo "bench: kept $work" >&2; else rm -rf "$work"; fi; }
trap cleanup EXIT
results="$work/results" info="$work/info"
: >"$results"
: >"$info"

if [ -z "${BIN:-}" ]; then
  echo "== cargo build --release"
  cargo build --release --quiet
fi
bin=${BIN:-${CARGO_TARGET_DIR:-target}/release/action-ledger}
[ -x "$bin" ] || { echo "bench: no binary at $bin" >&2; exit 2; }
bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")

note() { echo "$1=$2" >>"$info"; } # key, value for the JSON summary
die() { echo "bench: $*" >&2; exit 1; }

# measure NAME [<FILE] CMD...: runs CMD (stdout to /dev/null, stdin from FILE when given) under
# GNU time, aborts with its stderr when it fails, records and prints wall, CPU and peak RSS.
# Dirty pages of earlier steps (generated spools, copied repositories) are written back first,
# so that they do not land in the measured command's fsyncs.
measure() {
  local name=$1 input=/dev/null; shift
  if [[ $1 == \<* ]]; then input=${1#<}; shift; fi
  sync
  local tpid spid status=0
  /usr/bin/time -f '%e %M %U %S' -o "$work/time" "$@" <"$input" >/dev/null 2>"$work/err" &
  tpid=$!
  python3 "$here/scripts/mem-peak.py" "$tpid" "$work/mem" &
  spid=$!
  wait "$tpid" || status=$?
  wait "$spid"
  if [ "$status" != 0 ]; then
    echo "bench: $name failed: $*" >&2
    cat "$work/err" >&2
    exit 1
  fi
  local wall rss user sys anon filed
  read -r wall rss user sys < <(tail -n 1 "$work/time")
  read -r anon filed <"$work/mem"
  echo "$name $wall $rss $user $sys $anon $filed" >>"$results"
  awk -v n="$name" -v w="$wall" -v r="$rss" -v u="$user" -v s="$sys" -v a="$anon" -v f="$filed" 'BEGIN {
    printf "%-40s %9.2f s wall %9.2f s cpu %8.1f MiB peak RSS (anon %.1f, file-backed %.1f)\n",
      n, w, u + s, r / 1024, a / 1024, f / 1024 }'
}
# field NAME COLUMN: 2 wall, 3 rss (KiB), 4 user, 5 sys, 6 user+sys, 7 peak anonymous RSS
# (KiB), 8 peak file-backed RSS (KiB; both sampled by scripts/mem-peak.py), of the last run of
# NAME
field() {
  awk -v n="$1" -v c="$2" '$1 == n { v = (c == 6 ? $4 + $5 : $c) } END { print v }' "$results"
}
# median COLUMN NAME...: median of a field (see `field`) over the named runs
median() {
  local c=$1; shift
  for n in "$@"; do field "$n" "$c"; done | sort -g | awk '{ v[NR] = $1 } END {
    print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'
}
# ratio LABEL A B: prints and records A / B
ratio() {
  awk -v l="$1" -v a="$2" -v b="$3" 'BEGIN {
    if (b > 0) printf "%-40s %9.2fx   (%s s / %s s)\n", l, a / b, a, b
    else printf "%-40s %9s    (%s s / %s s)\n", l, "n/a", a, b }'
  printf '%s\t%s\t%s\n' "$1" "$2" "$3" >>"$work/ratios"
}
du_objects() { du -sb "$1/objects" | cut -f1; }
tip() { git -C "$1" rev-parse --verify -q refs/heads/main || true; }
layout_of() { # the layout a repository records (ledger/v1/layout.json), `reference` when absent
  if git -C "$1" cat-file -e refs/heads/main:ledger/v1/layout.json 2>/dev/null; then
    git -C "$1" cat-file -p refs/heads/main:ledger/v1/layout.json |
      python3 -c 'import json, sys; print(json.load(sys.stdin)["layout"])'
  else
    echo reference
  fi
}
spools_for() { echo $(((($1) + per_spool - 1) / per_spool)); }

genver=$(python3 "$gen" --version)
# gen_spools DIR ARGS...: the generator's spools for ARGS (deterministic), generated once into
# the cache and copied to DIR (sealing writes into them).
gen_spools() {
  local dir=$1; shift
  local keep="$cache/spools-gen$genver-$(echo "$*" | tr -c 'a-z0-9\n' '_')"
  if [ ! -d "$keep" ]; then
    rm -rf "$keep.tmp"
    mkdir -p "$cache"
    python3 "$gen" "$keep.tmp" "$@"
    mv "$keep.tmp" "$keep"
  fi
  cp -a "$keep" "$dir"
}
note generator_version "$genver"
note binary "$bin"
note binary_sha256 "$(sha256sum "$bin" | cut -d' ' -f1)"
note source_commit "$(git rev-parse HEAD)$(git diff --quiet HEAD -- src Cargo.toml Cargo.lock || echo -dirty)"
note git_version "$(git --version | cut -d' ' -f3)"
note nproc "$(nproc)"
note arguments "--events $events --large $large${skip_large:+ --skip-large} --repeat $repeat"
note events "$events"
note increment_events "$increment"

echo "== generating $events events ($(spools_for "$events") spools) and a $increment-event spool"
gen_spools "$work/a" --events "$events" --spools "$(spools_for "$events")" --seed 1
gen_spools "$work/inc" --events "$increment" --spools 1 --seed 3
"$bin" -q seal "$work/inc"/* >/dev/null

echo "== (5) seal + publish of $events events, then an unchanged replay; (1) vs git fast-import"
measure seal "$bin" -q seal "$work/a"/*
measure publish "$bin" -q publish --repo "$work/r1.git" "$work/a"/*
first=$(tip "$work/r1.git")
[ -n "$first" ] || die "publish left no refs/heads/main"
layout=$(layout_of "$work/r1.git")
note layout "$layout"
measure publish_replay "$bin" -q publish --repo "$work/r1.git" "$work/a"/*
[ "$(tip "$work/r1.git")" = "$first" ] || die "the unchanged replay moved refs/heads/main"
note publish_commits "$(git -C "$work/r1.git" rev-list --count refs/heads/main)"
repo_bytes=$(du_objects "$work/r1.git")
loose=$(git -C "$work/r1.git" count-objects -v | awk '$1 == "count:" { print $2 }')
packs=$(git -C "$work/r1.git" count-objects -v | awk '$1 == "packs:" { print $2 }')
note publish_repo_bytes "$repo_bytes"
note publish_loose_objects "$loose"
note publish_packs "$packs"

# The fast-import stream: every file of our final tree, inline, as one commit (built untimed).
git -C "$work/r1.git" ls-tree -r -z refs/heads/main >"$work/tree.z"
python3 - "$work/r1.git" "$work/tree.z" "$work/stream" <<'PY'
import subprocess, sys
repo, listing, out = sys.argv[1:4]
entries = []
for rec in open(listing, "rb").read().split(b"\0"):
    if rec:
        meta, path = rec.split(b"\t", 1)
        mode, kind, oid = meta.split(b" ")
        assert kind == b"blob" and mode == b"100644", rec
        entries.append((oid, path))
with open(out + ".ids", "wb") as f:
    f.write(b"".join(oid + b"\n" for oid, _ in entries))
with open(out + ".ids", "rb") as ids, open(out, "wb") as s, open(out + ".blobs", "wb") as b:
    cat = subprocess.Popen(["git", "-C", repo, "cat-file", "--batch"], stdin=ids,
                           stdout=subprocess.PIPE)
    msg = b"bench: the published files in one commit\n"
    s.write(b"commit refs/heads/main\ncommitter bench <bench@example.invalid> 1773100800 +0000\n")
    s.write(b"data %d\n%s" % (len(msg), msg))
    for oid, path in entries:
        head = cat.stdout.readline().split()
        assert head[0] == oid and head[1] == b"blob", head
        data = cat.stdout.read(int(head[2]))
        cat.stdout.read(1)
        s.write(b"M 100644 inline %s\ndata %d\n" % (path, len(data)))
        s.write(data)
        s.write(b"\n")
        b.write(b"blob\ndata %d\n" % len(data))
        b.write(data)
        b.write(b"\n")
    s.write(b"done\n")
    b.write(b"done\n")
    assert cat.wait() == 0
PY
files=$(tr -cd '\0' <"$work/tree.z" | wc -c)
note publish_files "$files"
git init -q --bare "$work/fi.git"
measure fast_import "<$work/stream" git -C "$work/fi.git" fast-import --quiet --done
[ "$(git -C "$work/fi.git" rev-parse 'refs/heads/main^{tree}')" = "$(git -C "$work/r1.git" rev-parse 'refs/heads/main^{tree}')" ] ||
  die "fast-import did not reproduce the published tree"
fi_bytes=$(du_objects "$work/fi.git")
note fast_import_repo_bytes "$fi_bytes"
# For reading (1): the same blobs without the tree and commit. fast-import inserts each path into
# its in-memory tree by a linear scan, so a flat directory of n files costs O(n^2) there.
git init -q --bare "$work/fi-blobs.git"
measure fast_import_blobs_only "<$work/stream.blobs" git -C "$work/fi-blobs.git" fast-import --quiet --done
rm -rf "$work/stream" "$work/stream.ids" "$work/stream.blobs" "$work/fi-blobs.git"

awk -v f="$files" -v a="$repo_bytes" -v l="$loose" -v p="$packs" -v b="$fi_bytes" 'BEGIN {
  printf "%-40s %9d files; objects: ours %.1f MiB (%d loose, %d packs), fast-import %.1f MiB\n",
    "(1) repository size", f, a / 1048576, l, p, b / 1048576 }'
ratio "(1) publish / fast-import" "$(field publish 2)" "$(field fast_import 2)"
ratio "(1) publish / fast-import blobs only" "$(field publish 2)" "$(field fast_import_blobs_only 2)"
ratio "(1) publish / fast-import, cpu" "$(field publish 6)" "$(field fast_import 6)"
seal_pub=$(awk -v a="$(field seal 2)" -v b="$(field publish 2)" 'BEGIN { print a + b }')
seal_pub_cpu=$(awk -v a="$(field seal 6)" -v b="$(field publish 6)" 'BEGIN { print a + b }')
printf '%-40s %9.2f s wall %9.2f s cpu\n' "(5) seal + publish" "$seal_pub" "$seal_pub_cpu"
ratio "(5) replay / first publish" "$(field publish_replay 2)" "$(field publish 2)"
ratio "(5) replay / first publish, cpu" "$(field publish_replay 6)" "$(field publish 6)"
# Reference pipeline: about 1,000 s of CPU for 98,362 events (finalize 774, import 228, git 10-21).
scaled=$(awk -v c="$seal_pub_cpu" -v n="$events" 'BEGIN { printf "%.3f", c * 98362 / n }')
note seal_publish_cpu_scaled_98362 "$scaled"
ratio "(5) reference CPU / ours (98,362 ev)" 1000 "$scaled"

if [ -z "$skip_large" ]; then
  mid=$((large / 10))
  # Spools of at most per_spool events, their count a multiple of 10: the first tenth of them
  # holds about M/10 events and is the middle base; the large base continues from a copy of it.
  spools=$(($(spools_for "$mid") * 10))
  # b2: the large base is one publish of every spool from empty (the multi-source figure).
  # The binary is part of the key: how it writes packs shapes the base.
  key="gen${genver}-${layout}-${large}-b2-$(sha256sum "$bin" | cut -c1-12)"
  base="$cache/base-$key"
  if [ -n "${BENCH_REBUILD:-}" ] || [ ! -f "$base/meta.json" ]; then
    echo "== building the base repositories ($large events in $spools spools, cached in $base)"
    rm -rf "$base" "$base.tmp"
    mkdir -p "$base.tmp"
    gen_spools "$work/base" --events "$large" --spools "$spools" --seed 2
    all=("$work/base"/*)
    first_tenth=("${all[@]:0:spools/10}")
    measure base_seal "$bin" -q seal "${all[@]}"
    measure base_publish_mid "$bin" -q publish --repo "$base.tmp/mid.git" "${first_tenth[@]}"
    # gen-spools spreads the events evenly, the first spools taking one more.
    mid_events=$((spools / 10 * (large / spools) + (large % spools < spools / 10 ? large % spools : spools / 10)))
    # The large base: every spool given to one publish process, into an empty repository.
    measure base_publish_large "$bin" -q publish --repo "$base.tmp/large.git" "${all[@]}"
    rm -rf "$work/base"
    [ "$(layout_of "$base.tmp/large.git")" = "$layout" ] || die "the base was written in another layout"
    cat >"$base.tmp/meta.json" <<EOF
{"generator_version":$genver,"layout":"$layout","large_events":$large,"mid_events":$mid_events,"spools":$spools,"binary_sha256":"$(sha256sum "$bin" | cut -d' ' -f1)","seal_s":$(field base_seal 2),"publish_mid_s":$(field base_publish_mid 2),"publish_large_s":$(field base_publish_large 2),"publish_large_rss_kib":$(field base_publish_large 3),"publish_large_binary_sha256":"$(sha256sum "$bin" | cut -d' ' -f1)"}
EOF
    mv "$base.tmp" "$base"
    note base_cached false
  else
    echo "== base repositories from the cache ($base)"
    note base_cached true
  fi
  meta() { python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$base/meta.json" "$1"; }
  mid_events=$(meta mid_events)
  note base_dir "$base"
  note large_events "$large"
  note mid_events "$mid_events"
  note base_binary_sha256 "$(meta binary_sha256)"
  [ "$(meta binary_sha256)" = "$(sha256sum "$bin" | cut -d' ' -f1)" ] ||
    echo "   (note: the cached bases were written by another build of the binary)"
  note large_repo_bytes "$(du_objects "$base/large.git")"
  note mid_repo_bytes "$(du_objects "$base/mid.git")"

  echo "== (2) publishing $increment events into repositories of 0, $mid_events and $large events (x$repeat)"
  for i in $(seq "$repeat"); do
    measure "inc_empty_$i" "$bin" -q publish --repo "$work/p-empty.git" "$work/inc"/*
    [ -n "$(tip "$work/p-empty.git")" ] || die "the publication into the empty repository wrote nothing"
    rm -rf "$work/p-empty.git"
    for size in mid large; do
      cp -a "$base/$size.git" "$work/p-$size.git"
      before=$(tip "$work/p-$size.git")
      measure "inc_${size}_$i" "$bin" -q publish --repo "$work/p-$size.git" "$work/inc"/*
      [ "$(git -C "$work/p-$size.git" rev-parse 'refs/heads/main^')" = "$before" ] ||
        die "the publication into the $size repository did not add exactly one commit"
      rm -rf "$work/p-$size.git"
    done
  done
  runs() { for i in $(seq "$repeat"); do echo "inc_$1_$i"; done; }
  for size in empty mid large; do
    m=$(median 2 $(runs $size))
    c=$(median 6 $(runs $size))
    echo "inc_${size} $m $c" >>"$work/medians"
    printf '%-40s %9.3f s wall %9.3f s cpu (medians of %d; peak RSS %.1f MiB)\n' \
      "(2) publish $increment into $size" "$m" "$c" "$repeat" \
      "$(for n in $(runs $size); do field "$n" 3; done | sort -g | tail -1 | awk '{ print $1 / 1024 }')"
  done
  med() { awk -v n="inc_$1" -v c="$2" '$1 == n { print $c }' "$work/medians"; }
  ratio "(2) large / mid" "$(med large 2)" "$(med mid 2)"
  ratio "(2) large / empty" "$(med large 2)" "$(med empty 2)"
  ratio "(2) large / mid, cpu" "$(med large 3)" "$(med mid 3)"
  ratio "(2) large / empty, cpu" "$(med large 3)" "$(med empty 3)"
  # (4) publish's memory: the whole base in one process (kept with the base), N into empty,
  # 1,000 into M (the largest of the runs).
  large_rss=$(meta publish_large_rss_kib)
  inc_large_rss=$(for n in $(runs large); do field "$n" 3; done | sort -g | tail -1)
  note publish_large_rss_kib "$large_rss"
  note inc_large_rss_kib "$inc_large_rss"
  large_packs=$(git -C "$base/large.git" count-objects -v | awk '$1 == "packs:" { print $2 }')
  note large_packs "$large_packs"
  printf '%-40s %9.1f MiB peak RSS (%d spools, one process; measured when the base was built)\n' \
    "(4) publish of the whole large base" "$(awk -v r="$large_rss" 'BEGIN { print r / 1024 }')" "$spools"
  printf '%-40s %9.1f MiB peak RSS\n' "(4) publish $events into empty" \
    "$(awk -v r="$(field publish 3)" 'BEGIN { print r / 1024 }')"
  printf '%-40s %9.1f MiB peak RSS\n' "(4) publish $increment into $large" \
    "$(awk -v r="$inc_large_rss" 'BEGIN { print r / 1024 }')"
  printf '%-40s %9d packs\n' "(2) packs of the large base" "$large_packs"
  verify_repo="$base/large.git" verify_events=$large
else
  verify_repo="$work/r1.git" verify_events=$events
fi

echo "== (3) verify of $verify_events events vs git cat-file --batch of the same blobs"
note verify_events "$verify_events"
git -C "$verify_repo" ls-tree -r --format='%(objectname)' refs/heads/main >"$work/ids"
note verify_blobs "$(wc -l <"$work/ids")"
measure verify "$bin" -q verify --repo "$verify_repo"
measure cat_file "<$work/ids" git -C "$verify_repo" cat-file --batch
ratio "(3) verify / cat-file --batch" "$(field verify 2)" "$(field cat_file 2)"

# The JSON summary.
python3 - "$results" "$info" "$work/ratios" "$work/medians" "$out" <<'PY'
import json, os, sys
results, info, ratios, medians, out = sys.argv[1:6]
def num(s):
    try:
        return int(s)
    except ValueError:
        try:
            return float(s)
        except ValueError:
            return {"true": True, "false": False}.get(s, s)
meta = {}
for line in open(info):
    k, v = line.rstrip("\n").split("=", 1)
    meta[k] = num(v)
m = {}
for line in open(results):
    name, wall, rss, user, sys_, anon, filed = line.split()
    m[name] = {"wall_s": float(wall), "cpu_s": round(float(user) + float(sys_), 2),
               "user_s": float(user), "sys_s": float(sys_), "peak_rss_kib": int(rss),
               "peak_rss_mib": round(int(rss) / 1024, 1),
               "peak_anon_rss_kib": int(anon), "peak_file_rss_kib": int(filed)}
r = {}
for line in open(ratios):
    label, a, b = line.rstrip("\n").split("\t")
    r[label] = round(float(a) / float(b), 3) if float(b) else None
def get(name, key="wall_s"):
    return m[name][key] if name in m else None
def rat(a, b):
    return round(a / b, 3) if a is not None and b else None
ev = meta["events"]
fig = {
    "1_publish_vs_fast_import": {
        "events": ev, "files": meta.get("publish_files"), "commits": meta.get("publish_commits"),
        "publish_s": get("publish"), "fast_import_s": get("fast_import"),
        "ratio": rat(get("publish"), get("fast_import")),
        "fast_import_blobs_only_s": get("fast_import_blobs_only"),
        "ratio_blobs_only": rat(get("publish"), get("fast_import_blobs_only")),
        "repo_bytes": meta.get("publish_repo_bytes"),
        "loose_objects": meta.get("publish_loose_objects"), "packs": meta.get("publish_packs"),
        "fast_import_repo_bytes": meta.get("fast_import_repo_bytes"),
    },
    "5_seal_publish": {
        "events": ev, "seal_s": get("seal"), "publish_s": get("publish"),
        "total_s": round(get("seal") + get("publish"), 2),
        "seal_cpu_s": get("seal", "cpu_s"), "publish_cpu_s": get("publish", "cpu_s"),
        "total_cpu_s": round(get("seal", "cpu_s") + get("publish", "cpu_s"), 2),
        "replay_s": get("publish_replay"), "replay_cpu_s": get("publish_replay", "cpu_s"),
        "replay_unchanged": True,
        "replay_ratio": rat(get("publish_replay"), get("publish")),
        "reference_pipeline": {
            "reference_cpu_s": 1000, "reference_events": 98362,
            "ours_cpu_s_scaled": meta["seal_publish_cpu_scaled_98362"],
            "speedup": rat(1000, meta["seal_publish_cpu_scaled_98362"]),
        },
    },
    "3_verify_vs_cat_file": {
        "events": meta.get("verify_events"), "blobs": meta.get("verify_blobs"),
        "verify_s": get("verify"), "cat_file_s": get("cat_file"),
        "ratio": rat(get("verify"), get("cat_file")),
    },
}
if os.path.exists(medians):
    med, med_cpu = {}, {}
    for line in open(medians):
        k, w, c = line.split()
        med[k[4:]], med_cpu[k[4:]] = float(w), float(c)
    runs = {s: [m[n]["wall_s"] for n in sorted(m) if n.startswith(f"inc_{s}_")]
            for s in ("empty", "mid", "large")}
    fig["2_incremental_publish"] = {
        "increment_events": meta["increment_events"],
        "base_events": {"empty": 0, "mid": meta["mid_events"], "large": meta["large_events"]},
        "median_s": med, "median_cpu_s": med_cpu, "runs_s": runs,
        "peak_rss_kib": {s: max(m[n]["peak_rss_kib"] for n in m if n.startswith(f"inc_{s}_"))
                         for s in ("empty", "mid", "large")},
        "ratio_large_mid": rat(med["large"], med["mid"]),
        "ratio_large_empty": rat(med["large"], med["empty"]),
        "ratio_large_mid_cpu": rat(med_cpu["large"], med_cpu["mid"]),
        "ratio_large_empty_cpu": rat(med_cpu["large"], med_cpu["empty"]),
        "base_cached": meta.get("base_cached"), "base_dir": meta.get("base_dir"),
        "base_repo_bytes": {"mid": meta.get("mid_repo_bytes"), "large": meta.get("large_repo_bytes")},
        "base_binary_sha256": meta.get("base_binary_sha256"),
    }
fig["4_peak_rss_kib"] = {k: v["peak_rss_kib"] for k, v in m.items()}
fig["4_peak_anon_rss_kib"] = {k: v["peak_anon_rss_kib"] for k, v in m.items()}
fig["4_peak_file_rss_kib"] = {k: v["peak_file_rss_kib"] for k, v in m.items()}
fig["4_publish_peak_rss_kib"] = {
    "whole_large_base_one_process": meta.get("publish_large_rss_kib"),
    "events_into_empty": get("publish", "peak_rss_kib"),
    "increment_into_large": meta.get("inc_large_rss_kib"),
    "large_base_packs": meta.get("large_packs"),
}
summary = {
    "schema": "action-ledger-bench.v1",
    "arguments": meta["arguments"],
    "layout": meta.get("layout"),
    "generator_version": meta["generator_version"],
    "binary": meta["binary"], "binary_sha256": meta["binary_sha256"],
    "source_commit": meta["source_commit"], "git_version": meta["git_version"],
    "nproc": meta["nproc"],
    "figures": fig, "ratios": r, "measurements": m,
}
with open(out, "w") as f:
    json.dump(summary, f, indent=2, sort_keys=False)
    f.write("\n")
PY
echo "== summary: $out"
