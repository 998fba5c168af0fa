#!/usr/bin/env bash
# Hostile HTTP against `action-ledger serve` (built binary, real git, API keys on), while
# well-behaved clients create, claim and report actions throughout:
#   - bodies: oversized (declared and streamed), deeply nested arrays and objects, JSON bombs
#     (many small nested values within the size limit), invalid UTF-8, not an object;
#   - media types a browser sends without a preflight (text/plain, forms, multipart): 415;
#   - action ids with path tricks (.., %2F, %2e%2e, %00, 5,000 characters, a NUL in a JSON id);
#   - header injection (CR/LF, a NUL in a header), conflicting Content-Length and
#     Transfer-Encoding, an absurd Content-Length;
#   - a replayed idempotency key with a different act: answered as the first creation (as the
#     reference does), and the different act cannot claim it (409);
#   - a wrong API key tried in a loop: every try 401 (no rate limit: keys are random secrets of
#     at least 128 bits stored as SHA-256 digests, so guessing is hopeless, and a limit keyed by
#     address would let one client lock the others out);
#   - slow clients: headers and bodies trickled a byte at a time, and hundreds of idle
#     connections: each is cut off after the client timeout of 30 s (408 or closed);
# Expected: every hostile request gets a 4xx (never a 5xx or a dropped connection without a
# reason), no panic, the server's threads and memory stay bounded, every well-behaved request
# succeeds, every path written is a record under finality/v1/actions/<h0>/…/<h5>/<id>/, a
# decision, the layout record or a pending-index entry,
# `verify` and `git fsck --strict` are clean, and SIGTERM stops the server with exit 0.
#
# usage: scripts/e2e-hostile.sh [SECONDS] [CLIENTS]   (default 20 s, 8 well-behaved clients;
#        the soak: 1800 64). SWEEP_EVERY: the server's sweep timer in minutes (default 15, as
#        `serve`'s). Prints memory (VmRSS, with its heap and mapped-file parts) and thread
#        readings after each round, and the peaks of a reading every second.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
seconds=${1:-20}
clients=${2:-8}
bin=${BIN:-${CARGO_TARGET_DIR:-$here/target}/debug/action-ledger}
[ -x "$bin" ] || (cd "$here" && cargo build --quiet)
work=$(mktemp -d)
server_pid=
cleanup() {
  [ -z "$server_pid" ] || kill -9 "$server_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
unset ACTION_LEDGER_NOW SOURCE_DATE_EPOCH
# The server logs every batch, pack roll-up and sweep scan of 1 s or more: how many, and the
# slowest.
slow_report() {
  local kind n top
  for kind in "slow batch" "slow pack roll-up" "slow sweep scan"; do
    n=$(grep -c "^$kind" "$work/serve.err" 2>/dev/null || true)
    # No such line is the usual case: grep's exit 1 must not end the script (pipefail).
    top=$( (grep "^$kind" "$work/serve.err" 2>/dev/null || true) | sed -n 's/.* in \([0-9]*\) ms$/\1/p' | sort -n | tail -1)
    echo "e2e-hostile: lines \"$kind\" (1 s or more): ${n:-0}${top:+, the slowest $top ms}"
  done
}
fail() { echo "e2e-hostile: FAIL: $*" >&2; slow_report >&2; tail -5 "$work/serve.err" >&2 || true; exit 1; }

key=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
printf 'bot %s\n' "$(printf %s "$key" | sha256sum | cut -d' ' -f1)" >"$work/keys"
repo=$work/state.git
"$bin" serve --repo "$repo" --listen 127.0.0.1:0 --api-keys "$work/keys" --json \
  --sweep-every "${SWEEP_EVERY:-15}" \
  >"$work/serve.out" 2>"$work/serve.err" &
server_pid=$!
for _ in $(seq 500); do
  grep -q '"listening"' "$work/serve.out" 2>/dev/null && break
  kill -0 "$server_pid" 2>/dev/null || fail "the server did not start: $(cat "$work/serve.err")"
  sleep 0.01
done
url=$(sed -n 's/.*"url":"\([^"]*\)".*/\1/p' "$work/serve.out")

KEY=$key python3 - "$url" "$server_pid" "$seconds" "$clients" <<'EOF' || fail "see above"
import json, os, socket, sys, threading, time, urllib.request, urllib.error
url, pid, seconds, clients = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
key = os.environ["KEY"]
host, port = url[len("http://"):].split(":"); port = int(port)
ACT = {"kind": "shell", "command": "true"}
stop = threading.Event()
problems = []
def problem(msg):
    problems.append(msg); print("e2e-hostile: PROBLEM: " + msg, flush=True)

def call(method, path, body=None, headers=None, raw=None, timeout=30):
    h = {"x-api-key": key, "Content-Type": "application/json", **(headers or {})}
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    req = urllib.request.Request(url + path, data=data, headers=h, method=method)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()

def raw_exchange(data, wait=10, body=b""):
    """Sends raw bytes; the status code of the answer (None: closed without one). A `body` sent
    after `data` may be cut off by the server's early answer (a 413 on the headers alone), as
    curl allows: the answer is read whether or not the rest of the body got through."""
    s = socket.create_connection((host, port), timeout=wait)
    try:
        s.sendall(data)
        try: s.sendall(body)
        except OSError: pass
        got = b""
        while b"\r\n" not in got:
            chunk = s.recv(4096)
            if not chunk: break
            got += chunk
        return int(got.split()[1]) if got.startswith(b"HTTP/1.1 ") else None
    except OSError:
        return None
    finally:
        s.close()

def readings():
    """VmRSS, RssAnon (the heap and stacks), RssFile (mapped files: the binary, pack indices and
    packs; clean pages the kernel can reclaim), all in kB, threads and open fds."""
    st = {l.split(":")[0]: int(l.split()[1]) for l in open(f"/proc/{pid}/status") if l.startswith(("VmRSS", "RssAnon", "RssFile", "Threads"))}
    return {"rss": st["VmRSS"], "anon": st["RssAnon"], "file": st["RssFile"], "threads": st["Threads"], "fds": len(os.listdir(f"/proc/{pid}/fd"))}

def show(r):
    return f"VmRSS {r['rss']} kB (anon {r['anon']}, file {r['file']}), {r['threads']} threads, {r['fds']} fds"

# A reading every second between the rounds' own: the peaks (a sweep's scan, a roll-up) are short.
peaks = {"rss": 0, "anon": 0, "file": 0, "threads": 0}
def sampler():
    while not stop.is_set():
        try: r = readings()
        except OSError: return
        for k in peaks: peaks[k] = max(peaks[k], r[k])
        time.sleep(1)

# Well-behaved clients: create -> claim -> outcome until told to stop; every request must succeed.
good = {"cycles": 0}
def good_client(t):
    n = 0
    while not stop.is_set():
        n += 1
        aid = f"good_{t}_{n}"; attempt = f"attempt-good-{t:04d}-{n:08d}"
        try:
            s, b = call("POST", "/api/actions", {"action_id": aid, "action_type": "build", "agent_id": "agent-1", "act": ACT, "client_capabilities": ["execution_claims"]})
            assert s == 201, (s, b)
            s, b = call("PATCH", f"/api/actions/{aid}", {"claim_execution": True, "attempt_id": attempt, "agent_id": "agent-1", "act": ACT})
            assert s == 200, (s, b)
            s, b = call("POST", f"/api/actions/{aid}/outcome", {"status": "completed", "attempt_id": attempt})
            assert s == 200, (s, b)
            good["cycles"] += 1
        except Exception as e:
            problem(f"well-behaved client {t}: {e!r}"); return

def expect(what, got, allowed):
    if got not in allowed: problem(f"{what}: got {got}, expected one of {allowed}")

def body_attacks():
    big = b'{"a":"' + b"x" * (2 << 20) + b'"}'
    head = b"POST /api/actions HTTP/1.1\r\nHost: x\r\nx-api-key: " + key.encode() + b"\r\nContent-Type: application/json\r\n"
    expect("oversized body", raw_exchange(head + b"Content-Length: %d\r\n\r\n" % len(big), body=big), (413,))
    chunked = b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in (big[i:i + 65536] for i in range(0, len(big), 65536))) + b"0\r\n\r\n"
    expect("oversized body, chunked", raw_exchange(head + b"Transfer-Encoding: chunked\r\n\r\n", body=chunked), (413,))
    expect("announced oversized body", raw_exchange(b"POST /api/actions HTTP/1.1\r\nHost: x\r\nx-api-key: " + key.encode() + b"\r\nContent-Type: application/json\r\nContent-Length: 99999999\r\n\r\n{}"), (413,))
    expect("absurd Content-Length", raw_exchange(b"POST /api/actions HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999999\r\n\r\n{}"), (400, None))
    expect("Content-Length with Transfer-Encoding", raw_exchange(b"POST /api/actions HTTP/1.1\r\nHost: x\r\nx-api-key: " + key.encode() + b"\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"), (400, None))
    for depth in (100, 1000, 30000):
        expect(f"arrays nested {depth} deep", call("POST", "/api/actions", raw=b"[" * depth + b"]" * depth)[0], (400, 413))
        expect(f"objects nested {depth} deep", call("POST", "/api/actions", raw=b'{"a":' * depth + b"1" + b"}" * depth)[0], (400, 413))
    bomb = json.dumps({"action_type": "b", "agent_id": "a", "act": {"kind": "shell", "x": [[[[[]]]]] * 5000}}).encode()[:65000]
    expect("JSON bomb", call("POST", "/api/actions", raw=bomb)[0], (400, 413))
    keys = json.dumps({f"k{i}": i for i in range(4000)}).encode()
    expect("4,000 keys", call("POST", "/api/actions", raw=keys)[0], (400,))
    expect("invalid UTF-8", call("POST", "/api/actions", raw=b'{"action_type":"b\xff\xfe","agent_id":"a"}')[0], (400,))
    expect("not an object", call("POST", "/api/actions", raw=b"[1,2]")[0], (400,))
    for ct in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"):
        expect(f"Content-Type {ct}", call("POST", "/api/actions", {"action_type": "b", "agent_id": "a"}, headers={"Content-Type": ct})[0], (415,))

