#!/usr/bin/env python3
"""Live projection end to end, through the built binary: a dead CrabFleet bounds `seal` and
`publish SPOOL` by the drain deadline, and the failures they record are published, shown by
`log` and verified.

A CrabFleet stand-in (HTTPS on 127.0.0.1, a CA and a leaf made by `openssl` for this run,
trusted through SSL_CERT_FILE) first answers 200: `record` delivers every event. Then the spool's
claims and delivery marks are removed, which leaves each request alone in the outbox, exactly the
state of a `record` killed between writing its request and claiming it (pending: the next drain
posts it). From that state, one copy each:

- `seal` against each kind of dead CrabFleet, with the drain deadline at DEADLINE_MS and a
  per-request timeout longer than it (so the deadline is what stops the drain):
  - hang: the server reads the request and never answers;
  - black hole: a TCP listener that accepts and never speaks TLS;
  - refused: a closed port;
  - 503: the server answers 503 at once;
  each must exit 0 within the deadline plus one second, with one `projection.failed` event per
  pending request and every outbox entry settled;
- `publish SPOOL` of a spool sealed with everything delivered, whose requests are then left
  pending again (a `record` that raced the `seal`), against the hanging server: `publish`
  drains under the same deadline, seals the failure producers in its second pass and publishes
  them with the rest;
- the hang copy is published too; `log` of each repository shows every `projection.failed`
  event, and `verify` of each is clean.

usage: e2e-projection.py BIN [WORKDIR]   (without WORKDIR: a temporary one, removed at the end)
Prints a line per case with its wall time; exits 1 on the first broken expectation.
"""
import glob
import http.server
import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time

sys.dont_write_bytecode = True  # the checkout stays as it was (check.sh checks)
import crabfleet_tls  # noqa: E402

BIN = sys.argv[1]
WORK = sys.argv[2] if len(sys.argv) > 2 else None
EVENTS = 12
DEADLINE_MS = 3000
TIMEOUT_MS = 20000
mode = {"answer": "ok"}


def fail(msg):
    sys.exit(f"e2e-projection: FAIL: {msg}")


def certificates():
    return crabfleet_tls.certificates(os.path.join(WORK, "tls"), "e2e stand-in CA")


received = []


class StandIn(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length", "0")))
        received.append(self.path)
        answer = mode["answer"]
        if answer == "hang":
            time.sleep(TIMEOUT_MS / 1000 + 5)
            return
        status = 200 if answer == "ok" else 503
        self.send_response(status)
        self.send_header("content-length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args):
        pass


def https_stand_in(leaf, key):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), StandIn)
    server.daemon_threads = True
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(leaf, key)
    server.socket = context.wrap_socket(server.socket, server_side=True,
                                        do_handshake_on_connect=False)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server.server_address[1]


