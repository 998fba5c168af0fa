#!/usr/bin/env python3
"""Peak anonymous and file-backed resident memory of a running command, by sampling.

usage: scripts/mem-peak.py PID OUT

PID is the process that runs the measured command (bench.sh passes GNU time's pid, whose one
child is the command). Every 5 ms until PID exits, the script reads `RssAnon` and `RssFile`
(plus `RssShmem`, counted with the file-backed pages, as a mapped pack is shared) from
/proc/<child>/status of PID's children, and writes to OUT one line: `<peak anon KiB> <peak
file-backed KiB>`. The kernel keeps only the peak of the sum (`VmHWM`, what GNU time's %M
reports), so the two parts are sampled: a peak shorter than the interval can be missed, and
the two peaks need not be at the same moment.
"""
import sys
import time


def children(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(c) for c in f.read().split()]
    except OSError:
        return []


def rss(pid):
    """(anon KiB, file-backed + shared KiB) of pid, or None once it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            fields = dict(line.split(":", 1) for line in f if line.startswith("Rss"))
    except OSError:
        return None
    kib = lambda k: int(fields.get(k, "0 kB").split()[0])
    return kib("RssAnon"), kib("RssFile") + kib("RssShmem")


def main():
    pid, out = int(sys.argv[1]), sys.argv[2]
    anon = filed = 0
    while True:
        alive = False
        for p in [pid] + children(pid):
            r = rss(p)
            if r is None:
                continue
            alive = True
            if p != pid:
                anon, filed = max(anon, r[0]), max(filed, r[1])
        if not alive:
            break
        time.sleep(0.005)
    with open(out, "w") as f:
        f.write(f"{anon} {filed}\n")


if __name__ == "__main__":
    main()
