#!/usr/bin/env bash
# End-to-end check of the operators' dashboard (`GET /` of `serve`) in a real browser: headless
# Chromium from the distribution, driven over the Chrome DevTools Protocol by a small Python
# script (standard library only: its own minimal WebSocket client; no browser or driver is
# downloaded by any tool).
#   - serve runs on 127.0.0.1 with a keys file (an agent key, an operator key) and a policy that
#     sends deploys to approval;
#   - two agents of the real `dashclaw` SDK (dashclaw==5.33.9, in a virtual environment) call
#     `run_governed` for a deploy each and wait for an operator;
#   - the operator logs in through the form, finds both under "Pending approval", opens the
#     first, approves it through the confirmation step, and sees it running, approved by `ops`;
#     the SDK's callback then runs, and the page shows the outcome `completed`;
#   - a build recorded, claimed and reported through the JSON routes (curl) shows its summary
#     escaped on its page;
#   - the operator logs out; the agent's key logs in, sees no approve or deny button on the
#     second deploy, and a forged decision form posted from its session is answered 403;
#   - the operator logs in again and denies the second deploy with a reasoning; the page shows
#     it failed with the reasoning, and the waiting SDK raises `ApprovalDeniedError` carrying
#     it, its callback never run;
#   - no key reaches a page or the server's log; SIGTERM stops the server with exit code 0.
# Screenshots of each step are saved under the output folder (printed; E2E_DASHBOARD_OUT to
# choose it; default: $CARGO_TARGET_DIR/e2e-dashboard).
# Without chromium (and when it cannot be installed with apt-get as root), or when the SDK
# cannot be installed from the package index, prints one SKIP line and exits 0.
# Usage: scripts/e2e-dashboard.sh   (BIN=path/to/action-ledger to choose the binary;
#                                    SERVE_VENV=dir to reuse a virtual environment with dashclaw)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
bin=${BIN:-${CARGO_TARGET_DIR:-$here/target}/debug/action-ledger}
out=${E2E_DASHBOARD_OUT:-${CARGO_TARGET_DIR:-$here/target}/e2e-dashboard}

browser=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$browser" ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  { apt-get install -y chromium || { apt-get update && apt-get install -y chromium; }; } >/dev/null 2>&1 || true
  browser=$(command -v chromium || true)
fi
if [ -z "$browser" ]; then
  echo "e2e-dashboard: SKIP: no chromium (apt-get install chromium)"
  exit 0
fi

