#!/usr/bin/env bash
# End-to-end check of `action-ledger serve` with the real DashClaw Python SDK (dashclaw==5.33.9,
# installed into a virtual environment) against the built binary and real git:
#   - run_governed returns the callback's value; a raising callback is reported `failed` with
#     its message and the error propagates;
#   - a second claim of one action, and a claim with another act, raise ExecutionClaimError;
#   - a second outcome is answered 409 with current_status; get_action_outcome has its fields;
#   - 32 threads claim one action: exactly one winner;
#   - a wrong key is answered 401;
#   - a require_approval action is found with get_pending_approvals and approved by an operator
#     while run_governed waits, then claimed and completed;
#   - idempotency keys: a blocked create_action raises GuardBlockedError on its replay too; a
#     key reused for another act is answered 422; the same request again replays;
#   - listings: get_actions (filtered by status, agent and type), get_pending_approvals (the
#     operator finds the waiting action there), get_guard_decisions (by verdict), each refusing
#     a bad parameter with 400, and /api/actions/stats;
#   - cancel (through the SDK's _request): success, 400 without a reason, 409 NOT_CANCELLABLE,
#     404, a claim after it refused; update_outcome keeps error_message, timestamp_end, tokens,
#     cost, model and duration and refuses executed_despite, and tokens sent without a status;
#   - resolve_containment: a contained action (allow_contained) is refused 409 before its run
#     completes, 403 for a non-operator key and for its creator; promote answers the grant, which
#     the agent claims with the merge act; a second verdict is 409; discard answers {action};
#   - the full action record: create_action's goal, risk, systems, reversible and reasoning read
#     back from get_action and get_pending_approvals, the act scrubbed of a token; bad details
#     are 400 naming the field and the rule;
#   - the cron sweep: 401 without the secret, 503 on a server without one, 200 not sweeping a fresh
#     action with it;
#   - two servers on different repositories sharing one bare remote (with the pre-receive hook
#     installed): 32 claimers spread over both, exactly one winner; outcomes one-shot across them;
#   - SIGHUP reloads the keys file (a key added while it runs works, the server runs on), /metrics
#     counts the reload, and no key or secret reaches a server's log;
#   - wait_for_approval hears an approval and a denial on GET /api/stream, with no poll of
#     GET /api/actions/{id} (counted in the server's access log);
#   - SIGTERM stops each server with exit code 0, with an event stream open;
#   then `verify` and `git fsck --strict` are clean on every repository.
# If the package index cannot be reached, prints a SKIP line and exits 0.
# Usage: scripts/e2e-serve.sh   (BIN=path/to/action-ledger to choose the binary;
#                                SERVE_VENV=dir to reuse a virtual environment that has dashclaw)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
bin=${BIN:-${CARGO_TARGET_DIR:-$here/target}/debug/action-ledger}
[ -x "$bin" ] || (cd "$here" && cargo build --quiet)
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
export GIT_AUTHOR_NAME=tester GIT_AUTHOR_EMAIL=tester@invalid GIT_COMMITTER_NAME=tester GIT_COMMITTER_EMAIL=tester@invalid
unset ACTION_LEDGER_NOW ACTION_LEDGER_API_KEY ACTION_LEDGER_CRON_SECRET SOURCE_DATE_EPOCH
fail() { echo "e2e-serve: FAIL: $*" >&2; for f in "$work"/*.err; do [ -f "$f" ] && { echo "--- $f" >&2; tail -5 "$f" >&2; }; done; exit 1; }
ok() { echo "e2e-serve: ok: $*"; }

# shellcheck source=scripts/lib-dashclaw.sh
. "$here/scripts/lib-dashclaw.sh"
dashclaw_python e2e-serve

newkey() { head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n'; }
sha() { printf %s "$1" | sha256sum | cut -d' ' -f1; }
bot_key=$(newkey) ops_key=$(newkey) cron_secret=$(newkey)
printf '# principal sha256(key) [operator]\nbot %s\nops %s operator\n' "$(sha "$bot_key")" "$(sha "$ops_key")" >"$work/keys"
cat >"$work/policy.json" <<'EOF'
{"default": "allow", "rules": [
  {"id": "deploys", "action_type": "deploy", "verdict": "require_approval", "reason": "deploys need an operator"},
  {"id": "no-drop", "act_kind": "sql", "verdict": "block", "reason": "no SQL from agents"},
  {"id": "sandbox", "act_kind": "file", "verdict": "allow_contained", "containment_ref": "sandbox/e2e"}
]}
EOF

start() { # name, extra args...: starts a server, waits for its listening line, sets $url
  local name=$1; shift
  "$bin" serve --listen 127.0.0.1:0 --api-keys "$work/keys" --policy "$work/policy.json" --json "$@" \
    >"$work/$name.out" 2>"$work/$name.err" &
  local pid=$!
  pids+=("$pid")
  eval "${name}_pid=$pid"
  for _ in $(seq 200); do
    grep -q '"listening"' "$work/$name.out" 2>/dev/null && break
    kill -0 "$pid" 2>/dev/null || fail "$name did not start: $(cat "$work/$name.err")"
    sleep 0.05
  done
  url=$("$py" -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["url"])' "$work/$name.out")
  grep -q "^listening on $url\$" "$work/$name.err" || fail "$name: no 'listening on $url' line on stderr"
  eval "${name}_url=$url"
}
stop() { # name: SIGTERM, expect exit 0
  local pid_var="${1}_pid"
  kill -TERM "${!pid_var}"
  local rc=0
  wait "${!pid_var}" || rc=$?
  [ "$rc" = 0 ] || fail "$1 exited $rc after SIGTERM"
}

# Refusals at start: no key, or no auth off loopback.
if "$bin" serve --repo "$work/x.git" --listen 127.0.0.1:0 2>"$work/nokey.txt"; then fail "started without keys"; fi
grep -q "no API key configured" "$work/nokey.txt" || fail "no-key refusal: $(cat "$work/nokey.txt")"
if "$bin" serve --repo "$work/x.git" --listen 0.0.0.0:0 --insecure-no-auth 2>"$work/nokey.txt"; then fail "started without auth off loopback"; fi
grep -q "only allowed on a loopback" "$work/nokey.txt" || fail "insecure refusal: $(cat "$work/nokey.txt")"
ok "refuses to start without keys, and without auth off loopback"

ACTION_LEDGER_CRON_SECRET=$cron_secret start a --repo "$work/a.git" --sweep-every 0
ok "listening on $a_url (stderr line and --json line)"

cat >"$work/cases.py" <<'EOF'
import hashlib, json, os, sys, threading, time, urllib.request, urllib.error
from dashclaw import DashClaw, DashClawError, ExecutionClaimError, GuardBlockedError

url, bot_key, ops_key = sys.argv[1], os.environ["BOT_KEY"], os.environ["OPS_KEY"]
case = sys.argv[2]
agent = "agent-e2e"

def ok(msg):
    print("e2e-serve: ok: " + msg, flush=True)

def raw(method, path, body=None, key=bot_key, headers=None):
    h = {"Content-Type": "application/json", **({"x-api-key": key} if key else {}), **(headers or {})}
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url + path, data=data, headers=h, method=method)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())

def action_id_for(principal, key):
    # The server names the action of an idempotency key after the key and the principal.
    d = hashlib.sha256(f"action-ledger idempotency\n{principal}\n{key}".encode()).hexdigest()
    return "act_" + d[:32]

dc = DashClaw(url, bot_key, agent)
act = {"kind": "shell", "command": "deploy.sh --token=abc123 prod"}

def recorded(goal, a=act):
    d = dc.guard({"action_type": "build", "declared_goal": goal, "act": a,
                  "client_capabilities": ["execution_claims"]}, record=True)
    assert d["recorded"] is True and d["execution_claim_required"] is True and d["claim_protocol"] == 1, d
    return d["action_id"]

if case == "sdk":
    v = dc.run_governed(act, {"action_type": "build", "declared_goal": "ship it"}, lambda: 42)
    assert v == 42, v
    ok("run_governed returns the callback's value")

    try:
        dc.run_governed(act, {"action_type": "build", "declared_goal": "break it",
                              "idempotency_key": "failure-case"},
                        lambda: (_ for _ in ()).throw(RuntimeError("boom")))
        raise AssertionError("no error")
    except RuntimeError as e:
        assert str(e) == "boom"
    o = dc.get_action_outcome(action_id_for("bot", "failure-case"))
    assert o["status"] == "failed" and o["error_message"] == "boom", o
    ok("run_governed failure: the error propagates, the outcome is failed with its message")

    aid = recorded("claim twice")
    c = dc.claim_execution(aid, act)
    assert c["claimed"] is True and c["action_id"] == aid
    try:
        dc.claim_execution(aid, act)
        raise AssertionError("second claim granted")
    except ExecutionClaimError as e:
        assert e.__cause__.status == 409, e.__cause__.status
    ok("a second claim is refused with ExecutionClaimError (409)")

    dc.report_action_outcome(aid, "completed", summary="done with sk-abcdefghijklmnop")
    try:
        dc.report_action_outcome(aid, "failed", error_message="late")
        raise AssertionError("second outcome accepted")
    except DashClawError as e:
        assert e.status == 409, e.status
    status, body = raw("POST", f"/api/actions/{aid}/outcome", {"status": "completed"})
    assert status == 409 and body["current_status"] == "completed", (status, body)
    ok("a second outcome is answered 409 with current_status")

    o = dc.get_action_outcome(aid)
    assert set(o) == {"action_id", "status", "outcome_at", "summary", "error_message", "progress", "elapsed_ms"}, o
    assert o["status"] == "completed" and o["summary"] == "done with [REDACTED]" and o["elapsed_ms"] >= 0, o
    ok("get_action_outcome has action_id, status, outcome_at, summary, error_message, progress, elapsed_ms")

    aid = recorded("other act")
    try:
        dc.claim_execution(aid, {"kind": "shell", "command": "rm -rf /"})
        raise AssertionError("claim with another act granted")
    except ExecutionClaimError:
        pass
    assert dc.claim_execution(aid, act)["claimed"] is True
    ok("a claim with another act is refused; the recorded act is still claimable")

    aid = recorded("race")
    wins, losses, other = [], [], []
    def claim():
        try:
            wins.append(DashClaw(url, bot_key, agent).claim_execution(aid, act)["attempt_id"])
        except ExecutionClaimError as e:
            (losses if getattr(e.__cause__, "status", None) == 409 else other).append(e)
    ts = [threading.Thread(target=claim) for _ in range(32)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    assert len(wins) == 1 and len(losses) == 31 and not other, (wins, len(losses), other)
    assert dc.get_action(aid)["action"]["execution_attempt_id"] == wins[0]
    ok("32 threads claim one action: exactly one winner, 31 conflicts")

    try:
        DashClaw(url, "wrong-key", agent).get_action(aid)
        raise AssertionError("wrong key accepted")
    except DashClawError as e:
        assert e.status == 401, e.status
    status, body = raw("POST", "/api/guard", {"action_type": "x"}, key=None)
    assert status == 401 and set(body) == {"error"}, (status, body)
    ok("a wrong or missing key is answered 401 and nothing else")

    # require_approval: run_governed waits; an operator approves; it claims and completes.
    key = "approval-case"
    aid = action_id_for("bot", key)
    result = {}
    def governed():
        try:
            result["value"] = dc.run_governed(act, {"action_type": "deploy", "declared_goal": "prod",
                                                    "idempotency_key": key}, lambda: "deployed")
        except Exception as e:
            result["error"] = e
    t = threading.Thread(target=governed)
    t.start()
    # The operator finds it among the pending approvals (GET /api/actions?status=pending_approval).
    ops = DashClaw(url, ops_key, "operator-console")
    for _ in range(200):
        pending = ops.get_pending_approvals()
        if [a["action_id"] for a in pending["actions"]] == [aid]:
            break
        time.sleep(0.05)
    else:
        raise AssertionError("no pending approval appeared")
    assert pending["total"] == 1 and pending["stats"]["pending_approval"] == 1, pending
    assert pending["actions"][0] == dc.get_action(aid)["action"], pending
    s, b = raw("POST", f"/api/actions/{aid}/approve", {"decision": "approve"})
    assert s == 403, (s, b)
    ops.approve_action(aid, "allow")
    t.join(60)
    assert result.get("value") == "deployed", result
    a = dc.get_action(aid)["action"]
    assert a["approved_by"] == "ops" and a["status"] == "completed" and a["approval_grant_used_at"], a
    ok("require_approval: an operator finds it with get_pending_approvals and approves while the SDK waits; it claims, runs and completes")

    # A replayed blocked creation is blocked again; a key reused for another request is refused
    # (422), never answered with the first action.
    drop = {"kind": "sql", "command": "DROP TABLE prod"}
    for attempt in range(2):
        try:
            dc.create_action("drop-prod", "drop it", act=drop, idempotency_key="k-c")
            raise AssertionError(f"blocked creation returned (attempt {attempt})")
        except GuardBlockedError:
            pass
    first = dc.create_action("list-files", "look", act={"kind": "shell", "command": "ls /tmp"},
                             client_capabilities=["execution_claims"], idempotency_key="order-42")
    try:
        dc.create_action("delete-data", "look", act={"kind": "shell", "command": "rm -rf /srv/data"},
                         client_capabilities=["execution_claims"], idempotency_key="order-42")
        raise AssertionError("a reused key was answered")
    except GuardBlockedError:
        raise
    except DashClawError as e:
        assert e.status == 422, e.status
    again = dc.create_action("list-files", "look", act={"kind": "shell", "command": "ls /tmp"},
                             client_capabilities=["execution_claims"], idempotency_key="order-42")
    assert again["action_id"] == first["action_id"] and again["idempotent_replay"] is True, again
    ok("idempotency keys: a blocked creation replays as blocked, a reused key is 422, a retry replays")

    # Listings (issue 45): every action, filtered, the pending approvals and the guard decisions;
    # a bad limit or verdict is answered 400.
    page = dc.get_actions(limit=200)
    assert {"actions", "total", "stats", "lastUpdated"} <= set(page), sorted(page)
    ids = {a["action_id"] for a in page["actions"]}
    assert aid in ids and first["action_id"] in ids, ids
    assert page["total"] == len(page["actions"]) == page["stats"]["total"], page["total"]
    assert next(a for a in page["actions"] if a["action_id"] == aid) == dc.get_action(aid)["action"]
    done = dc.get_actions(status="completed", agent_id=agent)
    assert done["actions"] and all(a["status"] == "completed" and a["agent_id"] == agent
                                   for a in done["actions"]), done
    assert aid in {a["action_id"] for a in done["actions"]}, done
    assert dc.get_actions(action_type="drop-prod")["actions"][0]["status"] == "blocked"
    assert dc.get_pending_approvals()["total"] == 0
    for bad in (lambda: dc.get_actions(limit=0), lambda: dc.get_pending_approvals(limit="ten"),
                lambda: dc.get_actions(status="done")):
        try:
            bad()
            raise AssertionError("a bad listing parameter was answered")
        except DashClawError as e:
            assert e.status == 400, e.status
    ok(f"get_actions lists {page['total']} actions with the rows get_action shows, filtered by status, agent and type; "
       "get_pending_approvals is empty once approved; a bad limit or status is 400")

    g = dc.get_guard_decisions(limit=1000)
    assert g["total"] == len(g["decisions"]) > 0 and all(d["agent_id"] == agent for d in g["decisions"]), g["total"]
    blocks = dc.get_guard_decisions(decision="block")["decisions"]
    assert blocks and all(d["decision"] == "block" and d["matched_policies"] == ["no-drop"] for d in blocks), blocks
    approvals = dc.get_guard_decisions(decision="require_approval")["decisions"]
    assert [d["action_type"] for d in approvals] == ["deploy"], approvals
    try:
        dc.get_guard_decisions(decision="maybe")
        raise AssertionError("a bad verdict was answered")
    except DashClawError as e:
        assert e.status == 400, e.status
    s, b = raw("GET", "/api/actions/stats")
    assert s == 200 and b["total"] == page["total"] and b["approval"] == 0, (s, b)
    ok(f"get_guard_decisions lists the agent's {g['total']} decisions, filtered by verdict; a bad verdict is 400; "
       "/api/actions/stats counts every action")

    # Cancel (issue 45): the SDK has no method for it, so its low-level _request posts it.
    cid = recorded("cancel me")
    try:
        dc._request(f"/api/actions/{cid}/cancel", method="POST", body={})
        raise AssertionError("a cancel without a reason was answered")
    except DashClawError as e:
        assert e.status == 400, e.status
    c = dc._request(f"/api/actions/{cid}/cancel", method="POST", body={"reason": "not needed"})
    assert c["ok"] is True and c["action_id"] == cid and c["status"] == "cancelled", c
    assert dc.get_action(cid)["action"]["status"] == "cancelled"
    s, b = raw("POST", f"/api/actions/{cid}/cancel", {"reason": "again"}, key=ops_key)
    assert s == 409 and b["code"] == "NOT_CANCELLABLE" and b["current_status"] == "cancelled", (s, b)
    try:
        dc.claim_execution(cid, act)
        raise AssertionError("a cancelled action was claimed")
    except ExecutionClaimError:
        pass
    s, b = raw("POST", "/api/actions/act_nope/cancel", {"reason": "x"})
    assert s == 404, (s, b)
    ok("cancel: a never-claimed action is cancelled once; no reason is 400, a second cancel 409 NOT_CANCELLABLE, "
       "a claim after it is refused, an unknown id 404")

    # resolve_containment (issue 45): a contained action awaits promotion once its run completed.
    ops = DashClaw(url, ops_key, "operator-console")
    file_act = {"kind": "file", "path": "src/lib.rs"}
    def contained(goal, client=dc):
        d = client.guard({"action_type": "write", "declared_goal": goal, "act": file_act,
                          "client_capabilities": ["execution_claims", "allow_contained"]}, record=True)
        assert d["decision"] == "allow_contained", d
        return d["action_id"]
    def completed(aid, client=dc):
        client.claim_execution(aid, file_act)
        client.report_action_outcome(aid, "completed")
    kid = contained("contain me")
    def refused(client, aid, verdict):
        try:
            client.resolve_containment(aid, verdict)
        except DashClawError as e:
            return e.status
        raise AssertionError(f"resolve_containment({verdict}) was answered")
    assert refused(ops, kid, "promote") == 409
    assert dc.get_action(kid)["action"]["containment_status"] == "contained"
    completed(kid)
    assert dc.get_action(kid)["action"]["containment_status"] == "awaiting_promotion"
    assert refused(dc, kid, "promote") == 403
    s, b = raw("POST", f"/api/actions/{kid}/containment", {"verdict": "merge"}, key=ops_key)
    assert s == 400 and b["error"] == "Invalid verdict. Must be promote or discard.", (s, b)
    r = ops.resolve_containment(kid, "promote")
    assert r["action"]["action_id"] == kid and r["action"]["containment_status"] == "promoted", r
    grant = r["promotion_action_id"]
    g = dc.get_action(grant)["action"]
    assert g["status"] == "running" and g["action_type"] == "containment_promote" and g["approved_by"] == "ops", g
    dc.claim_execution(grant, {"kind": "shell", "command": "git merge --no-ff sandbox/e2e"})
    dc.report_action_outcome(grant, "completed")
    s, b = raw("POST", f"/api/actions/{kid}/containment", {"verdict": "discard"}, key=ops_key)
    assert s == 409 and b["error"] == "CONTAINMENT_NOT_AWAITING" and b["containment_status"] == "promoted", (s, b)
    own = contained("ops' own", client=ops)
    completed(own, client=ops)
    s, b = raw("POST", f"/api/actions/{own}/containment", {"verdict": "discard"}, key=ops_key)
    assert s == 403 and b["code"] == "SELF_APPROVAL_FORBIDDEN", (s, b)
    did = contained("discard me")
    completed(did)
    r = ops.resolve_containment(did, "discard")
    assert set(r) == {"action"} and r["action"]["containment_status"] == "discarded", r
    assert refused(ops, "act_nope", "discard") == 404
    listed = [a["action_id"] for a in ops.list_contained("promoted")["actions"]]
    assert kid in listed and did not in listed, listed
    assert [a["action_id"] for a in ops.list_contained()["actions"]] == [own], "awaiting promotion"
    ok("resolve_containment: 409 before the contained run completed, 403 for a non-operator and for the "
       "creator, 400 for a bad verdict; promote answers a running grant the agent claims with the merge act; "
       "a second verdict is 409 CONTAINMENT_NOT_AWAITING; discard answers {action}; an unknown id 404; "
       "list_contained filters by containment status")

    # Legacy close keeps what it is sent (issue 45).
    lid = recorded("close me")
    try:
        dc.update_outcome(lid, status="failed", executed_despite=True)
        raise AssertionError("executed_despite was answered 200")
    except DashClawError as e:
        assert e.status == 400, e.status
    try:
        dc.update_outcome(lid, tokens_in=10)
        raise AssertionError("tokens without a status were answered 200")
    except DashClawError as e:
        assert e.status == 400, e.status
    dc.update_outcome(lid, status="failed", error_message="kaput", timestamp_end="2026-03-01T12:00:00.250Z",
                      tokens_in=1200, tokens_out=340, cost_estimate=0.0425, model="m-1", duration_ms=5321)
    a = dc.get_action(lid)["action"]
    assert a["status"] == "failed" and a["error_message"] == "kaput", a
    assert a["timestamp_end"] == "2026-03-01T12:00:00.250Z" and a["outcome_at"] != a["timestamp_end"], a
    got = {k: a[k] for k in ("tokens_in", "tokens_out", "cost_estimate", "model", "duration_ms")}
    assert got == {"tokens_in": 1200, "tokens_out": 340, "cost_estimate": 0.0425, "model": "m-1",
                   "duration_ms": 5321}, got
    ok("update_outcome keeps error_message, timestamp_end, tokens, cost, model and duration; "
       "executed_despite, and tokens without a status, are refused with 400")

    # The full action record (issue 45): create_action keeps the goal, risk, systems,
    # reversibility, reasoning and the act, which reads back scrubbed; bad details are 400.
    secret = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1"
    full_act = {"kind": "shell",
                "command": f"git -c http.extraHeader='Authorization: Bearer {secret}' push origin v2"}
    r = dc.create_action("deploy", "publish release v2", act=full_act, risk_score=85,
                         systems_touched=["github", "release-store"], reversible=False,
                         reasoning="customers wait for the fix",
                         client_capabilities=["execution_claims"])
    fid = r["action_id"]
    assert r["action"]["status"] == "pending_approval" and r["security"]["clean"] is False, r
    a = dc.get_action(fid)["action"]
    assert a["declared_goal"] == "publish release v2" and a["risk_score"] == 85, a
    assert a["systems_touched"] == ["github", "release-store"] and a["reversible"] is False, a
    assert a["reasoning"] == "customers wait for the fix" and a["idempotency_key"], a
    assert a["act"]["command"] == "git -c http.extraHeader='Authorization: Bearer [REDACTED]' push origin v2", a
    assert a["act_redacted"] is False, a
    assert [p for p in dc.get_pending_approvals()["actions"] if p["action_id"] == fid] == [a]
    assert secret not in json.dumps(dc.get_action(fid)), "the token reached an answer"
    assert [x["action_id"] for x in dc.get_actions(risk_min=85)["actions"]] == [fid]
    for bad, field in [({"risk_score": 101}, "risk_score must be <= 100"),
                       ({"systems_touched": "github"}, "systems_touched must be an array"),
                       ({"reversible": "no"}, "reversible must be a boolean")]:
        try:
            dc.create_action("build", "bad " + field, act=act, **bad)
            raise AssertionError(f"{bad} was answered")
        except DashClawError as e:
            assert e.status == 400, e.status
        s, b = raw("POST", "/api/actions", {"action_type": "build", "agent_id": agent, **bad})
        assert s == 400 and field in b["details"], (s, b)
    ok("create_action keeps goal, risk, systems, reversible and reasoning; the act reads back scrubbed "
       "(no token in any answer); bad details are 400 naming the field and the rule")

elif case == "stream":
    # wait_for_approval through GET /api/stream (issue 45): an operator decides while the SDK
    # waits, and the SDK hears it on the stream. The SDK reads the action once when it starts
    # waiting and, on an approval, once more for the result; a poll is any other
    # GET /api/actions/{id}: the interval (30 s) is longer than the whole wait, so a poll can
    # only come from the stream failing (the SDK then polls at once and waits out the interval).
    log = sys.argv[3]
    ops = DashClaw(url, ops_key, "operator-console")
    def reads():
        n = 0
        for line in open(log):
            if '"type":"access"' in line:
                e = json.loads(line)
                n += e["method"] == "GET" and e["route"] == "/api/actions/{id}" and e.get("principal") == "bot"
        return n
    def streams():
        return sum('"route":"/api/stream"' in line for line in open(log))
    for decision in ("allow", "deny"):
        aid = dc.guard({"action_type": "deploy", "declared_goal": "stream " + decision, "act": act,
                        "client_capabilities": ["execution_claims"]}, record=True)["action_id"]
        assert dc.get_action(aid)["action"]["status"] == "pending_approval"
        before, opened = reads(), streams()
        result = {}
        def wait():
            try:
                result["value"] = dc.wait_for_approval(aid, timeout=20, interval=30)
            except Exception as e:
                result["error"] = e
        t = threading.Thread(target=wait)
        t.start()
        for _ in range(400):
            if streams() > opened:
                break
            time.sleep(0.025)
        else:
            raise AssertionError("the SDK did not open /api/stream")
        time.sleep(0.5)
        decided = time.time()
        ops.approve_action(aid, decision, reasoning="not now" if decision == "deny" else None)
        t.join(25)
        took = time.time() - decided
        polls = reads() - before - (2 if decision == "allow" else 1)
        if decision == "allow":
            assert result.get("value", {}).get("action", {}).get("approved_by") == "ops", result
        else:
            e = result.get("error")
            assert type(e).__name__ == "ApprovalDeniedError" and e.decision == "failed", repr(e)
            assert "not now" in str(e), str(e)
        assert polls == 0, f"the SDK polled GET /api/actions/{{id}} {polls} time(s) while waiting"
        assert took < 5, f"the decision reached the SDK after {took:.1f} s"
        ok(f"wait_for_approval hears the {'approval' if decision == 'allow' else 'denial'} on /api/stream "
           f"in {took:.2f} s, with no poll of GET /api/actions/{{id}}")

elif case == "sweep":
    sweep_url = sys.argv[3]
    secret = os.environ["CRON_SECRET"]
    s, b = raw("GET", "/api/cron/outcome-sweep", key=None)
    assert s == 401, (s, b)
    s, b = raw("GET", "/api/cron/outcome-sweep", key=None, headers={"Authorization": "Bearer wrong"})
    assert s == 401, (s, b)
    aid = sys.argv[4]
    url = sweep_url
    s, b = raw("GET", "/api/cron/outcome-sweep", key=None, headers={"Authorization": "Bearer " + secret})
    # The sweeping server's clock is 2 h ahead: the action is seconds old on its creator's clock,
    # so the sweep only sees it (it times actions on its own clock from the first sighting).
    assert s == 200 and b["ok"] is True and aid not in b["swept"] and b["waiting"] >= 1, (s, b)
    o = dc.get_action_outcome(aid)
    assert o["status"] == "pending", o
    dc.report_action_outcome(aid, "completed")
    ok(f"cron sweep: 401 without the secret, 200 with it; a server 2 h ahead does not sweep a fresh action ({b['waiting']} waiting)")

elif case == "stale":
    print(recorded("left pending"))

elif case == "remote":
    url2 = sys.argv[3]
    aid = recorded("shared")
    wins, losses, other = [], [], []
    def claim(u):
        try:
            wins.append(DashClaw(u, bot_key, agent).claim_execution(aid, act)["attempt_id"])
        except ExecutionClaimError as e:
            (losses if getattr(e.__cause__, "status", None) == 409 else other).append(repr(e.__cause__))
    ts = [threading.Thread(target=claim, args=(url if i % 2 else url2,)) for i in range(32)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    assert len(wins) == 1 and len(losses) == 31 and not other, (wins, len(losses), other)
    other_dc = DashClaw(url2, bot_key, agent)
    assert other_dc.get_action(aid)["action"]["execution_attempt_id"] == wins[0]
    other_dc.report_action_outcome(aid, "completed")
    try:
        dc.report_action_outcome(aid, "failed", error_message="x")
        raise AssertionError("second outcome accepted")
    except DashClawError as e:
        assert e.status == 409
    v = DashClaw(url2, bot_key, agent).run_governed(act, {"action_type": "build", "declared_goal": "via b"}, lambda: "b")
    assert v == "b"
    ok("two servers sharing one remote: 32 claimers over both, one winner; outcomes one-shot across them")
EOF

export BOT_KEY=$bot_key OPS_KEY=$ops_key CRON_SECRET=$cron_secret
"$py" "$work/cases.py" "$a_url" sdk || fail "SDK cases"
"$py" "$work/cases.py" "$a_url" stream "$work/a.err" || fail "stream cases"

# The sweep: an action left pending, then a second server on the same repository whose clock is
# two hours ahead must not sweep it through the cron endpoint (issue 43 item 1).
stale=$("$py" "$work/cases.py" "$a_url" stale) || fail "stale action"
ahead=$(date -u -d '+2 hours' +%Y-%m-%dT%H:%M:%SZ)
ACTION_LEDGER_NOW=$ahead ACTION_LEDGER_CRON_SECRET=$cron_secret start late --repo "$work/a.git" --sweep-every 0
start nosecret --repo "$work/a.git" --sweep-every 0
code=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $cron_secret" "$nosecret_url/api/cron/outcome-sweep")
[ "$code" = 503 ] || fail "sweep without a configured secret answered $code"
"$py" "$work/cases.py" "$a_url" sweep "$late_url" "$stale" || fail "sweep cases"
ok "cron sweep on a server without a secret is 503"

# SIGHUP reloads the keys file while the server runs (issue 45): a key added to the file works
# after `kill -HUP`, the server runs on, /metrics counts the reload, and no key reaches a log.
hup_key=$(newkey)
code=$(curl -s -o /dev/null -w '%{http_code}' -H "x-api-key: $hup_key" "$nosecret_url/api/actions/act_none")
[ "$code" = 401 ] || fail "a key not yet in the keys file answered $code"
printf 'hup-bot %s\n' "$(sha "$hup_key")" >>"$work/keys"
kill -HUP "$nosecret_pid"
for _ in $(seq 200); do grep -q '^reloaded: ' "$work/nosecret.err" && break; sleep 0.05; done
kill -0 "$nosecret_pid" 2>/dev/null || fail "SIGHUP stopped the server"
grep -qx 'reloaded: 3 API key(s), 3 policy rule(s)' "$work/nosecret.err" || fail "no reload line: $(tail -3 "$work/nosecret.err")"
code=$(curl -s -o /dev/null -w '%{http_code}' -H "x-api-key: $hup_key" "$nosecret_url/api/actions/act_none")
[ "$code" = 404 ] || fail "the key added before SIGHUP answered $code"
curl -s "$nosecret_url/metrics" | grep -qx 'action_ledger_reloads_total{result="ok"} 1' || fail "/metrics does not count the reload"
grep -q '"type":"access"' "$work/nosecret.err" || fail "no access log line"
for k in "$bot_key" "$ops_key" "$hup_key" "$cron_secret"; do
  ! grep -qF -- "$k" "$work"/*.err || fail "a key or the cron secret reached a server's log"
done
ok "SIGHUP reloads the keys file: the new key works, the server runs on; /metrics counts it; no key in the logs"
# An open event stream does not hold the shutdown: it ends when the server stops.
curl -sN -H "x-api-key: $ops_key" "$a_url/api/stream" >"$work/stream.txt" 2>/dev/null &
stream_pid=$!
pids+=("$stream_pid")
for _ in $(seq 200); do grep -q '^event: connected' "$work/stream.txt" && break; sleep 0.05; done
grep -q '^event: connected' "$work/stream.txt" || fail "no connected event on /api/stream"
started=$(date +%s)
for s in a late nosecret; do stop "$s"; done
[ $(($(date +%s) - started)) -lt 10 ] || fail "an open /api/stream held the shutdown"
wait "$stream_pid" || true
ok "SIGTERM stops the servers with exit code 0, an open /api/stream included"

# Two servers, two repositories, one bare remote with the hook.
export ACTION_LEDGER_BIN=$bin
"$bin" -q hooks install --repo "$work/remote.git"
start b1 --repo "$work/b1.git" --remote "$work/remote.git" --sweep-every 0
start b2 --repo "$work/b2.git" --remote "$work/remote.git" --sweep-every 0
"$py" "$work/cases.py" "$b1_url" remote "$b2_url" || fail "remote cases"
stop b1
stop b2

for repo in a.git remote.git; do
  "$bin" verify --repo "$work/$repo" >"$work/verify.txt" 2>&1 || fail "verify $repo: $(cat "$work/verify.txt")"
  git --git-dir "$work/$repo" fsck --strict >/dev/null 2>"$work/fsck.txt" || fail "fsck $repo: $(cat "$work/fsck.txt")"
  "$bin" verify --repo "$work/$repo" --range "$(git --git-dir "$work/$repo" rev-list --max-parents=0 main)..main" >/dev/null 2>&1 \
    || fail "verify --range of $repo"
done
commits=$(git --git-dir "$work/a.git" rev-list --count main)
ok "verify and git fsck --strict are clean on the server repository ($commits commits) and the shared remote"
echo "e2e-serve: all cases passed"
