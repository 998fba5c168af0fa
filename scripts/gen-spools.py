#!/usr/bin/env python3
"""Generates unsealed spools of realistic synthetic events for benchmarks (deterministic).

usage: gen-spools.py OUT_DIR --events N [--spools S] [--seed K] [--partition-date YYYY-MM-DD]
                     [--templates DIR] [--jobs P] [--stats]
       gen-spools.py --version

The events are copies of the day1 corpus (testdata/corpus/day1/spools: 24 CI jobs recorded by the
reference, 97 producers, 5,091 events, 41 event types), so event types, field shapes, attributes,
evidence, learning, privacy, parent chains, source/generated occurrences and file sizes follow
that day. The 24 jobs are replayed in order, cycle after cycle; cycle c of seed K is a new day
of work by the same fleet:

- producer: `run_id` shifted by (K * 10^6 + c + 1) * 10^6 (attempt-1 and attempt-2 runs of one
  workflow run and the two review shards of one run keep sharing a run id), `sha` rehashed; the
  component, job, workflow and run attempt are kept, so every producer run is new;
- event_key digest, operation/attempt/idempotency ids and evidence sha256 are rehashed with a
  per-(seed, cycle) salt (ids shared within a day1 cycle stay shared, e.g. one operation's
  attempts; parents are remapped to the new event ids, also across jobs of a cycle, so the
  apply jobs still name review items of earlier jobs and attempt-2 reruns name attempt-1 events);
- subject numbers are shifted by 1000 * c (also inside record/report paths), run ids inside
  report paths and run URLs follow the producer's new run id;
- subject repositories get a per-cycle variant (`owner/name`, `owner/name-v1`, ...) so that no
  spool repository directory exceeds the reference's 4,096-entry limit;
- timestamps keep the day1 time of day on the chosen partition date.
Then event_id = sha256(subject repository + "\\n" + event_key) and semantic_sha256 = sha256 of
canonical {"occurrence":...,"semantic":...} are recomputed (the event identity rules: see `crate::identity`'s docs), and each
event is written as canonical JSON + "\\n" at <spool>/.clawsweeper-repair/action-events/
<slug>-<sha256(repo)[0:12]>/<event_id>.json, with a partition marker per producer in
_partitions/<sha256(canonical producer)>.txt. Nothing is sealed.

Events are spread over S spools (default: ceil(N / 10,000)) as evenly as possible; each spool
holds whole jobs, and the last job of a spool is cut short (the rest of that job is dropped, as
if it had crashed), so a producer run never spans two spools. Spool limits are checked before
anything is written: at most 256 producers, 65,536 events and 64 MiB of event bytes per spool,
4,096 events per repository directory.
"""
import argparse
import collections
import datetime
import hashlib
import json
import math
import multiprocessing
import os
import re
import sys
import time

GEN_VERSION = 1
TEMPLATE_DATE = "2026-03-10"
SPOOL_DIR = os.path.join(".clawsweeper-repair", "action-events")
DEFAULT_EVENTS_PER_SPOOL = 10_000
MAX_PRODUCERS = 256
MAX_EVENTS = 65_536
MAX_BYTES = 64 * 1024 * 1024
MAX_ENTRIES = 4096
NUMBER_STEP = 1000
DIGITS = re.compile(r"[0-9]+")
HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_TEMPLATES = os.path.join(HERE, "..", "testdata", "corpus", "day1", "spools")