[ -x "$bin" ] || (cd "$here" && cargo build --quiet)
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  # Chromium writes its profile until its last process is gone: wait (bounded) before removing.
  for p in "${pids[@]}"; do
    for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.05; done
  done
  for _ in 1 2 3; do rm -rf "$work" 2>/dev/null && break; sleep 0.5; done
}
trap cleanup EXIT
unset ACTION_LEDGER_NOW ACTION_LEDGER_API_KEY ACTION_LEDGER_CRON_SECRET SOURCE_DATE_EPOCH
fail() { echo "e2e-dashboard: FAIL: $*" >&2; for f in "$work"/*.err; do [ -f "$f" ] && { echo "--- $f" >&2; tail -5 "$f" >&2; }; done; exit 1; }
ok() { echo "e2e-dashboard: ok: $*"; }
# shellcheck source=scripts/lib-dashclaw.sh
. "$here/scripts/lib-dashclaw.sh"
dashclaw_python e2e-dashboard

newkey() { head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n'; }
sha() { printf %s "$1" | sha256sum | cut -d' ' -f1; }
bot_key=$(newkey) ops_key=$(newkey)
printf '# principal sha256(key) [operator]\nbot %s\nops %s operator\n' "$(sha "$bot_key")" "$(sha "$ops_key")" >"$work/keys"
cat >"$work/policy.json" <<'EOF'
{"default": "allow", "rules": [
  {"id": "deploys", "action_type": "deploy", "verdict": "require_approval", "reason": "deploys need an operator"}
]}
EOF

"$bin" serve --repo "$work/state.git" --listen 127.0.0.1:0 --api-keys "$work/keys" \
  --policy "$work/policy.json" --json >"$work/serve.out" 2>"$work/serve.err" &
serve_pid=$!
pids+=("$serve_pid")
for _ in $(seq 200); do
  grep -q '"listening"' "$work/serve.out" 2>/dev/null && break
  kill -0 "$serve_pid" 2>/dev/null || fail "serve did not start"
  sleep 0.05
done
url=$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["url"])' "$work/serve.out")
case $url in http://127.0.0.1:*) ;; *) fail "serve listens on $url, not 127.0.0.1" ;; esac
ok "serve on $url"

api() { # method path key [body]
  curl -sS --max-time 10 -X "$1" "$url$2" -H "x-api-key: $3" -H 'content-type: application/json' ${4:+-d "$4"}
}
act='{"kind":"shell","command":"deploy.sh prod"}'
# The server names the action of an idempotency key after the principal and the key.
action_id() { printf 'act_%s' "$(sha "$(printf 'action-ledger idempotency\nbot\n%s' "$1")" | cut -c1-32)"; }
first=$(action_id dashboard-first) second=$(action_id dashboard-second)

# Two SDK agents wait in run_governed for an operator; each writes what happened to a file.
cat >"$work/agent.py" <<'PY'
import json, os, sys
from dashclaw import DashClaw
url, key, agent, idem, work, name = sys.argv[1:7]
act = {"kind": "shell", "command": "deploy.sh prod"}
def callback():
    open(os.path.join(work, f"ran-{name}"), "w").close()
    return "deployed"
try:
    value = DashClaw(url, key, agent).run_governed(
        act, {"action_type": "deploy", "declared_goal": "prod", "idempotency_key": idem}, callback)
    result = {"value": value}
except Exception as e:  # recorded for the script to check
    result = {"error": type(e).__name__, "message": str(e), "decision": getattr(e, "decision", None)}
with open(os.path.join(work, f"agent-{name}.json"), "w") as f:
    json.dump(result, f)
PY
"$py" "$work/agent.py" "$url" "$bot_key" release-bot dashboard-first "$work" first 2>"$work/agent-first.err" &
pids+=("$!")
"$py" "$work/agent.py" "$url" "$bot_key" other-bot dashboard-second "$work" second 2>"$work/agent-second.err" &
pids+=("$!")
status_of() { api GET "/api/actions/$1" "$bot_key" | python3 -c 'import json,sys; print(json.load(sys.stdin).get("action",{}).get("status",""))' 2>/dev/null || true; }
for _ in $(seq 300); do
  [ "$(status_of "$first")" = pending_approval ] && [ "$(status_of "$second")" = pending_approval ] && break
  sleep 0.1
done
[ "$(status_of "$first")" = pending_approval ] && [ "$(status_of "$second")" = pending_approval ] ||
  fail "the SDK's deploys did not reach pending_approval"
ok "two deploys of the SDK's run_governed await approval: $first $second"

# A build through the JSON routes, reported with a summary that must be shown escaped.
third=$(api POST '/api/guard?record=true' "$bot_key" \
  "{\"action_type\":\"build\",\"agent_id\":\"ci-bot\",\"act\":$act,\"client_capabilities\":[\"execution_claims\"]}" |
  python3 -c 'import json,sys; d=json.load(sys.stdin); assert d["decision"]=="allow", d; print(d["action_id"])') ||
  fail "recording the build"
attempt=$(python3 -c 'import uuid; print(uuid.uuid4())')
api PATCH "/api/actions/$third" "$bot_key" \
  "{\"claim_execution\":true,\"attempt_id\":\"$attempt\",\"agent_id\":\"ci-bot\",\"act\":$act}" >"$work/claim.json"
api POST "/api/actions/$third/outcome" "$bot_key" \
  "{\"status\":\"completed\",\"attempt_id\":\"$attempt\",\"summary\":\"<b>deployed</b> \\\"prod\\\"\"}" >"$work/outcome.json"
[ "$(status_of "$third")" = completed ] ||
  fail "the build was not completed (claim: $(cat "$work/claim.json"), outcome: $(cat "$work/outcome.json"))"

mkdir -p "$out"
rm -f "$out"/*.png
"$browser" --headless=new --no-sandbox --disable-gpu --no-first-run --no-default-browser-check \
  --disable-extensions --disable-background-networking --window-size=1200,900 \
  --user-data-dir="$work/profile" --remote-debugging-address=127.0.0.1 --remote-debugging-port=0 \
  about:blank >"$work/chromium.out" 2>"$work/chromium.err" &
chromium_pid=$!
pids+=("$chromium_pid")
ws=
for _ in $(seq 300); do
  ws=$(sed -n 's/^DevTools listening on \(ws:.*\)$/\1/p' "$work/chromium.err" | head -1)
  [ -n "$ws" ] && break
  kill -0 "$chromium_pid" 2>/dev/null || fail "chromium did not start: $(tail -3 "$work/chromium.err")"
  sleep 0.1
done
[ -n "$ws" ] || fail "chromium announced no DevTools address"

cat >"$work/drive.py" <<'PY'
"""Drives the dashboard over the Chrome DevTools Protocol (standard library only)."""
import base64, json, os, socket, struct, sys, time, urllib.parse

ws_url, url, out, bot_key, ops_key, first, second, third, work = sys.argv[1:10]

class WebSocket:
    """A minimal RFC 6455 client: text frames, masked, no extensions."""
    def __init__(self, address):
        u = urllib.parse.urlparse(address)
        self.sock = socket.create_connection((u.hostname, u.port), timeout=30)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall((f"GET {u.path} HTTP/1.1\r\nHost: {u.hostname}:{u.port}\r\n"
                           "Upgrade: websocket\r\nConnection: Upgrade\r\n"
                           f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(1)
            if not chunk:
                raise RuntimeError("websocket handshake cut")
            head += chunk
        if b" 101 " not in head.split(b"\r\n")[0]:
            raise RuntimeError(f"websocket handshake refused: {head[:80]!r}")
    def _exact(self, n):
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise RuntimeError("websocket closed")
            data += chunk
        return data
    def send(self, text):
        payload = text.encode()
        n = len(payload)
        head = bytes([0x81])
        if n < 126:
            head += bytes([0x80 | n])
        elif n < 65536:
            head += bytes([0x80 | 126]) + struct.pack(">H", n)
        else:
            head += bytes([0x80 | 127]) + struct.pack(">Q", n)
        mask = os.urandom(4)
        self.sock.sendall(head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))
    def recv(self):
        message = b""
        while True:
            b0, b1 = self._exact(2)
            n = b1 & 0x7F
            if n == 126:
                n = struct.unpack(">H", self._exact(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", self._exact(8))[0]
            data = self._exact(n)
            opcode = b0 & 0x0F
            if opcode == 8:
                raise RuntimeError("websocket closed by the browser")
            if opcode in (9, 10):
                continue
            message += data
            if b0 & 0x80:
                return message.decode()

class Page:
    def __init__(self, address):
        self.ws, self.next_id = WebSocket(address), 0
    def call(self, method, **params):
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        for _ in range(10000):  # events are skipped; bounded
            reply = json.loads(self.ws.recv())
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
        raise RuntimeError(f"{method}: no answer")
    def eval(self, expression):
        r = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in r:
            raise RuntimeError(f"{expression}: {r['exceptionDetails']}")
        return r["result"].get("value")
    def loaded(self, action):
        """Runs `action` (an expression that navigates) and waits for the next document."""
        self.eval("window.__old = true")
        self.eval(action)
        for _ in range(200):
            time.sleep(0.05)
            try:
                if self.eval("window.__old !== true && document.readyState === 'complete'"):
                    return
            except RuntimeError:
                pass  # the context was replaced mid-call
        raise RuntimeError(f"no new page after {action}")
    def goto(self, path):
        self.loaded(f"location.href = {json.dumps(url + path)}")
    def text(self, selector):
        return self.eval(f"(document.querySelector({json.dumps(selector)}) || {{}}).textContent || null")
    def html(self):
        return self.eval("document.documentElement.outerHTML")
    def shot(self, name):
        data = self.call("Page.captureScreenshot", format="png")["data"]
        path = os.path.join(out, name + ".png")
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))
        return path

def check(cond, what):
    if not cond:
        print(f"e2e-dashboard: FAIL: {what}", file=sys.stderr)
        sys.exit(1)
    print(f"e2e-dashboard: ok: {what}")

# A page target of the browser.
browser = Page(ws_url)
target = browser.call("Target.createTarget", url="about:blank")["targetId"]
port = urllib.parse.urlparse(ws_url).port
page = Page(f"ws://127.0.0.1:{port}/devtools/page/{target}")
page.call("Page.enable")

def login(key):
    page.goto("/ui/login")
    page.loaded(f"document.querySelector('#key').value = {json.dumps(key)}; document.querySelector('form').submit()")

page.goto("/")
check(page.eval("location.pathname") == "/ui/login", "without a session / leads to the login form")
page.shot("01-login")
login(ops_key)
check("signed in as ops (operator)" in (page.text("#who") or ""), "the operator logged in through the form")
check(page.eval("document.cookie") == "", "the session cookie is HttpOnly (no script reads it)")
check(ops_key not in page.html() and bot_key not in page.html(), "no key in the page")
page.goto("/?tab=pending_approval")
listed = page.eval("[...document.querySelectorAll('#actions a')].map(a => a.textContent)")
check(first in listed and second in listed, "both deploys are listed under Pending approval")
page.shot("02-pending")
page.goto("/?tab=pending_approval&agent=release-bot")
listed = page.eval("[...document.querySelectorAll('#actions a')].map(a => a.textContent)")
check(listed == [first], "the agent filter keeps release-bot's deploy only")
page.loaded(f"[...document.querySelectorAll('#actions a')].find(a => a.textContent === {json.dumps(first)}).click()")
check(page.text("#status") == "pending_approval", "the action's page shows it pending approval")
check(page.eval("!!document.querySelector('#approve') && !!document.querySelector('#deny')"), "the operator sees approve and deny")
page.shot("03-action-pending")
page.loaded("document.querySelector('#approve').click()")
check(page.eval("!!document.querySelector('#confirm-button')"), "approving asks for a confirmation")
page.shot("04-confirm")
page.loaded("document.querySelector('#confirm-button').click()")
check(page.text("#status") == "running", "after the confirmation the action is running")
check("approve by ops" in (page.text("#approval") or ""), "the page names the approving operator")
page.shot("05-approved")

# The waiting SDK hears the approval, claims, runs its callback and reports.
def agent_result(name):
    path = os.path.join(work, f"agent-{name}.json")
    for _ in range(600):  # bounded: 30 s
        if os.path.exists(path):
            try:
                with open(path) as f:
                    return json.load(f)
            except ValueError:
                pass  # still being written
        time.sleep(0.05)
    return None
result = agent_result("first")
check(result == {"value": "deployed"}, f"the SDK's run_governed returned its callback's value ({result})")
check(os.path.exists(os.path.join(work, "ran-first")), "the SDK ran its callback after the approval")
page.goto(f"/ui/actions/{first}")
check(page.text("#outcome-status") == "completed", "the page shows the SDK's outcome completed")
page.shot("06-completed")
page.goto(f"/ui/actions/{third}")
check(page.text("#summary") == '<b>deployed</b> "prod"', "a reported summary is shown as text")
check("<b>deployed" not in page.html(), "the summary is escaped in the page's markup")
page.shot("06b-summary")

page.loaded("document.querySelector('header form button').click()")
check(page.eval("location.pathname") == "/ui/login", "logout leads back to the login form")

login(bot_key)
check("signed in as bot" in (page.text("#who") or ""), "the agent's key logged in")
page.goto(f"/ui/actions/{second}")
check(page.eval("!document.querySelector('#approve') && !document.querySelector('#deny') && !document.querySelector('form[action$=\"/decide\"]')"),
      "a non-operator sees no approve or deny button")
page.shot("07-non-operator")
csrf = page.eval("document.querySelector('input[name=csrf]').value")
page.loaded(f"""(() => {{ const f = document.createElement('form'); f.method = 'post';
    f.action = '/ui/actions/{second}/decide';
    for (const [k, v] of [['csrf', {json.dumps(csrf)}], ['decision', 'approve']]) {{
      const i = document.createElement('input'); i.type = 'hidden'; i.name = k; i.value = v; f.appendChild(i); }}
    document.body.appendChild(f); f.submit(); }})()""")
check("Only operators" in (page.text("#message") or ""), "a forged approval from a non-operator's session is refused")
page.shot("08-forged-refused")
page.goto(f"/ui/actions/{second}")
check(page.text("#status") == "pending_approval", "the forged approval changed nothing")
page.goto("/ui/lanes")
check(page.eval("document.querySelector('h1').textContent") == "Lanes", "the lanes page renders")
page.shot("09-lanes")

# The operator denies the second deploy with a reasoning; the waiting SDK raises with it.
page.loaded("document.querySelector('header form button').click()")
login(ops_key)
page.goto(f"/ui/actions/{second}")
page.loaded("document.querySelector('#deny').click()")
reasoning = "not during the <freeze>"
page.eval(f"document.querySelector('#reasoning').value = {json.dumps(reasoning)}")
page.shot("10-deny-confirm")
page.loaded("document.querySelector('#confirm-button').click()")
check(page.text("#status") == "failed", "after the denial the action is failed")
check(page.text("#approval-reasoning") == f"Reasoning: {reasoning}", "the page shows the denial's reasoning as text")
page.shot("11-denied")
result = agent_result("second")
check(result is not None and result.get("error") == "ApprovalDeniedError" and reasoning in result.get("message", ""),
      f"the waiting SDK raised ApprovalDeniedError with the reasoning ({result})")
check(not os.path.exists(os.path.join(work, "ran-second")), "the denied deploy's callback never ran")
browser.call("Browser.close")
PY

python3 "$work/drive.py" "$ws" "$url" "$out" "$bot_key" "$ops_key" "$first" "$second" "$third" "$work" ||
  fail "the browser run"

kill -TERM "$serve_pid"
rc=0
wait "$serve_pid" || rc=$?
[ "$rc" = 0 ] || fail "serve exited $rc after SIGTERM"
for k in "$bot_key" "$ops_key"; do
  grep -q "$k" "$work/serve.err" "$work/serve.out" && fail "a key reached the server's output"
done
ok "no key in the server's output; serve stopped with 0"
echo "e2e-dashboard: screenshots in $out"
ls "$out"
echo "e2e-dashboard: PASS"