def black_hole():
    """Accepts connections and never reads or writes (kept open until the script ends)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(64)
    held = []

    def accept():
        while True:
            held.append(s.accept())

    threading.Thread(target=accept, daemon=True).start()
    return s.getsockname()[1]


def closed_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def environment(ca, port, session="e2e-session"):
    base = f"https://127.0.0.1:{port}"
    env = dict(os.environ)
    env.update({
        "CLAWSWEEPER_ACTION_LEDGER_FORCE": "1",
        "GITHUB_REPOSITORY": "openclaw/clawsweeper",
        "GITHUB_SHA": "0123456789abcdef0123456789abcdef01234567",
        "GITHUB_WORKFLOW": "e2e-projection",
        "GITHUB_JOB": "review",
        "GITHUB_RUN_ID": "13559999998",
        "GITHUB_RUN_ATTEMPT": "1",
        "CLAWSWEEPER_ACTION_LEDGER_PARTITION_DATE": "2026-03-20",
        "CLAWSWEEPER_CRABFLEET_SESSION_ID": session,
        "CLAWSWEEPER_CRABFLEET_AGENT_TOKEN": "e2e-secret-token",
        "CLAWSWEEPER_CRABFLEET_URL": base,
        "CLAWSWEEPER_CRABFLEET_WORK_STATE_URL":
            f"{base}/api/agent/interactive-sessions/{session}/work-state",
        "CLAWSWEEPER_CRABFLEET_TIMEOUT_MS": str(TIMEOUT_MS),
        "ACTION_LEDGER_CRABFLEET_FLUSH_TIMEOUT_MS": str(DEADLINE_MS),
        "SSL_CERT_FILE": ca,
    })
    return env


def run(args, env, stdin=None):
    began = time.monotonic()
    p = subprocess.run([BIN, *args], env=env, input=stdin, capture_output=True, text=True)
    return p, time.monotonic() - began


def outbox(spool):
    return os.path.join(spool, ".clawsweeper-repair", "crabfleet-outbox")


def leave_pending(spool):
    """Removes claims and delivery marks: each request alone, as a kill before its claim left
    it."""
    removed = 0
    for suffix in ("sending", "delivered"):
        for f in glob.glob(os.path.join(outbox(spool), f"*.{suffix}")):
            os.remove(f)
            removed += 1
    return removed


def states(spool):
    by_stem = {}
    for name in os.listdir(outbox(spool)):
        stem, _, suffix = name.rpartition(".")
        by_stem.setdefault(stem, set()).add(suffix)
    return by_stem


def failures(spool):
    top = os.path.join(spool, ".clawsweeper-repair", "action-events")
    out = set()
    for d, dirs, files in os.walk(top):
        dirs[:] = [x for x in dirs if not x.startswith((".", "_"))]
        for f in files:
            if f.endswith(".json") and d != top:
                with open(os.path.join(d, f)) as fh:
                    e = json.load(fh)
                if e["event_type"] == "projection.failed":
                    out.add(e["parent_event_id"])
    return out


def event_input(n):
    return json.dumps({
        "phase": "review.item", "status": "started", "component": "review-runner",
        "identity": {"item": n}, "retryable": True, "mutation": False,
        "subject": {"repository": "openclaw/openclaw", "kind": "issue", "number": n},
    })


def published_failures(repo, env):
    p, _ = run(["log", "--repo", repo, "--json", "--type", "projection.failed"], env)
    if p.returncode != 0:
        fail(f"log of {repo}: {p.stderr.strip()}")
    p2, _ = run(["verify", "--repo", repo], env)
    if p2.returncode != 0:
        fail(f"verify of {repo}: {p2.stdout.strip()} {p2.stderr.strip()}")
    return [json.loads(line) for line in p.stdout.splitlines() if line.strip()]


def main():
    os.makedirs(WORK, exist_ok=True)
    ca, leaf, key = certificates()
    port = https_stand_in(leaf, key)
    env = environment(ca, port)

    # Every event delivered at record time.
    base_spool = os.path.join(WORK, "recorded")
    os.makedirs(base_spool)
    ids = []
    for n in range(1, EVENTS + 1):
        p, _ = run(["-q", "record", "--spool", base_spool], env, event_input(n))
        if p.returncode != 0 or p.stderr:
            fail(f"record {n} against a live stand-in: {p.stderr.strip()}")
        ids.append(json.loads(p.stdout)["event_id"])
    if len(received) != EVENTS or failures(base_spool):
        fail(f"{len(received)} of {EVENTS} requests reached the live stand-in")
    if leave_pending(base_spool) != 2 * EVENTS:
        fail("the outbox does not hold one claim and one delivery mark per event")
    print(f"e2e-projection: ok: {EVENTS} events recorded and delivered; their requests left "
          f"pending as a kill before the claim leaves them")

    bound = DEADLINE_MS / 1000 + 1.0
    dead = {
        "hang": (port, "hang"),
        "black hole": (black_hole(), "ok"),
        "refused": (closed_port(), "ok"),
        "503": (port, "503"),
    }
    for kind, (dead_port, answer) in dead.items():
        spool = os.path.join(WORK, "seal-" + kind.replace(" ", "-"))
        shutil.copytree(base_spool, spool, symlinks=True)
        mode["answer"] = answer
        p, took = run(["-q", "seal", spool], environment(ca, dead_port))
        if p.returncode != 0:
            fail(f"seal against a {kind} CrabFleet exited {p.returncode}: {p.stderr.strip()}")
        if took > bound:
            fail(f"seal against a {kind} CrabFleet took {took:.2f} s, more than the "
                 f"{DEADLINE_MS} ms deadline plus 1 s")
        if failures(spool) != set(ids):
            fail(f"seal against a {kind} CrabFleet: {len(failures(spool))} projection.failed "
                 f"events for {EVENTS} pending requests")
        open_entries = [s for s, v in states(spool).items()
                        if not v & {"delivered", "failed", "void"}]
        if open_entries:
            fail(f"seal against a {kind} CrabFleet left {len(open_entries)} entries unsettled")
        if "e2e-secret-token" in p.stdout + p.stderr:
            fail("the token reached an output")
        print(f"e2e-projection: ok: seal, {kind} CrabFleet: exit 0 in {took:.2f} s "
              f"(deadline {DEADLINE_MS} ms + 1 s = {bound:.1f} s), {EVENTS} projection.failed "
              f"events, outbox settled")

    # The sealed failures publish like any event.
    mode["answer"] = "hang"
    repo = os.path.join(WORK, "hang.git")
    p, _ = run(["-q", "publish", "--repo", repo, os.path.join(WORK, "seal-hang")], env)
    if p.returncode != 0:
        fail(f"publish of the sealed hang spool: {p.stderr.strip()}")
    shown = published_failures(repo, env)
    if {e["parent_event_id"] for e in shown} != set(ids):
        fail(f"log shows {len(shown)} projection.failed events of {EVENTS}")
    print(f"e2e-projection: ok: published; log --type projection.failed shows all {len(shown)}, "
          f"verify clean")

    # publish SPOOL drains what a record left pending after the seal.
    mode["answer"] = "ok"
    spool = os.path.join(WORK, "publish-drain")
    shutil.copytree(base_spool, spool, symlinks=True)
    p, _ = run(["-q", "seal", spool], env)
    if p.returncode != 0 or failures(spool):
        fail(f"seal with a live stand-in: {p.stderr.strip()}")
    leave_pending(spool)
    mode["answer"] = "hang"
    repo = os.path.join(WORK, "drain.git")
    p, took = run(["-q", "publish", "--repo", repo, spool], env)
    if p.returncode != 0:
        fail(f"publish SPOOL with pending requests: {p.stderr.strip()}")
    if took > bound + 2.0:
        fail(f"publish SPOOL against a hanging CrabFleet took {took:.2f} s")
    shown = published_failures(repo, env)
    if {e["parent_event_id"] for e in shown} != set(ids):
        fail(f"publish SPOOL published {len(shown)} projection.failed events of {EVENTS}")
    print(f"e2e-projection: ok: publish SPOOL drained {EVENTS} pending requests against a "
          f"hanging CrabFleet in {took:.2f} s (publication included) and published their "
          f"failures; verify clean")
    print("e2e-projection: passed")


if __name__ == "__main__":
    if WORK is None:
        with tempfile.TemporaryDirectory(prefix="e2e-projection-") as tmp:
            WORK = os.path.join(tmp, "work")
            main()
    else:
        main()
