#!/usr/bin/env bash
# No credential of a remote URL reaches any output (issue 43, item 9). A fresh random secret is
# put into remote URLs as a password, as a user alone (how personal access tokens are given)
# and as credential-shaped query parameters, and fed through every command that takes
# `--remote`: publish, action create / claim / outcome / show, sweep, compact and serve
# --remote (its HTTP answers to every route and its log).
#
# Failure paths, one fake server each on 127.0.0.1 (all fail before anything is pushed):
#   refused   nothing listens (connection refused: network)
#   401       answers 401 with a Basic challenge (authentication)
#   500       answers 500 (server)
#   404       answers 404 (other: no such repository)
#   garbage   answers a line that is not HTTP (protocol error)
#   stall     accepts and never answers (ACTION_LEDGER_REMOTE_TIMEOUT=2 stops git: time-out)
#   ssh       ssh://git:SECRET@127.0.0.1:<closed>/x.git
# Success paths: a file:// remote whose directory name carries `?access_token=SECRET` (a real
# bare repository, so every command lands its commits, and git's FETCH_HEAD would keep the URL).
#
# Every stdout, stderr, --json line, server answer and server log line is searched for the
# secret, and so is every file and every object (commit messages included) of every cache
# repository. Exit 0 when none holds it.
#
# usage: scripts/e2e-secrets.sh   (BIN=path/to/action-ledger to choose the binary)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
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
export GIT_CONFIG_NOSYSTEM=1 HOME="$work/home" GIT_SSH_COMMAND="ssh -o BatchMode=yes -o StrictHostKeyChecking=no"
export ACTION_LEDGER_REMOTE_TIMEOUT=2 ACTION_LEDGER_CRON_SECRET=cron-secret
mkdir -p "$HOME" "$work/out"
fail() { echo "e2e-secrets: FAIL: $*" >&2; exit 1; }
ok() { echo "e2e-secrets: ok: $*"; }
secret="s3cr3t$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')"

# The fake servers.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'; }
closed=$(free_port)
python3 - "$work/ports" <<'PY' &
import socket, sys, threading, time
answers = {
    "401": b"HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Basic realm=\"git\"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
    "500": b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
    "404": b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
    "garbage": b"SSH-2.0-not-http\r\n",
    "stall": None,
}
ports = {}
def serve(kind, s):
    while True:
        c, _ = s.accept()
        def one(c=c):
            try:
                c.recv(65536)
                if answers[kind] is None:
                    time.sleep(30)
                else:
                    c.sendall(answers[kind])
            except OSError:
                pass
            finally:
                c.close()
        threading.Thread(target=one, daemon=True).start()
for kind in answers:
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", 0)); s.listen(64)
    ports[kind] = s.getsockname()[1]
    threading.Thread(target=serve, args=(kind, s), daemon=True).start()
with open(sys.argv[1], "w") as f:
    f.write(" ".join(f"{k}={v}" for k, v in ports.items()))
while True:
    time.sleep(3600)
