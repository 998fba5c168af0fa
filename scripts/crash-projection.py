#!/usr/bin/env python3
"""Kill `record` and `seal` with SIGKILL while they deliver live-projection requests to a
CrabFleet stand-in, and count at the stand-in that no request is lost or delivered twice.

The stand-in is an HTTPS server on 127.0.0.1 (a CA and a leaf for 127.0.0.1 made by `openssl`
for this run, trusted by the binary through SSL_CERT_FILE). It answers every POST after a random
delay of up to 60 ms, 200 mostly and 503 one time in ten, and counts per event id the requests it
received and the 2xx answers it sent.

Each spool takes `record` runs of fresh events (never an event twice, so any second request for
an event is a duplicated delivery), three at a time, each killed at a random moment of its run
(the window is 5/4 of an unharmed run, delivery included); then `seal` killed at a random moment
twice, then `seal` unharmed (which drains what the killed ones left). Then, for every event of the
spool that is not itself a `projection.failed` event:

- lost: neither answered 2xx by the stand-in nor followed by a `projection.failed` event;
- duplicated: received more than once by the stand-in;
- every outbox entry is settled (delivered, failed or void), and one marked delivered was
  answered 2xx by the stand-in.

A request the stand-in answered 2xx whose poster was killed before it marked it delivered gets a
`projection.failed` event (the documented deviation: never posted twice); those are counted.

usage: crash-projection.py BIN KILLS WORKDIR   (runs until KILLS processes were killed mid-run)
Prints one JSON line of counts; exits 1 on any lost or duplicated request.
"""
import collections
import http.server
import json
import os
import random
import ssl
import subprocess
import sys
import threading
import time

sys.dont_write_bytecode = True  # the checkout stays as it was (check.sh checks)
import crabfleet_tls  # noqa: E402

BIN, WANTED, WORK = sys.argv[1], int(sys.argv[2]), sys.argv[3]
RECORDS_PER_SPOOL = 60
PARALLEL = 3
rng = random.Random(int(os.environ.get("CRASH_SEED", "44")))


def certificates():
    return crabfleet_tls.certificates(os.path.join(WORK, "tls"), "crash stand-in CA")


lock = threading.Lock()
received = collections.Counter()
acked = collections.Counter()


