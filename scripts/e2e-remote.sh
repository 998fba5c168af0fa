#!/usr/bin/env bash
# The writers against the Git servers users really publish through, started by this script on
# 127.0.0.1, each serving a bare repository with the pre-receive hook installed:
#
#   http    `git http-backend` behind lighttpd with basic auth (smart HTTP). The token reaches
#           git outside the URL: a credential helper, GIT_ASKPASS and an http.extraHeader
#           (all three from the environment, through GIT_CONFIG_*). No credentials, a wrong
#           token and a revoked token fail as authentication errors that say what to do, exit
#           non-zero and change nothing; no token ever reaches an output.
#   ssh     sshd with a key (a SKIP line says why when sshd cannot be installed or started).
#   faults  a TCP proxy (scripts/faultproxy.py) between the tool and the HTTP server cuts one
#           push at CUTS points spread over all its bytes (and at 1 byte), resets it, delays
#           it, stalls it past ACTION_LEDGER_REMOTE_TIMEOUT, and answers 500 and 401. After each
#           fault: the remote holds the old tip or the whole publication, the error names its
#           cause, the same cache publishes again and converges, and `verify` is clean.
#
# On http and ssh, `publish`, `action`, `run`, `sweep`, `compact` and `serve --remote` land
# their commits, 16 publishers publish at once from 16 caches, and at the end every
# acknowledged publication is still whole on the server (a replay from a fresh cache is
# `unchanged`), `verify` and `git fsck --strict` are clean.
#
# usage: scripts/e2e-remote.sh [http|ssh|faults|all] [CUTS]   (defaults: all 24)
#        (BIN=path/to/action-ledger to choose the binary)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
mode=${1:-all} cuts=${2:-24}
bin=${BIN:-${CARGO_TARGET_DIR:-$here/target}/debug/action-ledger}
[ -x "$bin" ] || (cd "$here" && cargo build --quiet)
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  [ -n "${KEEP:-}" ] && echo "kept $work" || rm -rf "$work"
}
trap cleanup EXIT
export SOURCE_DATE_EPOCH=1773100800 GIT_TERMINAL_PROMPT=0 ACTION_LEDGER_AGENT_ID=agent-1 ACTION_LEDGER_PRINCIPAL=principal-1
export GIT_CONFIG_NOSYSTEM=1 HOME="$work/home" # no credential helper of this machine's user
mkdir -p "$HOME" "$work/out"
fail() { echo "e2e-remote: FAIL: $*" >&2; exit 1; }
ok() { echo "e2e-remote: ok: $*"; }
began=$SECONDS
# A fresh random token per run: finding it in an output cannot be a coincidence.
token="tok$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')"
export LEDGER_TOKEN="$token"

# free_port, have, wait_for, start_git_http.
# shellcheck source=scripts/lib-git-http.sh
. "$here/scripts/lib-git-http.sh"
# Each command's stdout and stderr are kept under out/, where the token must never appear.
al() { # label, args...: runs the tool, output in out/<label>.{out,err}; returns its status
  local label=$1; shift
  "$bin" "$@" >"$work/out/$label.out" 2>"$work/out/$label.err"
}
last_err() { cat "$work/out/$1.err"; }
last_out() { cat "$work/out/$1.out"; }

