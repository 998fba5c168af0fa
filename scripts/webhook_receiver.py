#!/usr/bin/env python3
"""A webhook receiver for scripts/e2e-webhooks.sh, on 127.0.0.1 only.

Usage: webhook_receiver.py PORT_FILE LOG_FILE PATH=SECRET_FILE...

Verifies X-DashClaw-Signature (hex HMAC-SHA256 of the body under the path's secret) of every
POST, checks the headers against the signed body, and appends one JSON line per request to
LOG_FILE: path, delivery, event, action_id, status (the action row's), ok (signature and headers
valid), answered (the HTTP status it answers). A delivery whose id hashes to 0 mod 4 is answered
503 the first time it is seen (the server retries it); every request waits 20 ms before its
answer, so that a SIGKILL of the server often falls between a receiver's answer and the
server's record of it (a redelivery). Writes the port it listens on to PORT_FILE.
"""
import hashlib
import hmac
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

port_file, log_file = sys.argv[1], sys.argv[2]
secrets = {}
for arg in sys.argv[3:]:
    path, secret_file = arg.split("=", 1)
    with open(secret_file, "rb") as f:
        secrets[path] = f.read().rstrip(b"\n")
lock = threading.Lock()
seen = set()
log = open(log_file, "a", encoding="utf-8")


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        secret = secrets.get(self.path)
        want = hmac.new(secret, body, hashlib.sha256).hexdigest() if secret else None
        got = self.headers.get("x-dashclaw-signature", "")
        delivery = self.headers.get("x-dashclaw-delivery", "")
        event = self.headers.get("x-dashclaw-event", "")
        ok = want is not None and hmac.compare_digest(want, got)
        record = {"path": self.path, "delivery": delivery, "event": event, "ok": ok}
        if ok:
            doc = json.loads(body)
            ok = (doc.get("delivery_id") == delivery and doc.get("event") == event
                  and self.headers.get("content-type") == "application/json")
            record.update(ok=ok, action_id=doc["action"]["action_id"],
                          status=doc["action"].get("status"), org_id=doc.get("org_id"),
                          timestamp=doc.get("timestamp"))
        with lock:
            first = delivery not in seen
            seen.add(delivery)
        answer = 401 if not ok else 503 if first and int(hashlib.sha256(delivery.encode()).hexdigest(), 16) % 4 == 0 else 204
        time.sleep(0.02)
        record["answered"] = answer
        with lock:
            log.write(json.dumps(record) + "\n")
            log.flush()
        self.send_response(answer)
        self.send_header("content-length", "0")
        self.end_headers()


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
with open(port_file + ".tmp", "w") as f:
    f.write(str(server.server_address[1]))
import os  # noqa: E402

os.rename(port_file + ".tmp", port_file)
server.serve_forever()
