#!/usr/bin/env python3
"""Generates synthetic spools of valid ledger events for benchmarks (deterministic).

usage: gen-ledger.py OUT_DIR SPOOLS PRODUCERS_PER_SPOOL EVENTS_PER_PRODUCER

Each spool gets its own run id; each producer (a component) records a parent chain of
review.item events on issue subjects (one subject repository per producer). Digests follow the event identity rules (event id, semantic digest);
the files are canonical JSON as action-ledger writes them, so `action-ledger seal` accepts them.
"""
import hashlib, json, os, sys

def cj(v): return json.dumps(v, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
def sha(s): return hashlib.sha256(s.encode()).hexdigest()

out, spools, producers, per = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
for s in range(spools):
    root = os.path.join(out, f"spool-{s:04d}", ".clawsweeper-repair", "action-events")
    os.makedirs(os.path.join(root, "_partitions"), exist_ok=True)
    for p in range(producers):
        # One subject repository per producer keeps each spool directory under 4,096 entries.
        repo = f"openclaw/repo-{p}"
        repo_dir = f"openclaw-repo-{p}-{sha(repo)[:12]}"
        os.makedirs(os.path.join(root, repo_dir), exist_ok=True)
        producer = {"component": f"bench-{p}.step.default", "job": "bench", "repository": "openclaw/clawsweeper",
                    "run_attempt": 1, "run_id": str(900000 + s), "sha": "0" * 40, "workflow": "bench.yml"}
        with open(os.path.join(root, "_partitions", sha(cj(producer)) + ".txt"), "w") as f:
            f.write("2026-03-10\n")
        parent = None
        for i in range(per):
            n = (s * producers + p) * per + i + 1
            ts = f"2026-03-10T{(i // 3600) % 24:02d}:{(i // 60) % 60:02d}:{i % 60:02d}.000Z"
            key = "review.item:" + sha(cj({"n": n}))
            semantic = {
                "action": {"mutation": False, "name": "review.item", "retryable": True, "status": "started"},
                "attempt_id": sha(f"attempt-{s}-{p}"), "event_type": "review.item",
                "idempotency_key_sha256": sha(f"idem-{n}"), "operation_id": sha(f"op-{s}-{p}"),
                "parent_event_id": parent, "phase_seq": i + 1,
                "privacy": {"classification": "internal", "fields_dropped": [], "redaction_version": "v1"},
                "producer": producer, "subject": {"kind": "issue", "number": n, "repository": repo},
                "attributes": {"duration_ms": n % 1000, "model": "gpt-5.1-codex"},
            }
            event_id = sha(repo + "\n" + key)
            record = dict(semantic)
            record.update({
                "event_id": event_id, "event_key": key, "occurred_at": ts, "occurred_at_source": "generated",
                "recorded_at": ts, "schema": "clawsweeper.state-ledger-event.v1", "schema_version": 1,
                "semantic_sha256": sha(cj({"occurrence": {"occurred_at_source": "generated"}, "semantic": semantic})),
            })
            with open(os.path.join(root, repo_dir, event_id + ".json"), "w") as f:
                f.write(cj(record) + "\n")
            parent = event_id