# Sources: the day1 spools (real producer data, about 1 MB each) and small generated ones.
cp -r "$here/testdata/corpus/day1/spools" "$work/day1"
day1=($(ls "$work/day1"))
python3 "$here/scripts/gen-ledger.py" "$work/small" $((cuts + 12)) 1 4
"$bin" -q seal "$work"/small/* >/dev/null
stale=$(date -u -d '-16 minutes' +%Y-%m-%dT%H:%M:%SZ)

new_server() { # dir: a bare repository with the hook (naming this binary) and receive.* rules
  "$bin" -q hooks install --repo "$1" --bin "$bin" >/dev/null
}

# ---------------------------------------------------------------------------------------------
# The HTTP server: lighttpd, basic auth, git http-backend as CGI.
start_http() {
  mkdir -p "$work/http/srv"
  new_server "$work/http/srv/server.git"
  printf 'ledger:%s\n' "$token" >"$work/http/users"
  start_git_http "$work/http" "$work/http/users" || return 1
  wait_for lighttpd env GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=http.extraHeader \
    GIT_CONFIG_VALUE_0="Authorization: Basic $(printf 'ledger:%s' "$token" | base64 -w0)" \
    git ls-remote "http://127.0.0.1:$http_port/git/server.git"
}

# The ways CI hands git a token without putting it in the URL, as environment assignments.
askpass="$work/askpass.sh"
printf '#!/bin/sh\ncase "$1" in Username*) echo ledger ;; *) echo "$LEDGER_TOKEN" ;; esac\n' >"$askpass"
chmod +x "$askpass"
cred_helper=(GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=credential.helper
  'GIT_CONFIG_VALUE_0=!f() { test "$1" = get && printf "username=ledger\npassword=%s\n" "$LEDGER_TOKEN"; }; f')
cred_askpass=(GIT_ASKPASS="$askpass")
cred_header=(GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=http.extraHeader
  "GIT_CONFIG_VALUE_0=Authorization: Basic $(printf 'ledger:%s' "$token" | base64 -w0)")

# ---------------------------------------------------------------------------------------------
# The writers through one transport; the caller exports its credentials.
# finality/v1/actions/<h[0:2]>/<h[2:4]>/<id> (the hex2x2 layout; h is the hex SHA-256 of the id).
record_path() { echo "finality/v1/actions/$(printf %s "$1" | sha256sum | sed -E 's|^(..)(..).*|\1/\2|')/$1"; }
server_has() { # git dir, path, pattern
  git -C "$1" cat-file -p "refs/heads/main:$2" 2>/dev/null | grep -q "$3"
}

writers() { # label, url, server git dir (a local path, for the checks); credentials exported
  local label=$1 url=$2 srv=$3 c=$work/$1
  mkdir -p "$c"
  local t=$SECONDS
  al "$label-publish" -q publish --json --repo "$c/publisher.git" --remote "$url" "$work/day1/${day1[0]}" \
    || fail "$label: publish: $(last_err "$label-publish")"
  last_out "$label-publish" | grep -q '"status":"created"' || fail "$label: publish created nothing: $(last_out "$label-publish")"
  al "$label-replay" -q publish --json --repo "$c/replayer.git" --remote "$url" "$work/day1/${day1[0]}" \
    || fail "$label: replay: $(last_err "$label-replay")"
  last_out "$label-replay" | grep -q '"status":"unchanged"' || fail "$label: a replay from a fresh cache changed something"
  ok "$label: publish lands through the hook; a replay from a fresh cache is unchanged"

  al "$label-create" -q action create --remote "$url" --repo "$c/creator.git" --id "act_${label}_run" --guard-decision gd_run -- true \
    || fail "$label: action create: $(last_err "$label-create")"
  al "$label-claim-create" -q action create --remote "$url" --repo "$c/creator.git" --id "act_${label}_claim" --guard-decision gd_claim -- true \
    || fail "$label: action create: $(last_err "$label-claim-create")"
  al "$label-claim" -q action claim --json --remote "$url" --repo "$c/claimer.git" "act_${label}_claim" --attempt "attempt-$label-0000000000" -- true \
    || fail "$label: action claim: $(last_err "$label-claim")"
  al "$label-outcome" -q action outcome --remote "$url" --repo "$c/claimer.git" "act_${label}_claim" --attempt "attempt-$label-0000000000" completed \
    || fail "$label: action outcome: $(last_err "$label-outcome")"
  server_has "$srv" "$(record_path "act_${label}_claim")/outcome.json" '"status":"completed"' \
    || fail "$label: action outcome did not land on the server"
  al "$label-run" -q run --remote "$url" --repo "$c/runner.git" --action "act_${label}_run" -- true \
    || fail "$label: run: $(last_err "$label-run")"
  server_has "$srv" "$(record_path "act_${label}_run")/outcome.json" '"status":"completed"' \
    || fail "$label: run did not record its outcome on the server"
  ok "$label: action create, claim, outcome and run land"

  env ACTION_LEDGER_NOW="$stale" "$bin" -q action create --remote "$url" --repo "$c/creator.git" --id "act_${label}_stale" --guard-decision gd_st -- true \
    >/dev/null 2>"$work/out/$label-stale.err" || fail "$label: stale create: $(cat "$work/out/$label-stale.err")"
  # The sweeper's cache never saw the action: its first sweep only remembers it (the timeout is
  # measured on the sweeper's clock from then), one more than the timeout later sweeps it.
  al "$label-sweep-sees" -q sweep --json --remote "$url" --repo "$c/sweeper.git" || fail "$label: sweep: $(last_err "$label-sweep-sees")"
  last_out "$label-sweep-sees" | grep -q '"swept":0' || fail "$label: a first sighting was swept: $(last_out "$label-sweep-sees")"
  ACTION_LEDGER_NOW="$(date -u -d '+16 minutes' +%Y-%m-%dT%H:%M:%SZ)" \
    al "$label-sweep" -q sweep --json --remote "$url" --repo "$c/sweeper.git" || fail "$label: sweep: $(last_err "$label-sweep")"
  last_out "$label-sweep" | grep -q "act_${label}_stale" || fail "$label: sweep did not sweep the stale action: $(last_out "$label-sweep")"
  server_has "$srv" "$(record_path "act_${label}_stale")/outcome.json" '"status":"lost_confirmation"' \
    || fail "$label: the sweep did not land on the server"
  al "$label-compact" -q compact --json --remote "$url" --repo "$c/compactor.git" --now 2026-05-01 --retention-days 1 \
    || fail "$label: compact: $(last_err "$label-compact")"
  last_out "$label-compact" | grep -q '"status":"created"' || fail "$label: compact made no commit: $(last_out "$label-compact")"
  git -C "$srv" ls-tree -r --name-only refs/heads/main | grep -q '^ledger/v1/segments/2026/03/' \
    || fail "$label: compact left no segment on the server"
  ok "$label: sweep and compact land"

  # serve --remote: the group commits of a server push through the same transport.
  "$bin" -q serve --repo "$c/serve.git" --remote "$url" --listen 127.0.0.1:0 --insecure-no-auth --json \
    >"$work/out/$label-serve.out" 2>"$work/out/$label-serve.err" &
  local serve_pid=$!
  pids+=($serve_pid)
  local surl=
  for _ in $(seq 100); do
    surl=$(grep -o '"url":"[^"]*"' "$work/out/$label-serve.out" 2>/dev/null | cut -d'"' -f4 || true)
    [ -n "$surl" ] && break
    kill -0 "$serve_pid" 2>/dev/null || break
    sleep 0.1
  done
  [ -n "$surl" ] || fail "$label: serve --remote did not start: $(cat "$work/out/$label-serve.err")"
  timeout 60 python3 - "$surl" "act_${label}_serve" <<'PY' || fail "$label: serve --remote did not serve a create, claim and outcome"
import json, sys, urllib.request
url, aid = sys.argv[1], sys.argv[2]
def call(m, p, b):
    r = urllib.request.urlopen(urllib.request.Request(url + p, data=json.dumps(b).encode(), method=m,
        headers={"Content-Type": "application/json"}), timeout=30)
    return r.status
act = {"kind": "shell", "command": "true"}
assert call("POST", "/api/actions", {"action_id": aid, "action_type": "b", "agent_id": "agent-1", "act": act,
    "client_capabilities": ["execution_claims"]}) == 201
assert call("PATCH", f"/api/actions/{aid}", {"claim_execution": True, "attempt_id": "attempt-serve-0000000000", "agent_id": "agent-1", "act": act}) == 200
assert call("POST", f"/api/actions/{aid}/outcome", {"status": "completed", "attempt_id": "attempt-serve-0000000000"}) == 200
PY
  kill -TERM "$serve_pid"
  wait "$serve_pid" || fail "$label: serve --remote did not stop cleanly: $(cat "$work/out/$label-serve.err")"
  server_has "$srv" "$(record_path "act_${label}_serve")/outcome.json" '"status":"completed"' \
    || fail "$label: serve --remote did not land its outcome on the server"
  ok "$label: serve --remote lands a create, claim and outcome"

  # 16 publishers at once, each from its own cache (its own machine), 16 distinct spools.
  local ps=() i
  for i in $(seq 1 16); do
    "$bin" -q publish --json --repo "$c/machine-$i.git" --remote "$url" "$work/day1/${day1[$i]}" \
      >"$work/out/$label-conc-$i.out" 2>"$work/out/$label-conc-$i.err" &
    ps+=($!)
  done
  for i in $(seq 1 16); do
    wait "${ps[$((i - 1))]}" || fail "$label: concurrent publisher $i: $(cat "$work/out/$label-conc-$i.err")"
  done
  local retries
  retries=$(cat "$work/out/$label"-conc-*.out | python3 -c 'import json,sys; print(sum(json.loads(l)["attempts"] - 1 for l in sys.stdin if l.strip()))')
  for i in $(seq 0 16); do
    al "$label-check-$i" -q publish --json --repo "$c/checker.git" --remote "$url" "$work/day1/${day1[$i]}" \
      || fail "$label: replay of ${day1[$i]}: $(last_err "$label-check-$i")"
    last_out "$label-check-$i" | grep -q '"status":"unchanged"' || fail "$label: ${day1[$i]} is not whole on the server"
  done
  ok "$label: 16 concurrent publishers all acknowledged ($retries rebuilds on a moved remote), each publication whole on the server"

  "$bin" -q verify --repo "$srv" >"$work/out/$label-verify.out" 2>&1 || fail "$label: verify of the server: $(cat "$work/out/$label-verify.out")"
  git -C "$srv" fsck --strict --no-dangling >/dev/null 2>&1 || fail "$label: git fsck --strict of the server"
  ok "$label: verify and git fsck --strict are clean ($((SECONDS - t)) s)"
}

# ---------------------------------------------------------------------------------------------
run_http() {
  start_http || { echo "e2e-remote: SKIP http: lighttpd is not installed and cannot be (apt-get as root)"; return 0; }
  local url="http://127.0.0.1:$http_port/git/server.git" srv=$work/http/srv/server.git
  export "${cred_helper[@]}"
  writers http "$url" "$srv"
  unset GIT_CONFIG_COUNT GIT_CONFIG_KEY_0 GIT_CONFIG_VALUE_0

  # The other two ways to hand git the token, each landing a publication of its own.
  env "${cred_askpass[@]}" "$bin" -q publish --json --repo "$work/askpass.git" --remote "$url" "$work/day1/${day1[17]}" \
    >"$work/out/askpass.out" 2>"$work/out/askpass.err" || fail "publish with GIT_ASKPASS: $(cat "$work/out/askpass.err")"
  grep -q '"status":"created"' "$work/out/askpass.out" || fail "GIT_ASKPASS: nothing created"
  env "${cred_header[@]}" "$bin" -q publish --json --repo "$work/header.git" --remote "$url" "$work/day1/${day1[18]}" \
    >"$work/out/header.out" 2>"$work/out/header.err" || fail "publish with http.extraHeader: $(cat "$work/out/header.err")"
  grep -q '"status":"created"' "$work/out/header.out" || fail "http.extraHeader: nothing created"
  ok "http: GIT_ASKPASS and an http.extraHeader from the environment authenticate too"

  # Refused credentials: exit non-zero, an authentication error that says what to do, the
  # server unchanged. A token in the URL is the user's choice, but never shown.
  local tip i
  tip=$(git -C "$srv" rev-parse main)
  for how in none wrong-url right-url-wrong-helper; do
    case $how in
      none) args=(--remote "$url") envs=() ;;
      wrong-url) args=(--remote "http://ledger:wrong${token}@127.0.0.1:$http_port/git/server.git") envs=() ;;
      right-url-wrong-helper) args=(--remote "$url") envs=(GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=credential.helper
        "GIT_CONFIG_VALUE_0=!f() { test \"\$1\" = get && printf \"username=ledger\npassword=revoked-%s\n\" \"\$LEDGER_TOKEN\"; }; f") ;;
    esac
    set +e
    env "${envs[@]}" "$bin" publish --repo "$work/refused-$how.git" "${args[@]}" "$work/day1/${day1[19]}" \
      >"$work/out/refused-$how.out" 2>"$work/out/refused-$how.err"
    rc=$?
    set -e
    [ "$rc" -ne 0 ] || fail "publish with $how credentials exited 0"
    grep -q "authentication failed" "$work/out/refused-$how.err" || fail "$how credentials: no authentication cause: $(cat "$work/out/refused-$how.err")"
    grep -q "credential helper, GIT_ASKPASS or http.extraHeader" "$work/out/refused-$how.err" || fail "$how credentials: the error does not say what to do"
    [ "$(git -C "$srv" rev-parse main)" = "$tip" ] || fail "$how credentials moved the server ref"
  done
  # A token in the URL that the server accepts: it lands and the printed remote hides it.
  env -u LEDGER_TOKEN "$bin" publish --repo "$work/in-url.git" --remote "http://ledger:$token@127.0.0.1:$http_port/git/server.git" "$work/day1/${day1[19]}" \
    >"$work/out/in-url.out" 2>"$work/out/in-url.err" || fail "publish with the token in the URL: $(sed "s/$token/TOKEN/g" "$work/out/in-url.err")"
  grep -q 'http://\*\*\*@127.0.0.1' "$work/out/in-url.out" || fail "the published-to line does not show the redacted remote: $(sed "s/$token/TOKEN/g" "$work/out/in-url.out")"
  ok "http: no, wrong and revoked credentials exit non-zero with an authentication error saying what to do, server unchanged"
}

run_ssh() {
  if ! have sshd openssh-server || ! have ssh openssh-client || ! command -v ssh-keygen >/dev/null; then
    echo "e2e-remote: SKIP ssh: sshd or ssh is not installed and cannot be (apt-get as root)"
    return 0
  fi
  local d=$work/ssh port user
  port=$(free_port) user=$(id -un)
  mkdir -p "$d"
  ssh-keygen -q -t ed25519 -N '' -f "$d/host_key"
  ssh-keygen -q -t ed25519 -N '' -f "$d/user_key"
  cp "$d/user_key.pub" "$d/authorized_keys"
  chmod 600 "$d/authorized_keys"
  new_server "$d/server.git"
  cat >"$d/sshd_config" <<EOF
Port $port
ListenAddress 127.0.0.1
HostKey $d/host_key
AuthorizedKeysFile $d/authorized_keys
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
StrictModes no
UsePAM no
MaxStartups 64
MaxSessions 64
PidFile $d/sshd.pid
LogLevel ERROR
EOF
  # sshd needs its privilege separation directory (root-owned); only root can make it.
  [ -d /run/sshd ] || { [ "$(id -u)" = 0 ] && mkdir -p /run/sshd && chmod 755 /run/sshd; } || true
  if ! "$(command -v sshd)" -t -f "$d/sshd_config" 2>"$d/sshd-t.err"; then
    echo "e2e-remote: SKIP ssh: sshd refuses to start here: $(head -1 "$d/sshd-t.err")"
    return 0
  fi
  "$(command -v sshd)" -D -e -f "$d/sshd_config" 2>"$d/sshd.log" &
  local sshd_pid=$!
  pids+=($sshd_pid)
  export GIT_SSH_COMMAND="ssh -i $d/user_key -o IdentitiesOnly=yes -o BatchMode=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=$d/known_hosts -o LogLevel=ERROR -p $port"
  local url="ssh://$user@127.0.0.1:$port$d/server.git"
  for _ in $(seq 100); do git ls-remote "$url" >/dev/null 2>&1 && break; kill -0 "$sshd_pid" 2>/dev/null || break; sleep 0.1; done
  if ! git ls-remote "$url" >/dev/null 2>"$d/probe.err"; then
    echo "e2e-remote: SKIP ssh: sshd on 127.0.0.1 does not accept the key here: $(head -1 "$d/probe.err") $(head -1 "$d/sshd.log")"
    unset GIT_SSH_COMMAND
    return 0
  fi
  writers ssh "$url" "$d/server.git"
  # A key the server does not know: an authentication error, the server unchanged.
  ssh-keygen -q -t ed25519 -N '' -f "$d/other_key"
  local tip
  tip=$(git -C "$d/server.git" rev-parse main)
  if GIT_SSH_COMMAND="${GIT_SSH_COMMAND/$d\/user_key/$d/other_key}" "$bin" publish --repo "$work/ssh-refused.git" --remote "$url" \
    "$work/day1/${day1[20]}" >"$work/out/ssh-refused.out" 2>"$work/out/ssh-refused.err"; then
    fail "ssh: a publish with an unknown key exited 0"
  fi
  grep -q "authentication failed" "$work/out/ssh-refused.err" || fail "ssh: unknown key: no authentication cause: $(cat "$work/out/ssh-refused.err")"
  [ "$(git -C "$d/server.git" rev-parse main)" = "$tip" ] || fail "ssh: the refused publish moved the server ref"
  ok "ssh: an unknown key exits non-zero with an authentication error, server unchanged"
  unset GIT_SSH_COMMAND
}

# ---------------------------------------------------------------------------------------------
# Faults on the wire, between the tool and the HTTP server.
proxy_pid= proxy_port=
start_proxy() { # fault [stats file]
  rm -f "$work/proxy.port"
  python3 "$here/scripts/faultproxy.py" "$work/proxy.port" "$http_port" "$@" &
  proxy_pid=$!
  pids+=($proxy_pid)
  for _ in $(seq 100); do [ -s "$work/proxy.port" ] && break; sleep 0.05; done
  [ -s "$work/proxy.port" ] || fail "the fault proxy did not start"
  proxy_port=$(cat "$work/proxy.port")
}
stop_proxy() { kill "$proxy_pid" 2>/dev/null || true; wait "$proxy_pid" 2>/dev/null || true; }

run_faults() {
  [ -n "$http_port" ] || start_http || { echo "e2e-remote: SKIP faults: lighttpd is not installed and cannot be (apt-get as root)"; return 0; }
  # A repository of its own, so that the cut points fall on one publication's exchange and not
  # on the fetch of everything the http suite published before.
  local srv=$work/http/srv/faults.git t=$SECONDS
  local direct="http://127.0.0.1:$http_port/git/faults.git"
  new_server "$srv"
  export "${cred_helper[@]}"
  # The bytes of one whole publication (ls-remote, fetch of the tip, push) through the proxy.
  start_proxy pass "$work/proxy.stats"
  al fault-measure -q publish --json --repo "$work/fault-measure.git" --remote "http://127.0.0.1:$proxy_port/git/faults.git" "$work/small/spool-0000" \
    || fail "a publish through the passing proxy: $(last_err fault-measure)"
  stop_proxy
  local total
  total=$(cut -d' ' -f1 "$work/proxy.stats")
  [ "$total" -gt 1000 ] || fail "the proxy saw only $total bytes of a publication"
  # The faults: a cut at 1 byte and at CUTS points spread over the whole exchange, a reset,
  # a delay, a stall past the time limit, and the server answering 500 and 401.
  local faults=("cut:1") k
  for k in $(seq 1 "$cuts"); do faults+=("cut:$((total * k / (cuts + 1)))"); done
  faults+=("reset:$((total / 2))" "reset:$((total * 9 / 10))" "delay:20" "stall:$((total / 2))" "stall:$((total - 200))"
    "http:500:git-receive-pack" "http:500:info/refs" "http:502:git-receive-pack" "http-all:401")
  local i=0 landed=0 failed=0 fault spool before after rc cause unnamed=()
  for fault in "${faults[@]}"; do
    i=$((i + 1))
    spool=$work/small/$(printf spool-%04d "$i")
    before=$(git -C "$srv" rev-parse main)
    start_proxy "$fault" "$work/proxy.stats"
    set +e
    ACTION_LEDGER_REMOTE_TIMEOUT=3 "$bin" publish --json --repo "$work/fault-$i.git" --remote "http://127.0.0.1:$proxy_port/git/faults.git" "$spool" \
      >"$work/out/fault-$i.out" 2>"$work/out/fault-$i.err"
    rc=$?
    set -e
    stop_proxy
    after=$(git -C "$srv" rev-parse main)
    grep -q panicked "$work/out/fault-$i.err" && fail "$fault: the tool panicked: $(cat "$work/out/fault-$i.err")"
    if [ "$rc" = 0 ]; then
      [ "$after" != "$before" ] && [ "$(git -C "$srv" rev-parse "$after^")" = "$before" ] || fail "$fault: exit 0 but the publication is not the server's new tip"
      landed=$((landed + 1))
    else
      [ "$rc" = 2 ] || fail "$fault: exit $rc (a transport failure exits 2): $(cat "$work/out/fault-$i.err")"
      case $fault in
        http:5*) cause="server error" ;;
        http-all:401) cause="authentication failed" ;;
        stall:*) cause="did not finish within 3 s" ;;
        *) cause="network failure" ;;
      esac
      # Every fault is tried before failing on an unnamed cause, so one run lists them all.
      grep -q "$cause" "$work/out/fault-$i.err" && grep -q "run the same command again" "$work/out/fault-$i.err" \
        || unnamed+=("$fault (expected '$cause' and what to do): $(cat "$work/out/fault-$i.err")")
      # The remote holds the old tip or the whole publication on top of it (the hook checked it).
      [ "$after" = "$before" ] || [ "$(git -C "$srv" rev-parse "$after^")" = "$before" ] || fail "$fault: the server moved to an unexpected commit"
      failed=$((failed + 1))
    fi
    # The same cache publishes again: created when the cut push had not landed, else unchanged.
    al "fault-retry-$i" -q publish --json --repo "$work/fault-$i.git" --remote "$direct" "$spool" \
      || fail "$fault: the retry from the same cache: $(last_err "fault-retry-$i")"
    if [ "$after" = "$before" ]; then
      last_out "fault-retry-$i" | grep -q '"status":"created"' || fail "$fault: the retry did not land the publication"
    else
      last_out "fault-retry-$i" | grep -q '"status":"unchanged"' || fail "$fault: the retry rewrote a landed publication"
    fi
    git -C "$work/fault-$i.git" fsck --connectivity-only >/dev/null 2>&1 || fail "$fault: the local cache is broken"
  done
  [ "${#unnamed[@]}" = 0 ] || fail "errors that do not name their cause: $(printf '\n  %s' "${unnamed[@]}")"
  # Nothing acknowledged is lost: every publication is whole on the server (a fresh cache
  # replays each one as unchanged), and the server verifies.
  for k in $(seq 0 "$i"); do
    al "fault-final-$k" -q publish --json --repo "$work/fault-final.git" --remote "$direct" "$work/small/$(printf spool-%04d "$k")" \
      || fail "the final replay of spool $k: $(last_err "fault-final-$k")"
    last_out "fault-final-$k" | grep -q '"status":"unchanged"' || fail "spool $k is not whole on the server"
  done
  "$bin" -q verify --repo "$srv" >"$work/out/fault-verify.out" 2>&1 || fail "verify after the faults: $(cat "$work/out/fault-verify.out")"
  ok "faults: ${#faults[@]} faults over a $total-byte publication ($failed failed with the named cause, $landed landed anyway); each left the old tip or the whole publication, each retry from the same cache converged, nothing acknowledged lost, verify clean ($((SECONDS - t)) s)"
  unset GIT_CONFIG_COUNT GIT_CONFIG_KEY_0 GIT_CONFIG_VALUE_0
}

case $mode in
  http) run_http ;;
  ssh) run_ssh ;;
  faults) run_faults ;;
  all) run_http; run_ssh; run_faults ;;
  *) fail "usage: scripts/e2e-remote.sh [http|ssh|faults|all] [CUTS]" ;;
esac

# No token ever reached an output (the refused attempts carried wrong${token} and
# revoked-${token}, which contain it).
if grep -rl -- "$token" "$work/out" >/dev/null 2>&1; then
  fail "a credential reached an output: $(grep -rl -- "$token" "$work/out" | head -3)"
fi
ok "no credential appears in any of the $(ls "$work/out" | wc -l) captured outputs"
echo "e2e-remote: passed ($mode, $((SECONDS - began)) s)"