class StandIn(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        event_id = json.loads(body)["payload"]["event"]["event_id"]
        with lock:
            received[event_id] += 1
            delay, status = rng.uniform(0, 0.06), 503 if rng.random() < 0.1 else 200
        time.sleep(delay)
        try:
            self.send_response(status)
            self.send_header("content-length", "2")
            self.end_headers()
            self.wfile.write(b"{}")
            self.wfile.flush()
        except OSError:
            pass  # the poster was killed: the answer was sent or not, as a real server's
        if status == 200:
            with lock:
                acked[event_id] += 1

    def log_message(self, *args):
        pass


def serve(ca, leaf, key):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), StandIn)
    server.daemon_threads = True
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(leaf, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server.server_address[1]


def spool_events(spool):
    """Every event file of the spool: (event, is it a projection.failed event)."""
    top = os.path.join(spool, ".clawsweeper-repair", "action-events")
    out = []
    for d, dirs, files in os.walk(top):
        dirs[:] = [x for x in dirs if not x.startswith("_") and not x.startswith(".")]
        for f in files:
            if f.endswith(".json") and d != top:
                with open(os.path.join(d, f)) as fh:
                    out.append(json.loads(fh.read()))
    return out


def outbox_states(spool):
    d = os.path.join(spool, ".clawsweeper-repair", "crabfleet-outbox")
    names = os.listdir(d) if os.path.isdir(d) else []
    stems = collections.defaultdict(set)
    for n in names:
        if n.endswith(".tmp"):
            continue  # a killed writer's staging file: never a name the outbox reads
        stem, _, suffix = n.rpartition(".")
        stems[stem].add(suffix)
    return stems


def main():
    os.makedirs(WORK, exist_ok=True)
    ca, leaf, key = certificates()
    port = serve(ca, leaf, key)
    base = f"https://127.0.0.1:{port}"
    env = dict(os.environ)
    env.update({
        "CLAWSWEEPER_ACTION_LEDGER_FORCE": "1",
        "GITHUB_REPOSITORY": "openclaw/clawsweeper",
        "GITHUB_SHA": "0123456789abcdef0123456789abcdef01234567",
        "GITHUB_WORKFLOW": "crash-projection",
        "GITHUB_JOB": "review",
        "GITHUB_RUN_ID": "13559999999",
        "GITHUB_RUN_ATTEMPT": "1",
        "CLAWSWEEPER_ACTION_LEDGER_PARTITION_DATE": "2026-03-20",
        "CLAWSWEEPER_CRABFLEET_SESSION_ID": "crash-session",
        "CLAWSWEEPER_CRABFLEET_AGENT_TOKEN": "crash-token",
        "CLAWSWEEPER_CRABFLEET_URL": base,
        "CLAWSWEEPER_CRABFLEET_WORK_STATE_URL":
            f"{base}/api/agent/interactive-sessions/crash-session/work-state",
        "CLAWSWEEPER_CRABFLEET_TIMEOUT_MS": "2000",
        "ACTION_LEDGER_CRABFLEET_FLUSH_TIMEOUT_MS": "5000",
        "SSL_CERT_FILE": ca,
    })
    counts = collections.Counter()
    item = 0

    def start(args, spool, stdin=None):
        p = subprocess.Popen([BIN, "-q", *args], env=env, stdin=subprocess.PIPE,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if stdin is not None:
            p.stdin.write(stdin.encode())
        p.stdin.close()
        return p

    def event_input(n):
        return json.dumps({
            "phase": "review.item", "status": "started", "component": "review-runner",
            "identity": {"item": n}, "retryable": True, "mutation": False,
            "subject": {"repository": "openclaw/openclaw", "kind": "issue", "number": n},
        })

    def killed_run(procs_args):
        """Starts each (args, spool, stdin) at once, kills each at its own random moment."""
        started = time.monotonic()
        procs = [(start(a, s, i), started + rng.uniform(0, window)) for a, s, i in procs_args]
        for p, at in sorted(procs, key=lambda x: x[1]):
            time.sleep(max(0.0, at - time.monotonic()))
            p.kill()
        for p, _ in procs:
            rc = p.wait()
            counts["killed" if rc == -9 else "finished"] += 1

    # Calibration: one unharmed record with its delivery.
    calib = os.path.join(WORK, "calibrate")
    os.makedirs(calib)
    t0 = time.monotonic()
    p = subprocess.run([BIN, "-q", "record", "--spool", calib], env=env, input=event_input(1_000_000),
                       capture_output=True, text=True)
    if p.returncode != 0 or p.stderr:
        sys.exit(f"crash-projection: the unharmed record failed: {p.stderr}")
    window = max(0.02, 1.25 * (time.monotonic() - t0))
    began = time.monotonic()
    spools = 0
    while counts["killed"] < WANTED:
        spool = os.path.join(WORK, f"spool-{spools:04d}")
        os.makedirs(spool)
        spools += 1
        for _ in range(RECORDS_PER_SPOOL // PARALLEL):
            batch = []
            for _ in range(PARALLEL):
                item += 1
                batch.append((["record", "--spool", spool], spool, event_input(item)))
            killed_run(batch)
        for _ in range(2):
            killed_run([(["seal", spool], spool, None)])
        t = time.monotonic()
        p = start(["seal", spool], spool)
        if p.wait() != 0:
            sys.exit(f"crash-projection: the unharmed seal of {spool} failed")
        counts["final_seal_max_ms"] = max(counts["final_seal_max_ms"],
                                          int((time.monotonic() - t) * 1000))
        check(spool, counts)
    counts["spools"] = spools
    counts["seconds"] = int(time.monotonic() - began)
    counts["window_ms"] = int(window * 1000)
    print(json.dumps(dict(sorted(counts.items()))))
    if counts["lost"] or counts["duplicated"] or counts["unsettled"] or counts["delivered_unacked"]:
        sys.exit(1)


def check(spool, counts):
    events = spool_events(spool)
    failed = {e["parent_event_id"] for e in events if e["event_type"] == "projection.failed"}
    sources = [e["event_id"] for e in events if e["event_type"] != "projection.failed"]
    states = outbox_states(spool)
    delivered = {stem.split(".", 1)[1] for stem, s in states.items() if "delivered" in s}
    with lock:
        for e in sources:
            counts["events"] += 1
            if received[e] > 1:
                counts["duplicated"] += 1
                print(f"duplicated: {e} received {received[e]} times ({spool})", file=sys.stderr)
            if acked[e] == 0 and e not in failed:
                counts["lost"] += 1
                print(f"lost: {e} ({spool})", file=sys.stderr)
            if acked[e] and e in failed:
                counts["acked_then_failed"] += 1
            counts["acked" if acked[e] and e not in failed else "failed"] += 1
        for e in delivered:
            if acked[e] == 0:
                counts["delivered_unacked"] += 1
                print(f"marked delivered, never answered 2xx: {e} ({spool})", file=sys.stderr)
    for stem, s in states.items():
        if not s & {"delivered", "failed", "void"}:
            counts["unsettled"] += 1
            print(f"unsettled outbox entry {stem}: {sorted(s)} ({spool})", file=sys.stderr)
        if "void" in s:
            counts["void"] += 1


if __name__ == "__main__":
    main()
