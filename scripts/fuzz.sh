#!/usr/bin/env bash
# Coverage-guided fuzzing (cargo-fuzz on the nightly toolchain) of the readers of untrusted
# input: the canonical parser, the event reader, shard parsing, spool reading from a generated
# directory, serve's request handling (raw request bytes through the router in process), and
# verify over a generated tree of files committed into a new repository.
#
# usage: scripts/fuzz.sh [SECONDS] [TARGET...]   (default 10 seconds, every target)
#
# Each target runs SECONDS seconds from a corpus seeded with the day1 corpus, the conformance
# vectors and the regression inputs of testdata/fuzz/<target>/. Corpus, artifacts and build
# output stay outside the checkout. A crash fails the script and names the input to commit as
# testdata/fuzz/<target>/<name> (replayed by `cargo test --lib fuzz_regressions`).
# Without the nightly toolchain or cargo-fuzz it prints "skip: ..." and exits 0.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
seconds=${1:-10}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(canonical event_line shard spool serve verify)

if ! cargo +nightly --version >/dev/null 2>&1; then
  echo "skip: fuzzing needs the nightly toolchain (rustup toolchain install nightly)"
  exit 0
fi
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
  echo "skip: fuzzing needs cargo-fuzz (cargo install cargo-fuzz)"
  exit 0
fi

work=$(mktemp -d)
trap '[ -n "${FUZZ_DEBUG:-}" ] || rm -rf "$work"' EXIT
target_dir=${CARGO_TARGET_DIR:-$here/target}/fuzz
# cargo fuzz's own options go before the target: whatever follows `--` goes to libFuzzer.
fuzz() {
  local sub=$1
  shift
  (cd "$here" && cargo +nightly fuzz "$sub" --fuzz-dir scripts/fuzz --target-dir "$target_dir" "$@")
}

echo "fuzz: building ${targets[*]}"
for t in "${targets[@]}"; do fuzz build -O "$t" >/dev/null; done

# Seeds: a few real inputs of each kind (libFuzzer mutates from there).
seed() { mkdir -p "$work/seed/$1"; }
for t in canonical event_line shard spool serve verify; do seed "$t"; done
day1="$here/testdata/corpus/day1"
mapfile -t events < <(find "$day1/spools" -name '*.json' -path '*action-events/*' | sort | head -n 20)
mapfile -t shards < <(find "$day1/shards" -name '*.jsonl' | sort | head -n 10)
i=0
for f in "${events[@]}"; do
  i=$((i + 1))
  head -c -1 "$f" >"$work/seed/event_line/$i"
  cp "$f" "$work/seed/canonical/e$i"
  # spool entry: kind 0 (file), path, NUL, content
  { printf '\0%s\0' "${f#*action-events/}"; cat "$f"; } >"$work/seed/spool/$i"
done
for f in "$here"/testdata/conformance/*.json; do cp "$f" "$work/seed/canonical/$(basename "$f")"; done
i=0
for f in "${shards[@]}"; do
  i=$((i + 1))
  { echo "${f#*/shards/*/}"; cat "$f"; } >"$work/seed/shard/$i"
done
# verify trees: entries separated by 0xFF, kind 0 (a file at its path), path, NUL, content. The
# shards of a few day1 jobs (no bindings, so verify finds the missing ones).
i=0
for job in $(find "$day1/shards" -mindepth 1 -maxdepth 1 -type d | sort | head -n 3); do
  i=$((i + 1))
  first=1
  while IFS= read -r f; do
    [ "$first" = 1 ] || printf '\377'
    first=0
    printf '\0%s\0' "${f#"$job"/}"
    cat "$f"
  done < <(find "$job" -name '*.jsonl' -size -8k | sort | head -n 4) >"$work/seed/verify/$i"
done
printf 'GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n' >"$work/seed/serve/health"
body='{"action_type":"deploy","declared_goal":"ship","agent_id":"a1"}'
printf 'POST /api/actions HTTP/1.1\r\nhost: x\r\nx-api-key: k-bot\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s' \
  "${#body}" "$body" >"$work/seed/serve/create"
printf 'GET /api/actions/a1 HTTP/1.1\r\nhost: x\r\nx-api-key: k-bot\r\n\r\n' >"$work/seed/serve/show"
printf 'GET /api/cron/outcome-sweep HTTP/1.1\r\nhost: x\r\nauthorization: Bearer cron-secret\r\n\r\n' >"$work/seed/serve/sweep"

failed=0
for t in "${targets[@]}"; do
  mkdir -p "$work/corpus/$t" "$work/artifacts/$t"
  regress="$here/testdata/fuzz/$t"
  dirs=("$work/corpus/$t" "$work/seed/$t")
  [ -d "$regress" ] && dirs+=("$regress")
  log="$work/$t.log"
  if fuzz run -O "$t" "${dirs[@]}" -- -max_total_time="$seconds" -max_len=65536 \
    -artifact_prefix="$work/artifacts/$t/" -print_final_stats=1 >"$log" 2>&1; then
    execs=$(grep -m1 'stat::number_of_executed_units' "$log" | awk '{print $2}')
    cov=$(grep -Eo 'cov: [0-9]+' "$log" | tail -n 1 || true)
    echo "fuzz: $t ok: ${execs:-?} execs in ${seconds}s, ${cov:-cov: ?}"
  else
    failed=1
    echo "fuzz: $t FAILED; the input that crashed it:" >&2
    found=0
    for a in "$work/artifacts/$t"/*; do
      [ -f "$a" ] || continue
      keep=${FUZZ_KEEP:-/tmp}/fuzz-$t-$(basename "$a")
      cp "$a" "$keep"
      echo "  $keep (commit as testdata/fuzz/$t/<name>)" >&2
      found=1
    done
    if [ "$found" = 1 ]; then
      grep -E 'panicked|ERROR|SUMMARY' "$log" | head -n 20 >&2 || true
    else
      # No crash input: the fuzzer itself did not run. Show why.
      echo "  none (the fuzzer did not run; the end of its log follows)" >&2
      tail -n 20 "$log" >&2
    fi
  fi
done
exit "$failed"
