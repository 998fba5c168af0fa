#!/usr/bin/env python3
"""A TCP proxy on 127.0.0.1 that injects one fault into the traffic between git and a server.

usage: faultproxy.py PORTFILE UPSTREAM_PORT FAULT [STATSFILE]

It listens on a free port of 127.0.0.1, writes that port to PORTFILE once ready, and forwards
every connection to 127.0.0.1:UPSTREAM_PORT. FAULT is one of:

  pass             forward everything (STATSFILE then gets the bytes of the whole exchange)
  cut:N            after N bytes (both directions, all connections counted together), close
                   both sides of that connection; later connections pass
  reset:N          the same, with a TCP reset instead of an orderly close
  stall:N          after N bytes, stop forwarding on that connection while keeping it open
                   (until a side closes it, at most 120 s); later connections pass
  delay:MS         hold every chunk MS milliseconds before forwarding it
  latency:MS       hold each answer MS milliseconds: the first chunk from the server after
                   bytes from the client (a server that takes MS ms to answer each request)
  http:CODE:TEXT   answer the first request whose request line contains TEXT with HTTP CODE
                   (401 comes with a Basic challenge) without asking the server; later pass
  http-all:CODE    answer every request with HTTP CODE

STATSFILE, when given, holds the bytes forwarded so far and whether the fault fired, rewritten
after every chunk: `<bytes> <fired 0|1>`. Every wait is bounded; the proxy exits on SIGTERM.
"""
import os
import signal
import socket
import struct
import sys
import threading
import time

portfile, upstream, fault = sys.argv[1], int(sys.argv[2]), sys.argv[3]
statsfile = sys.argv[4] if len(sys.argv) > 4 else None
kind, _, arg = fault.partition(":")
lock = threading.Lock()
state = {"bytes": 0, "fired": False}
STALL_LIMIT = 120


def write_stats():
    if statsfile:
        tmp = statsfile + ".tmp"
        with open(tmp, "w") as f:
            f.write(f"{state['bytes']} {int(state['fired'])}\n")
        os.replace(tmp, statsfile)


def close_both(a, b, reset):
    for s in (a, b):
        try:
            if reset:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            else:
                s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        try:
            s.close()
        except OSError:
            pass


def answer(client, code):
    reason = {401: "Unauthorized", 403: "Forbidden", 500: "Internal Server Error",
              502: "Bad Gateway", 503: "Service Unavailable"}.get(code, "Error")
    body = f"{code} {reason} (injected by faultproxy)\n".encode()
    head = f"HTTP/1.1 {code} {reason}\r\nContent-Type: text/plain\r\nContent-Length: {len(body)}\r\nConnection: close\r\n"
    if code == 401:
        head += 'WWW-Authenticate: Basic realm="git"\r\n'
    try:
        client.sendall(head.encode() + b"\r\n" + body)
    except OSError:
        pass


def pump(src, dst, conn, upward):
    """Forwards src to dst, applying the fault; `conn` is shared by both directions."""
    while not conn["closed"]:
        try:
            chunk = src.recv(65536)
        except OSError:
            chunk = b""
        if not chunk:
            break
        if kind == "delay":
            time.sleep(int(arg) / 1000)
        if kind == "latency":
            if upward:
                conn["asked"] = True
            elif conn.get("asked"):
                conn["asked"] = False
                time.sleep(int(arg) / 1000)
        if upward and kind in ("http", "http-all") and chunk[:8].split(b" ")[0] in (b"GET", b"POST"):
            line = chunk.split(b"\r\n", 1)[0].decode("latin-1")
            code, _, text = arg.partition(":")
            with lock:
                hit = kind == "http-all" or (not state["fired"] and text in line)
                if hit:
                    state["fired"] = True
                    write_stats()
            if hit:
                answer(src, int(code))
                conn["closed"] = True
                close_both(src, dst, False)
                return
        action = None
        with lock:
            if kind in ("cut", "reset", "stall") and not state["fired"]:
                room = int(arg) - state["bytes"]
                if room <= len(chunk):
                    state["fired"] = True
                    chunk, action = chunk[:max(room, 0)], kind
            state["bytes"] += len(chunk)
            write_stats()
        try:
            if chunk:
                dst.sendall(chunk)
        except OSError:
            break
        if action in ("cut", "reset"):
            conn["closed"] = True
            close_both(src, dst, action == "reset")
            return
        if action == "stall":
            conn["stalled"] = True
        if conn["stalled"]:
            # Keep both sockets open and silent until a side gives up (bounded).
            deadline = time.monotonic() + STALL_LIMIT
            while not conn["closed"] and time.monotonic() < deadline:
                time.sleep(0.05)
                try:
                    src.settimeout(0.05)
                    if src.recv(65536, socket.MSG_PEEK) == b"":
                        break
                except socket.timeout:
                    pass
                except OSError:
                    break
            conn["closed"] = True
            close_both(src, dst, False)
            return
    conn["closed"] = True
    close_both(src, dst, False)


def handle(client):
    try:
        server = socket.create_connection(("127.0.0.1", upstream), timeout=10)
        server.settimeout(None)
    except OSError:
        client.close()
        return
    conn = {"closed": False, "stalled": False}
    up = threading.Thread(target=pump, args=(client, server, conn, True), daemon=True)
    down = threading.Thread(target=pump, args=(server, client, conn, False), daemon=True)
    up.start()
    down.start()


def main():
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(1024)
    write_stats()
    tmp = portfile + ".tmp"
    with open(tmp, "w") as f:
        f.write(str(listener.getsockname()[1]))
    os.replace(tmp, portfile)
    while True:
        client, _ = listener.accept()
        threading.Thread(target=handle, args=(client,), daemon=True).start()


main()