def cj(v):
    return json.dumps(v, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def sha(s):
    return hashlib.sha256(s.encode()).hexdigest()


SEMANTIC_KEYS = sorted(["action", "attempt_id", "attributes", "event_type", "evidence",
                        "idempotency_key_sha256", "learning", "operation_id", "parent_event_id",
                        "phase_seq", "privacy", "producer", "subject"])
RECORD_KEYS = sorted(SEMANTIC_KEYS + ["event_id", "event_key", "occurred_at", "occurred_at_source",
                                      "recorded_at", "schema", "schema_version", "semantic_sha256"])
SCHEMA = '"clawsweeper.state-ledger-event.v1"'


def assemble(m, event_id, event_key, occurred_at, source, recorded_at):
    """(semantic_sha256, file bytes) from the canonical JSON of each semantic member `m`.

    identity rule: semantic_sha256 = sha256(canonical {"occurrence": O, "semantic": S});
    the record is S plus the non-semantic fields, keys in byte order. Identifiers and timestamps
    are plain ASCII and need no escaping.
    """
    semantic = "{" + ",".join(f'"{k}":{m[k]}' for k in SEMANTIC_KEYS if k in m) + "}"
    if source:
        occurrence = f'{{"occurred_at":"{occurred_at}","occurred_at_source":"source"}}'
    else:
        occurrence = '{"occurred_at_source":"generated"}'
    digest = sha('{"occurrence":' + occurrence + ',"semantic":' + semantic + "}")
    m = dict(m, event_id=f'"{event_id}"', event_key=f'"{event_key}"',
             occurred_at=f'"{occurred_at}"',
             occurred_at_source='"source"' if source else '"generated"',
             recorded_at=f'"{recorded_at}"', schema=SCHEMA, schema_version="1",
             semantic_sha256=f'"{digest}"')
    return digest, "{" + ",".join(f'"{k}":{m[k]}' for k in RECORD_KEYS if k in m) + "}\n"


def slug(repo):
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", repo)


def repo_dir(repo):
    return f"{slug(repo)}-{sha(repo)[:12]}"


class Template:
    """One day1 event, split into what is copied and what is rewritten per cycle."""

    __slots__ = ("fixed", "op", "attempt", "idem", "parent", "producer", "subject", "evidence",
                 "scope", "key_hex", "repo", "source", "occurred_at", "recorded_at", "event_id",
                 "event_type", "size")


def load_templates(root, date):
    """The day1 jobs (spools, in name order), each a list of Templates in recording order."""
    shift = datetime.date.fromisoformat(date) - datetime.date.fromisoformat(TEMPLATE_DATE)

    def moved(ts):
        if not shift:
            return ts
        return (datetime.date.fromisoformat(ts[:10]) + shift).isoformat() + ts[10:]

    jobs = []
    for name in sorted(os.listdir(root)):
        spool = os.path.join(root, name, SPOOL_DIR)
        if not os.path.isdir(spool):
            continue
        events, line_of = [], {}
        for d in sorted(os.listdir(spool)):
            if d.startswith("_"):
                continue
            for f in sorted(os.listdir(os.path.join(spool, d))):
                with open(os.path.join(spool, d, f), encoding="utf-8") as fh:
                    line = fh.read()
                e = json.loads(line)
                line_of[e["event_id"]] = line
                events.append(e)
        events.sort(key=lambda e: (e["recorded_at"], e["event_id"]))
        job = []
        for e in events:
            # Our assembly must reproduce the reference's bytes and digests for every template.
            digest, rebuilt = assemble({k: cj(e[k]) for k in SEMANTIC_KEYS if k in e},
                                       e["event_id"], e["event_key"], e["occurred_at"],
                                       e["occurred_at_source"] == "source", e["recorded_at"])
            if (rebuilt != line_of[e["event_id"]] or digest != e["semantic_sha256"]
                    or sha(e["subject"]["repository"] + "\n" + e["event_key"]) != e["event_id"]):
                sys.exit(f"gen-spools: cannot reproduce template event {e['event_id']}")
            t = Template()
            t.fixed = {k: cj(e[k]) for k in ("action", "attributes", "event_type", "learning",
                                             "phase_seq", "privacy") if k in e}
            t.op, t.attempt, t.idem = e["operation_id"], e["attempt_id"], e["idempotency_key_sha256"]
            t.parent = e["parent_event_id"]
            t.producer = cj(e["producer"])
            t.subject = e["subject"]
            t.evidence = e.get("evidence")
            t.scope, t.key_hex = e["event_key"].split(":", 1)
            t.repo = e["subject"]["repository"]
            t.source = e["occurred_at_source"] == "source"
            t.occurred_at, t.recorded_at = moved(e["occurred_at"]), moved(e["recorded_at"])
            t.event_id = e["event_id"]
            t.event_type = e["event_type"]
            t.size = len(line_of[e["event_id"]])
            job.append(t)
        if job:
            jobs.append(job)
    if not jobs:
        sys.exit(f"gen-spools: no template spools under {root}")
    return jobs


class Generator:
    def __init__(self, jobs, seed, variants):
        self.jobs = jobs
        self.seed = seed
        self.variants = variants
        self.run_ids = sorted({json.loads(t.producer)["run_id"] for job in jobs for t in job})
        self._cycle = None

    def cycle(self, c):
        """Per-cycle maps: salt, repositories, producers, run ids, new event ids."""
        if self._cycle and self._cycle["c"] == c:
            return self._cycle
        salt = f"gen-spools/{GEN_VERSION}/{self.seed}/{c}/"
        v = c % self.variants
        offset = (self.seed * 10**6 + c + 1) * 10**6
        runs = {r: str(int(r) + offset) if r.isdigit() else f"{r}-{self.seed}-{c}" for r in self.run_ids}
        repos, producers, ids = {}, {}, {}
        for job in self.jobs:
            for t in job:
                if t.repo not in repos:
                    owner, name = t.repo.split("/", 1)
                    new = t.repo if v == 0 else f"{owner}/{name}-v{v}"
                    repos[t.repo] = (new, repo_dir(new), f"/{slug(t.repo)}/", f"/{slug(new)}/")
                if t.producer not in producers:
                    p = json.loads(t.producer)
                    p["run_id"] = runs[p["run_id"]]
                    p["sha"] = sha(salt + p["sha"])[:40]
                    producers[t.producer] = (cj(p), sha(cj(p)))
                key = f"{t.scope}:{sha(salt + t.key_hex)}"
                ids[t.event_id] = (key, sha(repos[t.repo][0] + "\n" + key))
        self._cycle = {"c": c, "salt": salt, "runs": runs, "repos": repos,
                       "producers": producers, "ids": ids}
        return self._cycle

    def text(self, s, cy, old_number, new_number, repo):
        """Rewrites run ids, the subject number and the repository slug inside a path or URL."""
        runs, old = cy["runs"], str(old_number)

        def digits(m):
            x = m.group()
            return runs.get(x) or (str(new_number) if x == old else x)

        _, _, old_seg, new_seg = cy["repos"][repo]
        return DIGITS.sub(digits, s).replace(old_seg, new_seg)

    def event(self, t, c):
        """(spool-relative directory, event id, file bytes, producer, producer digest)."""
        cy = self.cycle(c)
        salt = cy["salt"]
        new_repo, rdir, _, _ = cy["repos"][t.repo]
        key, event_id = cy["ids"][t.event_id]
        producer, producer_digest = cy["producers"][t.producer]
        subject = dict(t.subject)
        subject["repository"] = new_repo
        old_n = subject.get("number")
        new_n = old_n + NUMBER_STEP * c if old_n is not None else None
        if old_n is not None:
            subject["number"] = new_n
        if "record_path" in subject:
            subject["record_path"] = self.text(subject["record_path"], cy, old_n, new_n, t.repo)
        m = dict(t.fixed)
        m["operation_id"] = f'"{sha(salt + t.op)}"'
        m["attempt_id"] = f'"{sha(salt + t.attempt)}"'
        m["idempotency_key_sha256"] = f'"{sha(salt + t.idem)}"'
        parent = cy["ids"][t.parent][1] if t.parent in cy["ids"] else t.parent
        m["parent_event_id"] = f'"{parent}"' if parent else "null"
        m["producer"] = producer
        m["subject"] = cj(subject)
        if t.evidence:
            entries = []
            for e in t.evidence:
                e = dict(e)
                if "sha256" in e:
                    e["sha256"] = sha(salt + e["sha256"])
                for k in ("report_path", "run_url"):
                    if k in e:
                        e[k] = self.text(e[k], cy, old_n, new_n, t.repo)
                entries.append(cj(e))
            entries.sort(key=str.encode)  # canonical order: sorted by canonical JSON bytes
            m["evidence"] = "[" + ",".join(entries) + "]"
        _, data = assemble(m, event_id, key, t.occurred_at, t.source, t.recorded_at)
        return rdir, event_id, data.encode(), producer_digest

def plan(jobs, events, spools, variants):
    """Per spool, the list of (global job serial, events taken from that job); checks limits."""
    per = [events // spools + (1 if k < events % spools else 0) for k in range(spools)]
    out, g = [], 0
    for k, n in enumerate(per):
        taken, producers, size, dirs = [], 0, 0, collections.Counter()
        while n > 0:
            c, j = divmod(g, len(jobs))
            take = min(n, len(jobs[j]))
            part = jobs[j][:take]
            taken.append((g, take))
            producers += len({t.producer for t in part})
            size += sum(t.size for t in part)
            for t in part:
                dirs[(t.repo, c % variants)] += 1
            n -= take
            g += 1
        if producers > MAX_PRODUCERS or per[k] > MAX_EVENTS or size > MAX_BYTES * 0.95:
            sys.exit(f"gen-spools: spool {k} would hold {per[k]} events, {producers} producers, "
                     f"{size} bytes (limits {MAX_EVENTS}, {MAX_PRODUCERS}, {MAX_BYTES}); "
                     f"use more spools (about {DEFAULT_EVENTS_PER_SPOOL} events each)")
        if max(dirs.values()) > MAX_ENTRIES:
            sys.exit(f"gen-spools: spool {k} would put {max(dirs.values())} events in one "
                     f"repository directory (limit {MAX_ENTRIES}); use more spools")
        out.append(taken)
    return out


GEN = None
OUT = None
DATE = None


def write_spool(arg):
    k, taken = arg
    root = os.path.join(OUT, f"spool-{k:06d}", SPOOL_DIR)
    os.makedirs(os.path.join(root, "_partitions"))
    made, markers, types = set(), set(), collections.Counter()
    nbytes = 0
    for g, take in taken:
        c, j = divmod(g, len(GEN.jobs))
        for t in GEN.jobs[j][:take]:
            rdir, event_id, data, producer_digest = GEN.event(t, c)
            if rdir not in made:
                os.mkdir(os.path.join(root, rdir))
                made.add(rdir)
            fd = os.open(os.path.join(root, rdir, event_id + ".json"),
                         os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            os.write(fd, data)
            os.close(fd)
            nbytes += len(data)
            types[t.event_type] += 1
            if producer_digest not in markers:
                markers.add(producer_digest)
                with open(os.path.join(root, "_partitions", producer_digest + ".txt"), "w") as fh:
                    fh.write(DATE + "\n")
    return len(markers), nbytes, types


def main():
    global GEN, OUT, DATE
    if sys.argv[1:] == ["--version"]:
        print(GEN_VERSION)
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--events", type=int, required=True)
    ap.add_argument("--spools", type=int, default=0, help="default: ceil(events / 10000)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--partition-date", default=TEMPLATE_DATE)
    ap.add_argument("--templates", default=DEFAULT_TEMPLATES)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="worker processes")
    ap.add_argument("--stats", action="store_true", help="print the event type mix as JSON")
    a = ap.parse_args()
    if a.events < 1 or a.seed < 0 or a.seed >= 1000:
        sys.exit("gen-spools: --events must be >= 1 and --seed in 0..999")
    spools = a.spools or math.ceil(a.events / DEFAULT_EVENTS_PER_SPOOL)
    if not 1 <= spools <= a.events:
        sys.exit("gen-spools: --spools must be between 1 and --events")
    datetime.date.fromisoformat(a.partition_date)
    started = time.monotonic()
    jobs = load_templates(a.templates, a.partition_date)
    per_spool = math.ceil(a.events / spools)
    day = sum(len(j) for j in jobs)
    variants = per_spool // day + 2  # a spool spans < variants cycles: each cycle its own dirs
    taken = plan(jobs, a.events, spools, variants)
    if os.path.exists(a.out) and os.listdir(a.out):
        sys.exit(f"gen-spools: {a.out} exists and is not empty")
    os.makedirs(a.out, exist_ok=True)
    OUT, DATE = a.out, a.partition_date
    GEN = Generator(jobs, a.seed, variants)
    work = list(enumerate(taken))
    if a.jobs > 1 and len(work) > 1:
        with multiprocessing.get_context("fork").Pool(min(a.jobs, len(work))) as pool:
            results = pool.map(write_spool, work, chunksize=1)
    else:
        results = [write_spool(w) for w in work]
    producers = sum(r[0] for r in results)
    nbytes = sum(r[1] for r in results)
    types = collections.Counter()
    for r in results:
        types.update(r[2])
    print(f"gen-spools: {a.events} events, {spools} spools, {producers} producer runs, "
          f"{nbytes} bytes, {time.monotonic() - started:.1f} s", file=sys.stderr)
    if a.stats:
        day1 = collections.Counter(t.event_type for job in jobs for t in job)
        print(json.dumps({"events": a.events, "spools": spools, "producers": producers,
                          "bytes": nbytes, "event_types": dict(types.most_common()),
                          "day1_event_types": dict(day1.most_common())}))


if __name__ == "__main__":
    main()
