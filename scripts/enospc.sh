#!/usr/bin/env bash
# Out of space and I/O errors in every writer: `publish`, `compact`, `action create`,
# `action claim`, `serve` (create, claim, outcome over HTTP) and `maintain`'s migration of a
# `flat` repository (the 0.1.0 compatibility fixture) to the `hex2x2` layout.
#
# 1. Injection (runs anywhere): an LD_PRELOAD shim (scripts/enospc/shim.c, compiled here with
#    gcc into a temporary directory) fails the Nth write/pwrite/writev/fsync/fdatasync/rename/
#    mkdir/link of the writer. For each operation the script counts those calls in an unharmed
#    run, then sweeps N over every one of them, twice: ENOSPC that stays (every later call fails
#    too, a full disk) and a single EIO. After each faulted run:
#      - the exit code is 2 (the server: the request is answered 503) and the message names the
#        cause ("No space left on device" / "Input/output error"), or 0 when the fault hit only
#        advisory bookkeeping and the operation landed whole;
#      - the ref is unchanged, or holds the complete operation (a fault after the ref moved, while
#        flushing its directory, is reported as an error although the operation landed);
#      - `git fsck --strict` and `verify` are clean and no temporary file or ref lock is left;
#      - the retry, unharmed, completes, and the tree is the one an unharmed run writes.
# 2. A real full file system (only where mounting is allowed; skipped otherwise): the repository
#    on a small tmpfs filled up to a few free blocks; `publish` fails with exit 2 naming
#    ENOSPC, the ref is unchanged, and once space is freed the retry completes.
#
# usage: scripts/enospc.sh [STEP] [OP...]   (STEP: test every STEP-th injection point, default 1;
#        OPs: publish compact create claim serve migrate tmpfs, default all)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
step=${1:-1}
shift || true
ops=("$@")
[ ${#ops[@]} -gt 0 ] || ops=(publish compact create claim serve migrate tmpfs)
bin=${BIN:-${CARGO_TARGET_DIR:-$here/target}/debug/action-ledger}
[ -x "$bin" ] || (cd "$here" && cargo build --quiet)
work=$(mktemp -d)
mounted= server_pid=
cleanup() {
  [ -z "$server_pid" ] || kill -9 "$server_pid" 2>/dev/null || true
  [ -z "$mounted" ] || umount "$mounted" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
export SOURCE_DATE_EPOCH=1773100800 ACTION_LEDGER_NOW=2026-03-10T12:00:00Z
export ACTION_LEDGER_AGENT_ID=enospc-agent ACTION_LEDGER_PRINCIPAL=enospc-principal
export GIT_AUTHOR_NAME=t GIT_AUTHOR_EMAIL=t@invalid GIT_COMMITTER_NAME=t GIT_COMMITTER_EMAIL=t@invalid
op=
fail() { echo "enospc: FAIL ($op, $1): $2" >&2; exit 1; }

command -v gcc >/dev/null || { echo "enospc: SKIP: gcc is not installed"; exit 0; }
gcc -shared -fPIC -O1 -Wall -Werror -o "$work/shim.so" "$here/scripts/enospc/shim.c" -ldl
shim=$work/shim.so

tree() { git -C "$1" rev-parse -q --verify 'main^{tree}' 2>/dev/null || echo none; }
tip() { git -C "$1" rev-parse -q --verify main 2>/dev/null || echo none; }
names_cause() { grep -q 'No space left on device\|Input/output error' "$1"; }

# The number of calls the shim counts while "$@" runs unharmed.
count_calls() {
  rm -f "$work/count"
  SHIM_FAIL_AT=0 SHIM_COUNT_FILE=$work/count LD_PRELOAD=$shim "$@" >/dev/null 2>&1 || true
  cat "$work/count"
}

# The checks after a faulted run of the operation on $repo, base tip $before.
# $rc and $work/err are the run's exit code and stderr; $expected is the unharmed tree.
landed_unconfirmed=0 clean_refusals=0 advisory=0
check_after_fault() { # what
  local now
  now=$(tip "$repo")
  case $rc in
    2)
      names_cause "$work/err" || fail "$1" "the error does not name the cause: $(cat "$work/err")"
      if [ "$now" = "$before" ]; then clean_refusals=$((clean_refusals + 1)); else
        [ "$(tree "$repo")" = "$expected" ] || fail "$1" "exit 2 and the ref moved to an incomplete operation"
        landed_unconfirmed=$((landed_unconfirmed + 1))
      fi ;;
    0)
      [ "$(tree "$repo")" = "$expected" ] || fail "$1" "exit 0 but the tree is not the unharmed one"
      advisory=$((advisory + 1)) ;;
    *) fail "$1" "exit $rc: $(cat "$work/err")" ;;
  esac
  if [ "$now" != "$before" ] && [ "$before" != none ]; then
    [ "$(git -C "$repo" rev-parse main~1)" = "$before" ] || fail "$1" "the ref is not one commit on the old tip"
  fi
  git -C "$repo" fsck --strict >/dev/null 2>&1 || fail "$1" "git fsck --strict"
  if [ "$now" != none ]; then "$bin" -q verify --repo "$repo" >/dev/null || fail "$1" "verify"; fi
  # Debris: temporary objects and packs, and held locks; action-ledger/consolidate.lock is the
  # pack roll-up's flock file, which stays in place by design (it holds no content).
  local debris
  debris=$(find "$repo" -name 'tmp_al_*' -o \( -name '*.lock' ! -path '*/action-ledger/consolidate.lock' \) | head -3)
  [ -z "$debris" ] || fail "$1" "left behind: $debris"
}