def path_attacks():
    claim = {"claim_execution": True, "attempt_id": "attempt-hostile-000001", "agent_id": "a", "act": ACT}
    for aid in ("..", "..%2F..%2Fetc", "%2e%2e", "a%2Fb", "a%00b", "%ff%fe", "x" * 5000, "a/../../b"):
        expect(f"claim of {aid[:20]}", call("PATCH", f"/api/actions/{aid}", claim)[0], (400, 404, 409))
        expect(f"outcome of {aid[:20]}", call("POST", f"/api/actions/{aid}/outcome", {"status": "completed"})[0], (400, 404, 409))
        expect(f"read of {aid[:20]}", call("GET", f"/api/actions/{aid}")[0], (400, 404))
    for aid in ("../../x", "a\u0000b", "a/b", "x" * 129, ".git", "HEAD"):
        expect(f"create with id {aid[:20]!r}", call("POST", "/api/actions", {"action_id": aid, "action_type": "b", "agent_id": "a", "act": ACT})[0], (400,) if aid not in (".git", "HEAD") else (400, 200, 201))

def header_attacks():
    expect("CR LF in a header", raw_exchange(b"GET /api/actions/x HTTP/1.1\r\nHost: x\r\nx-api-key: a\rx-injected: b\r\n\r\n"), (400, None))
    expect("NUL in a header", raw_exchange(b"GET /api/actions/x HTTP/1.1\r\nHost: x\r\nx-api-key: a\x00b\r\n\r\n"), (400, None))
    expect("request line garbage", raw_exchange(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n"), (400, None))

def replay_attack():
    body = {"action_type": "b", "agent_id": "agent-1", "idempotency_key": "replayed-key", "act": ACT, "client_capabilities": ["execution_claims"]}
    s, b = call("POST", "/api/actions", body); expect("first creation", s, (201, 200))
    aid = json.loads(b)["action_id"]
    other = {"kind": "shell", "command": "rm -rf /"}
    # A key reused with another act is refused (422), never answered with the stored action.
    s, b = call("POST", "/api/actions", {**body, "act": other}); expect("key reused with another act", s, (422,))
    if "action_id" in json.loads(b): problem("a refused key reuse named an action")
    s, b = call("POST", "/api/actions", body); expect("replay of the same request", s, (201,))
    if json.loads(b)["action_id"] != aid: problem("a replay named another action")
    s, b = call("PATCH", f"/api/actions/{aid}", {"claim_execution": True, "attempt_id": "attempt-hostile-replay1", "agent_id": "agent-1", "act": other})
    expect("claim with the replay's other act", s, (409,))

def wrong_keys():
    for i in range(300 if seconds < 60 else 3000):
        expect("wrong key", call("GET", "/api/actions/x", headers={"x-api-key": f"wrong-{i}"})[0], (401,))
        if stop.is_set(): break

def slow_clients(n):
    socks = []
    for i in range(n):
        try:
            s = socket.create_connection((host, port), timeout=5)
            if i % 3 == 0: s.sendall(b"POST /api/actions HTTP/1.1\r\nHost: x\r\n")        # headers never end
            elif i % 3 == 1: s.sendall(b"POST /api/actions HTTP/1.1\r\nHost: x\r\nx-api-key: " + key.encode() + b"\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{")  # body never ends
            socks.append(s)                                                             # else: idle
        except OSError as e:
            problem(f"connection {i} refused: {e}"); break
    time.sleep(0.5)
    mid = readings()
    for _ in range(4):  # trickle a byte now and then: the timeout is not reset by a trickle
        for s in socks[::3]:
            try: s.sendall(b"x")
            except OSError: pass
        time.sleep(1)
    deadline = time.time() + 40  # the server's client timeout is 30 s
    open_ = len(socks)
    while time.time() < deadline and open_:
        open_ = 0
        for s in socks:
            try:
                s.settimeout(0.01)
                if s.recv(4096) != b"": open_ += 1  # an answer (408) arrived; closed soon after
            except socket.timeout: open_ += 1
            except OSError: pass
        time.sleep(0.5)
    for s in socks: s.close()
    if open_: problem(f"{open_} slow or idle connections still open 10 s after the client timeout")
    return mid

start = readings()
print(f"e2e-hostile: start: {show(start)}", flush=True)
threading.Thread(target=sampler, daemon=True).start()
goods = [threading.Thread(target=good_client, args=(t,)) for t in range(clients)]
for t in goods: t.start()
t0 = time.time(); rounds = 0; samples = []
try:  # an exception here must still stop the well-behaved clients, or the interpreter waits on them
    while True:
        body_attacks(); path_attacks(); header_attacks(); replay_attack()
        wk = threading.Thread(target=wrong_keys); wk.start()
        mid = slow_clients(600 if rounds == 0 else 150)
        wk.join()
        rounds += 1
        r = readings(); samples.append(r)
        print(f"e2e-hostile: {time.time() - t0:6.0f} s: round {rounds}, {show(r)}; during the slow clients {show(mid)}; peaks so far: VmRSS {peaks['rss']} kB, anon {peaks['anon']} kB; {good['cycles']} well-behaved cycles", flush=True)
        if time.time() - t0 >= seconds or problems: break
finally:
    stop.set()
for t in goods: t.join()
end = readings()
for k in peaks: peaks[k] = max(peaks[k], end[k])
print(f"e2e-hostile: end: {rounds} rounds, {good['cycles']} well-behaved create/claim/outcome cycles; {show(end)}; peaks: VmRSS {peaks['rss']} kB, anon {peaks['anon']} kB, file {peaks['file']} kB, {peaks['threads']} threads", flush=True)
if good["cycles"] == 0: problem("no well-behaved cycle completed")
# Threads: tokio's workers and blocking pool (bounded by tokio, 512) plus the writer.
if peaks["threads"] > 600: problem(f"{peaks['threads']} threads")
if peaks["rss"] > 512 * 1024: problem(f"VmRSS peaked at {peaks['rss']} kB")
# Flat memory is a rule on the heap (RssAnon): mapped pack-index pages grow with the objects of
# the repository (28 bytes each in an index, shared with the page cache and reclaimable), and the
# server keeps them within a budget above what it cannot drop (store::release).
if len(samples) >= 6:
    third = len(samples) // 3
    for k in ("anon", "file", "rss"):
        early = max(s[k] for s in samples[1:third + 1]); late = max(s[k] for s in samples[-third:])
        print(f"e2e-hostile: {k}, highest in the first third {early} kB, in the last third {late} kB", flush=True)
        if k == "anon" and late > early * 1.5 + 32 * 1024: problem(f"the heap grew from {early} kB to {late} kB")
sys.exit(1 if problems else 0)
EOF

kill -0 "$server_pid" 2>/dev/null || fail "the server died"
! grep -q 'panicked' "$work/serve.err" || fail "a panic: $(grep -m1 panicked "$work/serve.err")"
stop_start=$(date +%s%N)
kill -TERM "$server_pid"
rc=0
wait "$server_pid" || rc=$?
server_pid=
[ "$rc" -eq 0 ] || fail "the server exited $rc after SIGTERM"
echo "e2e-hostile: the server stopped $((($(date +%s%N) - stop_start) / 1000000)) ms after SIGTERM"
outside=$(git -C "$repo" ls-tree -r --name-only main |
  grep -Ev '^finality/v1/(layout\.json|pending/[0-9]{4}-[0-9]{2}-[0-9]{2}/[0-9]{2}/[0-9]{13}\.[A-Za-z0-9_-]{1,128}|actions/([0-9a-f]{2}/){2}[A-Za-z0-9_-]{1,128}/[a-z_]+\.json|decisions/([0-9a-f]{2}/){2}gd_[0-9a-f]+\.json)$' | head -5 || true)
[ -z "$outside" ] || fail "records outside the layout record, the pending index, finality/v1/actions/<h[0:2]>/<h[2:4]>/<id>/ and the decisions: $outside"
"$bin" -q verify --repo "$repo" >/dev/null || fail "verify"
git -C "$repo" fsck --strict >/dev/null 2>&1 || fail "git fsck --strict"
slow_report
echo "e2e-hostile: passed (every hostile request refused with a 4xx or cut off, every well-behaved request served, no record outside the action directories, verify and fsck clean, clean stop)"