PY
pids+=($!)
for _ in $(seq 100); do [ -s "$work/ports" ] && break; sleep 0.1; done
[ -s "$work/ports" ] || fail "the fake servers did not start"
declare -A port
for kv in $(cat "$work/ports"); do port[${kv%%=*}]=${kv#*=}; done
port[refused]=$closed

urls=()
for kind in refused 401 500 404 garbage stall; do
  p=${port[$kind]}
  urls+=("$kind|http://x-access-token:$secret@127.0.0.1:$p/o/r.git")
  [ "$kind" = stall ] && continue # each stalled step costs the time limit: one shape is enough
  urls+=("$kind-user|http://$secret@127.0.0.1:$p/o/r.git")
  urls+=("$kind-query|http://127.0.0.1:$p/o/r.git?access_token=$secret&private_token=$secret")
done
urls+=("ssh|ssh://git:$secret@127.0.0.1:$closed/x.git")

# A sealed spool to publish.
python3 "$here/scripts/gen-ledger.py" "$work/src" 1 1 3
"$bin" -q seal "$work"/src/* >/dev/null
spool=$(ls -d "$work"/src/*)

al() { # label, args...: output in out/<label>.{out,err}; returns the tool's status
  local label=$1; shift
  "$bin" "$@" >"$work/out/$label.out" 2>"$work/out/$label.err"
}
attempt=attempt-secrets-000000001

# Every command that takes --remote, with and without --json; on a failure path each must
# exit non-zero.
commands() { # label, url, expect (fail|ok)
  local l=$1 url=$2 expect=$3 c=$work/caches/$1 rc
  mkdir -p "$c"
  local -a runs=(
    "publish|publish --repo $c/publish.git --remote URL $spool"
    "publish-json|publish --json --repo $c/publish.git --remote URL $spool"
    "create|action create --repo $c/action.git --remote URL --id act_secret_$l --guard-decision gd_$l --act {\"kind\":\"shell\",\"command\":\"true\"}"
    "create-json|action create --json --repo $c/action.git --remote URL --id act_secret_$l --guard-decision gd_$l --act {\"kind\":\"shell\",\"command\":\"true\"}"
    "claim|action claim --repo $c/action.git --remote URL act_secret_$l --attempt $attempt --act {\"kind\":\"shell\",\"command\":\"true\"}"
    "claim-json|action claim --json --repo $c/action.git --remote URL act_secret_$l --attempt $attempt --act {\"kind\":\"shell\",\"command\":\"true\"}"
    "outcome|action outcome --repo $c/action.git --remote URL act_secret_$l completed --attempt $attempt"
    "outcome-json|action outcome --json --repo $c/action.git --remote URL act_secret_$l completed --attempt $attempt"
    "show|action show --repo $c/action.git --remote URL act_secret_$l"
    "show-json|action show --json --repo $c/action.git --remote URL act_secret_$l"
    "sweep|sweep --repo $c/sweep.git --remote URL"
    "sweep-json|sweep --json --repo $c/sweep.git --remote URL"
    "compact|compact --repo $c/compact.git --remote URL --now 2026-05-01 --retention-days 1"
    "compact-json|compact --json --repo $c/compact.git --remote URL --now 2026-05-01 --retention-days 1"
  )
  for run in "${runs[@]}"; do
    local name=${run%%|*} args=${run#*|}
    # shellcheck disable=SC2086 # word splitting of the argument list is meant; URL is one word
    set -- $args
    local -a argv=()
    for a in "$@"; do [ "$a" = URL ] && argv+=("$url") || argv+=("$a"); done
    rc=0
    al "$l-$name" "${argv[@]}" || rc=$?
    if [ "$expect" = fail ] && [ "$rc" = 0 ]; then fail "$l: $name succeeded against a failing remote"; fi
    if [ "$expect" = ok ] && [ "$rc" != 0 ] && [ "$rc" != 1 ]; then
      fail "$l: $name failed ($rc) against a working remote: $(cat "$work/out/$l-$name.err")"
    fi
  done
  # serve --remote: every route, and the cron sweep.
  "$bin" serve --repo "$c/serve.git" --remote "$url" --listen 127.0.0.1:0 --insecure-no-auth --json \
    >"$work/out/$l-serve.out" 2>"$work/out/$l-serve.err" &
  local serve_pid=$!
  pids+=($serve_pid)
  local surl=
  for _ in $(seq 100); do
    surl=$(grep -o '"url":"[^"]*"' "$work/out/$l-serve.out" 2>/dev/null | cut -d'"' -f4 || true)
    [ -n "$surl" ] && break
    kill -0 "$serve_pid" 2>/dev/null || break
    sleep 0.1
  done
  [ -n "$surl" ] || fail "$l: serve --remote did not start: $(cat "$work/out/$l-serve.err")"
  timeout 120 python3 - "$surl" "act_serve_$l" "$expect" >"$work/out/$l-http.out" 2>&1 <<'PY' \
    || fail "$l: serve --remote answered unexpectedly: $(cat "$work/out/$l-http.out")"
import json, sys, urllib.request, urllib.error
url, aid, expect = sys.argv[1], sys.argv[2], sys.argv[3]
act = {"kind": "shell", "command": "true"}
def call(m, p, b=None, headers={}):
    data = None if b is None else json.dumps(b).encode()
    req = urllib.request.Request(url + p, data=data, method=m,
        headers={"Content-Type": "application/json", **headers})
    try:
        r = urllib.request.urlopen(req, timeout=60)
        status, body = r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        status, body = e.code, e.read().decode()
    print(m, p, status, body)
    if expect == "fail":
        assert status in (500, 503), (m, p, status, body)
        assert "retry later" in body, (m, p, status, body)
    return status
call("GET", "/healthz")
call("POST", "/api/actions", {"action_id": aid, "action_type": "b", "agent_id": "agent-1", "act": act,
    "client_capabilities": ["execution_claims"]})
call("POST", "/api/guard?record=true", {"action_type": "b", "agent_id": "agent-1", "act": act,
    "client_capabilities": ["execution_claims"]})
call("GET", f"/api/actions/{aid}")
call("PATCH", f"/api/actions/{aid}", {"claim_execution": True, "attempt_id": "attempt-serve-0000000000",
    "agent_id": "agent-1", "act": act})
call("GET", f"/api/actions/{aid}/outcome")
call("POST", f"/api/actions/{aid}/outcome", {"status": "completed", "attempt_id": "attempt-serve-0000000000"})
call("PATCH", f"/api/actions/{aid}", {"status": "cancelled"})
call("GET", "/api/cron/outcome-sweep", headers={"Authorization": "Bearer cron-secret"})
PY
  kill -TERM "$serve_pid"
  wait "$serve_pid" || fail "$l: serve --remote did not stop cleanly: $(cat "$work/out/$l-serve.err")"
  if [ "$expect" = fail ]; then
    grep -q "answered 50" "$work/out/$l-serve.err" || fail "$l: the server's log does not say why it answered 503"
  fi
}

for entry in "${urls[@]}"; do
  commands "${entry%%|*}" "${entry#*|}" fail
done
ok "${#urls[@]} failing remotes: every --remote command exits non-zero; serve answers 503/500 'retry later'"
# The messages still say what kind of failure it was.
grep -q "authentication failed" "$work/out/401-publish.err" || fail "401 is not named an authentication failure: $(cat "$work/out/401-publish.err")"
grep -q "network failure\|did not finish within" "$work/out/stall-publish.err" || fail "a stall is not named a time-out: $(cat "$work/out/stall-publish.err")"
grep -q '\*\*\*@127.0.0.1' "$work/out/401-publish.err" || fail "the URL is not shown redacted: $(cat "$work/out/401-publish.err")"

# Success paths: a real bare repository behind a file:// URL with a credential-shaped query.
remote_dir="$work/remote.git?access_token=$secret"
"$bin" -q hooks install --repo "$remote_dir" --bin "$bin" >/dev/null 2>&1 || git init -q --bare "$remote_dir"
commands file-query "file://$remote_dir" ok
git --git-dir "$remote_dir" rev-parse -q --verify refs/heads/main >/dev/null || fail "nothing landed on the file:// remote"
ok "file:// remote with a credential-shaped query: every command lands"

# Search every output, and every file and object of every cache repository.
if grep -rla -- "$secret" "$work/out" >"$work/leaks"; then
  fail "the secret reached an output: $(tr '\n' ' ' <"$work/leaks"); e.g. $(grep -rah -- "$secret" "$work/out" | head -3)"
fi
if grep -rla -- "$secret" "$work/caches" >"$work/leaks"; then
  fail "the secret is in a cache repository file: $(tr '\n' ' ' <"$work/leaks")"
fi
for repo in "$work"/caches/*/*.git; do
  [ -d "$repo/objects" ] || continue
  if git --git-dir "$repo" cat-file --batch-all-objects --batch 2>/dev/null | grep -qa -- "$secret"; then
    fail "the secret is in an object (a commit message?) of $repo"
  fi
  if git --git-dir "$repo" config --list 2>/dev/null | grep -qa -- "$secret"; then
    fail "the secret is in the config of $repo"
  fi
done
n=$(ls "$work/out" | wc -l)
ok "the secret is in none of $n outputs and in no file, object or config of any cache repository"