# Sweeps the injection point over every counted call of "$@" (run on $repo, a fresh copy of
# $base each time), with a full disk and with a single EIO, then retries unharmed.
# $retry_ok decides whether the retry's exit code and output are a completion.
sweep_faults() {
  local total n kind
  rm -rf "$work/count.git"
  cp -a "$base" "$work/count.git"
  total=$(count_calls "${@//@REPO@/$work/count.git}")
  [ "$total" -gt 0 ] || fail count "no call was counted"
  local points=0
  for kind in ENOSPC EIO; do
    for n in $(seq 1 "$step" "$total"); do
      rm -rf "$repo"
      cp -a "$base" "$repo"
      before=$(tip "$repo")
      rc=0
      SHIM_FAIL_AT=$n SHIM_ERRNO=$kind SHIM_STICKY=$([ "$kind" = ENOSPC ] && echo 1 || echo 0) \
        LD_PRELOAD=$shim "${@//@REPO@/$repo}" >/dev/null 2>"$work/err" || rc=$?
      check_after_fault "$kind at call $n"
      rc=0
      "${@//@REPO@/$repo}" >"$work/out" 2>"$work/err" || rc=$?
      "$retry_ok" || fail "$kind at call $n" "the retry did not complete (exit $rc): $(cat "$work/err")"
      [ "$(tree "$repo")" = "$expected" ] || fail "$kind at call $n" "the retry's tree is not the unharmed one"
      points=$((points + 1))
    done
  done
  echo "enospc: $op: $total counted calls; $points injections (ENOSPC that stays, single EIO): $clean_refusals exit 2 with the ref unchanged, $landed_unconfirmed exit 2 after the ref moved (operation whole), $advisory exit 0 (advisory write failed, operation whole); fsck, verify and every retry passed"
  landed_unconfirmed=0 clean_refusals=0 advisory=0
}
retry_exit_0() { [ "$rc" -eq 0 ]; }

# The unharmed tree of "$@" on a copy of $base.
unharmed() {
  rm -rf "$work/unharmed.git"
  cp -a "$base" "$work/unharmed.git"
  "${@//@REPO@/$work/unharmed.git}" >/dev/null
  expected=$(tree "$work/unharmed.git")
}

op_publish() {
  python3 "$here/scripts/gen-ledger.py" "$work/spools" 2 2 5 >/dev/null
  "$bin" -q seal "$work"/spools/* >/dev/null
  base=$work/publish-base.git repo=$work/publish.git
  "$bin" -q publish --repo "$base" "$work/spools/spool-0000" >/dev/null
  local cmd=("$bin" -q publish --repo @REPO@ "$work/spools/spool-0001")
  unharmed "${cmd[@]}"
  retry_ok=retry_exit_0 sweep_faults "${cmd[@]}"
}

op_compact() {
  python3 "$here/scripts/gen-ledger.py" "$work/cspools" 4 2 5 >/dev/null
  "$bin" -q seal "$work"/cspools/* >/dev/null
  base=$work/compact-base.git repo=$work/compact.git
  "$bin" -q publish --repo "$base" "$work"/cspools/* >/dev/null
  local cmd=("$bin" -q compact --repo @REPO@ --retention-days 30 --now 2026-12-01)
  unharmed "${cmd[@]}"
  retry_ok=retry_exit_0 sweep_faults "${cmd[@]}"
}

op_create() {
  base=$work/create-base.git repo=$work/create.git
  "$bin" -q action create --repo "$base" --id first --guard-decision gd_first -- true >/dev/null
  local cmd=("$bin" -q action create --repo @REPO@ --id second --guard-decision gd_second -- true)
  unharmed "${cmd[@]}"
  retry_ok=retry_exit_0 sweep_faults "${cmd[@]}"
}

# A claim retried with its attempt: exit 0, or refused because that same attempt's claim landed.
retry_claim() {
  [ "$rc" -eq 0 ] || { [ "$rc" -eq 1 ] && git -C "$repo" cat-file -p "main:$(claim_path)" | grep -q enospc-attempt-0000001; }
}
# The hex2x2 layout: finality/v1/actions/<h[0:2]>/<h[2:4]>/<id> (h is the hex SHA-256 of the id).
action_dir() { echo "finality/v1/actions/$(printf %s "$1" | sha256sum | sed -E 's|^(..)(..).*|\1/\2|')/$1"; }
claim_path() { echo "$(action_dir act_claim)/claim.json"; }
op_claim() {
  base=$work/claim-base.git repo=$work/claim.git
  "$bin" -q action create --repo "$base" --id act_claim --guard-decision gd_claim -- true >/dev/null
  local cmd=("$bin" -q action claim --repo @REPO@ act_claim --attempt enospc-attempt-0000001 -- true)
  unharmed "${cmd[@]}"
  retry_ok=retry_claim sweep_faults "${cmd[@]}"
}

# maintain on a `flat` repository: the ref keeps the old layout (exit 2 naming the cause) or
# holds the whole migration; the retry migrates to the unharmed tree.
op_migrate() {
  base=$work/migrate-base.git repo=$work/migrate.git
  git init -q --bare --initial-branch=main "$base"
  git -C "$base" fast-import --quiet <"$here/testdata/compat/0.1.0/repo.fi"
  local cmd=("$bin" -q maintain --repo @REPO@)
  unharmed "${cmd[@]}"
  git -C "$work/unharmed.git" cat-file -e main:finality/v1/layout.json || fail setup "the unharmed maintain did not migrate"
  retry_ok=retry_exit_0 sweep_faults "${cmd[@]}"
}

# serve: one server per injection point, under the shim from its start; a client creates, claims
# and reports one action. A request whose write failed is answered 503 (never a false 4xx or a
# 200 for what did not land) and the server logs the cause; after SIGTERM (exit 0) the
# repository is clean, and a restarted server completes the remaining requests.
op_serve() {
  cat >"$work/client.py" <<'EOF'
import json, sys, urllib.request, urllib.error
url, mode = sys.argv[1], sys.argv[2]
act = {"kind": "shell", "command": "true"}
steps = [("POST", "/api/actions", {"action_id": "act_serve", "action_type": "build", "agent_id": "agent-1",
          "act": act, "client_capabilities": ["execution_claims"]}, (200, 201)),
         ("PATCH", "/api/actions/act_serve", {"claim_execution": True, "attempt_id": "enospc-attempt-serve-1",
          "agent_id": "agent-1", "act": act}, (200,)),
         ("POST", "/api/actions/act_serve/outcome", {"status": "completed", "attempt_id": "enospc-attempt-serve-1"}, (200,))]
out = []
for method, path, body, good in steps:
    req = urllib.request.Request(url + path, data=json.dumps(body).encode(), method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            code, answer = r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        code, answer = e.code, json.loads(e.read())
    out.append(str(code))
    if code in good:
        continue
    if mode == "faulted":
        # The first failure is a 503 and ends the sequence (the disk stays full or the write
        # is not retried by the client).
        if code != 503: sys.exit(f"{method} {path}: {code} {answer}")
        break
    # The retry after a fault: a request whose write landed although answered 503 is now a
    # replay (create: 200) or refused as done (claim: 409 with our claim in place; outcome: 409).
    if code != 409: sys.exit(f"retry {method} {path}: {code} {answer}")
print(" ".join(out))
EOF
  base=$work/serve-base.git repo=$work/serve.git
  "$bin" -q action create --repo "$base" --id warmup --guard-decision gd_w -- true >/dev/null
  # The count of an unharmed server's calls over the client's three requests.
  local total n kind points=0 refused=0 full=0
  rm -rf "$work/count.git"
  cp -a "$base" "$work/count.git"
  rm -f "$work/count"
  serve_start "$work/count.git" SHIM_FAIL_AT=0 SHIM_COUNT_FILE="$work/count"
  python3 "$work/client.py" "$url" faulted >/dev/null || fail count "unharmed client: $(cat "$work/serve.err")"
  serve_stop count
  total=$(cat "$work/count")
  for kind in ENOSPC EIO; do
    for n in $(seq 1 "$step" "$total"); do
      rm -rf "$repo"
      cp -a "$base" "$repo"
      before=$(tip "$repo")
      serve_start "$repo" SHIM_FAIL_AT="$n" SHIM_ERRNO="$kind" SHIM_STICKY="$([ "$kind" = ENOSPC ] && echo 1 || echo 0)"
      [ -n "$url" ] || fail "$kind at call $n" "the server did not start: $(cat "$work/serve.err")"
      local codes
      codes=$(python3 "$work/client.py" "$url" faulted 2>"$work/client.err") || fail "$kind at call $n" "$(cat "$work/client.err")"
      case "$codes" in *503*)
        refused=$((refused + 1))
        names_cause "$work/serve.err" || fail "$kind at call $n" "the server did not log the cause: $(cat "$work/serve.err")" ;;
      *) full=$((full + 1)) ;;
      esac
      serve_stop "$kind at call $n"
      git -C "$repo" fsck --strict >/dev/null 2>&1 || fail "$kind at call $n" "git fsck --strict"
      "$bin" -q verify --repo "$repo" >/dev/null || fail "$kind at call $n" "verify"
      local debris
      debris=$(find "$repo" -name 'tmp_al_*' -o \( -name '*.lock' ! -path '*/action-ledger/consolidate.lock' \) | head -3)
      [ -z "$debris" ] || fail "$kind at call $n" "left behind: $debris"
      serve_start "$repo"
      python3 "$work/client.py" "$url" retry >/dev/null 2>"$work/client.err" || fail "$kind at call $n" "the retry: $(cat "$work/client.err")"
      serve_stop "$kind at call $n, the retry"
      local p
      p=$(action_dir act_serve)
      git -C "$repo" cat-file -p "main:$p/claim.json" | grep -q enospc-attempt-serve-1 || fail "$kind at call $n" "no claim after the retry"
      git -C "$repo" cat-file -p "main:$p/outcome.json" | grep -q '"status":"completed"' || fail "$kind at call $n" "no outcome after the retry"
      points=$((points + 1))
    done
  done
  echo "enospc: serve: $total counted calls; $points injections (ENOSPC that stays, single EIO): $refused answered 503 with the cause logged, $full served whole (advisory write failed); fsck, verify and every retry through a restarted server passed"
}
serve_start() { # repo, shim settings...
  local r=$1
  shift
  : >"$work/serve.out"
  if [ $# -gt 0 ]; then
    env "$@" LD_PRELOAD="$shim" "$bin" serve --repo "$r" --listen 127.0.0.1:0 --insecure-no-auth --json \
      >"$work/serve.out" 2>"$work/serve.err" &
  else
    "$bin" serve --repo "$r" --listen 127.0.0.1:0 --insecure-no-auth --json >"$work/serve.out" 2>"$work/serve.err" &
  fi
  server_pid=$!
  url=
  for _ in $(seq 500); do
    grep -q '"listening"' "$work/serve.out" 2>/dev/null && break
    kill -0 "$server_pid" 2>/dev/null || break
    sleep 0.01
  done
  url=$(sed -n 's/.*"url":"\([^"]*\)".*/\1/p' "$work/serve.out")
}
serve_stop() { # what
  kill -TERM "$server_pid"
  local rc=0
  wait "$server_pid" || rc=$?
  server_pid=
  [ "$rc" -eq 0 ] || fail "$1" "the server exited $rc after SIGTERM: $(tail -3 "$work/serve.err")"
}

# A real full file system: a 4 MiB tmpfs (root and mount(8) needed; skipped otherwise).
op_tmpfs() {
  local mnt=$work/mnt
  mkdir -p "$mnt"
  if ! mount -t tmpfs -o size=4m tmpfs "$mnt" 2>/dev/null; then
    echo "enospc: tmpfs: SKIP: cannot mount a tmpfs here (the shim above covers the same faults)"
    return
  fi
  mounted=$mnt
  python3 "$here/scripts/gen-ledger.py" "$work/tspools" 2 4 40 >/dev/null
  "$bin" -q seal "$work"/tspools/* >/dev/null
  local tries=0 refused=0 free
  for free in 4 8 16 32 64 96 128; do
    rm -rf "${mnt:?}"/*
    repo=$mnt/state.git
    "$bin" -q publish --repo "$repo" "$work/tspools/spool-0000" >/dev/null
    before=$(tip "$repo")
    # Fill the file system up to $free KiB.
    dd if=/dev/zero of="$mnt/filler" bs=1k count=8192 2>/dev/null || true
    rm -f "$mnt/filler"
    local avail
    avail=$(df -k --output=avail "$mnt" | tail -1)
    dd if=/dev/zero of="$mnt/filler" bs=1k count=$((avail - free)) 2>/dev/null || true
    rc=0
    "$bin" -q publish --repo "$repo" "$work/tspools/spool-0001" >/dev/null 2>"$work/err" || rc=$?
    tries=$((tries + 1))
    op=tmpfs
    if [ "$rc" -ne 0 ]; then
      [ "$rc" -eq 2 ] || fail "$free KiB free" "exit $rc: $(cat "$work/err")"
      names_cause "$work/err" || fail "$free KiB free" "the error does not name the cause: $(cat "$work/err")"
      [ "$(tip "$repo")" = "$before" ] || fail "$free KiB free" "the ref moved"
      refused=$((refused + 1))
    fi
    git -C "$repo" fsck --strict >/dev/null 2>&1 || fail "$free KiB free" "git fsck --strict"
    "$bin" -q verify --repo "$repo" >/dev/null || fail "$free KiB free" "verify"
    rm -f "$mnt/filler"
    "$bin" -q publish --repo "$repo" "$work/tspools/spool-0001" >/dev/null 2>"$work/err" ||
      fail "$free KiB free" "the retry after freeing space: $(cat "$work/err")"
    "$bin" -q verify --repo "$repo" >/dev/null || fail "$free KiB free" "verify after the retry"
  done
  umount "$mnt"
  mounted=
  echo "enospc: tmpfs: $tries publications on a full 4 MiB tmpfs ($refused refused with exit 2 naming ENOSPC, the rest fit); ref unchanged, fsck and verify clean, every retry after freeing space completed"
}

for op in "${ops[@]}"; do
  case "$op" in
    publish | compact | create | claim | serve | migrate | tmpfs) "op_$op" ;;
    *) echo "enospc: unknown operation $op (publish compact create claim serve migrate tmpfs)" >&2; exit 2 ;;
  esac
done
echo "enospc: ${ops[*]}: all passed"
