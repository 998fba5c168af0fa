#!/usr/bin/env bash
# End-to-end check of the README's GitHub Actions workflows, run verbatim: the `run:` steps of
# every ```yaml block of README.md that starts with `# .github/workflows/...` are extracted from
# the README itself (so the two cannot drift) and executed in order, in a simulated Actions
# environment:
# - the GITHUB_* and RUNNER_* variables Actions sets (and not GITHUB_RUN_STARTED_AT, which it
#   does not), GITHUB_ACTION per step (`__run`, `__run_2`, ... or the step's id);
# - a fresh GITHUB_ENV file per step, applied to the later steps (NAME=value and NAME<<EOF);
# - `if: always()` steps run after a failed step, other steps are skipped;
# - the job's `env:` values that come from secrets, and LEDGER_REMOTE, are given by this script
#   (LEDGER_REMOTE is a local bare server repository with `hooks install`; pushes go through
#   its hook);
# - `uses:` steps are not run (the install step: action-ledger is on the runner's PATH; the
#   checkout: a workspace with the job's own scripts,
#   ci/build.sh and ci/review.sh, whose exit codes each scenario chooses).
# Scenarios: a job that succeeds; a job whose build fails, so it records nothing (its publish
# step must publish nothing and succeed); a job whose review fails (its open start is closed by
# the seal and published); four jobs whose publish steps race each other. Then the scheduled
# workflow (sweep and compact with --remote) when this build has `sweep --remote`. At the end a
# fresh clone of the server verifies clean and holds exactly the expected events.
# Usage: scripts/e2e-ci.sh   (BIN=path/to/action-ledger to choose the binary)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
bin=${BIN:-${CARGO_TARGET_DIR:-$here/target}/debug/action-ledger}
[ -x "$bin" ] || (cd "$here" && cargo build --quiet)
work=$(mktemp -d)
trap '[ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT
fail() { echo "e2e-ci: FAIL: $*" >&2; exit 1; }
pass=0
ok() { pass=$((pass + 1)); echo "e2e-ci: ok: $*"; }
export GIT_AUTHOR_NAME=tester GIT_AUTHOR_EMAIL=tester@invalid GIT_COMMITTER_NAME=tester GIT_COMMITTER_EMAIL=tester@invalid
# Nothing of the ledger's own configuration may leak in from the caller: the workflow sets it.
for v in $(env | sed -n 's/^\(CLAWSWEEPER_[A-Z_]*\|ACTION_LEDGER_[A-Z_]*\|GITHUB_[A-Z_]*\|RUNNER_[A-Z_]*\)=.*/\1/p'); do
  unset "$v"
done

# The runner has action-ledger on PATH (the workflow's install step then does nothing), and so
# has the server, whose hook finds it there.
mkdir -p "$work/runner-bin"
cp "$bin" "$work/runner-bin/action-ledger"
export PATH="$work/runner-bin:$PATH"
server="$work/server/ledger-state.git"
action-ledger -q hooks install --repo "$server"

# The workflows, extracted from README.md: one JSON document with every job's steps.
python3 - "$here/README.md" > "$work/workflows.json" <<'PY'
import json, re, sys, yaml
text = open(sys.argv[1], encoding="utf-8").read()
workflows = {}
for block in re.findall(r"^```yaml\n(.*?)^```", text, re.S | re.M):
    first = block.splitlines()[0]
    m = re.match(r"# \.github/workflows/([\w.-]+)\.yml$", first)
    if m:
        workflows[m.group(1)] = yaml.safe_load(block)
if not workflows:
    sys.exit("no ```yaml block starting with `# .github/workflows/NAME.yml` in README.md")
json.dump(workflows, sys.stdout)
PY

# The runner: runs steps [FROM, TO) of one job, keeping the job's state (environment from
# GITHUB_ENV, whether a step failed) in STATE between calls. Exit 0 when every step that ran
# succeeded; the steps' output goes to the log.
cat > "$work/runner.py" <<'PY'
import json, os, subprocess, sys
workflows_file, workflow, job, state_file, first, last = sys.argv[1:7]
supplied = dict(a.split("=", 1) for a in sys.argv[7:])
spec = json.load(open(workflows_file))[workflow]
steps = spec["jobs"][job]["steps"]
first = int(first)
last = len(steps) if last == "end" else int(last)
if os.path.exists(state_file):
    state = json.load(open(state_file))
else:
    state = {"env": {}, "failed": False, "runs": 0}

def resolve(mapping, where):
    out = {}
    for key, value in (mapping or {}).items():
        value = str(value)
        # The simulator's own values replace secrets and the example's server address.
        if key in supplied:
            value = supplied[key]
        elif "${{" in value:
            sys.exit(f"{where}: env {key} needs a value from the simulator ({value})")
        out[key] = value
    return out

def apply_env_file(path, env):
    lines = open(path, encoding="utf-8").read().split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if not line.strip():
            continue
        if "<<" in line and ("=" not in line or line.index("<<") < line.index("=")):
            name, delim = line.split("<<", 1)
            value = []
            while lines[i] != delim:
                value.append(lines[i])
                i += 1
            i += 1
            env[name] = "\n".join(value)
        else:
            name, value = line.split("=", 1)
            env[name] = value

job_env = resolve(spec["jobs"][job].get("env"), f"{workflow}/{job}")
for index in range(first, last):
    step = steps[index]
    name = step.get("name") or step.get("uses") or step.get("run", "").splitlines()[0]
    if "run" not in step:
        print(f"  [{job} step {index}] skip (uses: {step['uses']}): the simulator provides it", flush=True)
        continue
    state["runs"] += 1
    step_id = step.get("id") or ("__run" if state["runs"] == 1 else f"__run_{state['runs']}")
    condition = str(step.get("if", "")).strip()
    if condition not in ("", "always()"):
        sys.exit(f"step {name!r}: the simulator does not evaluate `if: {condition}`")
    if state["failed"] and condition != "always()":
        print(f"  [{job} step {index}] skipped after a failure: {name}", flush=True)
        continue
    env_file = os.path.join(os.environ["RUNNER_TEMP"], f"_env_{index}")
    path_file = os.path.join(os.environ["RUNNER_TEMP"], f"_path_{index}")
    open(env_file, "w").close()
    open(path_file, "w").close()
    script = os.path.join(os.environ["RUNNER_TEMP"], f"_step_{index}.sh")
    with open(script, "w", encoding="utf-8") as f:
        f.write(step["run"])
    env = dict(os.environ)
    env.update(job_env)
    env.update(state["env"])
    env.update(resolve(step.get("env"), name))
    env.update({"GITHUB_ACTION": step_id, "GITHUB_ENV": env_file, "GITHUB_PATH": path_file})
    for d in state.get("path", []):
        env["PATH"] = d + ":" + env["PATH"]
    print(f"  [{job} step {index}] run: {name}", flush=True)
    code = subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", script],
        cwd=os.environ["GITHUB_WORKSPACE"], env=env,
    ).returncode
    if code != 0:
        print(f"  [{job} step {index}] failed with exit {code}: {name}", flush=True)
        state["failed"] = True
        state.setdefault("failures", []).append(name)
    apply_env_file(env_file, state["env"])
    state.setdefault("path", []).extend(l for l in open(path_file).read().splitlines() if l)
json.dump(state, open(state_file, "w"))
sys.exit(1 if state["failed"] else 0)
PY

# job WORKFLOW JOB RUN_ID FROM TO [build-exit review-exit]: one simulated job (its state and
# directories under $work/runs/RUN_ID); prints the job's log to runs/RUN_ID/log.
job() {
  local workflow=$1 name=$2 run_id=$3 from=$4 to=$5 build_exit=${6:-0} review_exit=${7:-0}
  local dir="$work/runs/$run_id"
  mkdir -p "$dir/workspace/ci" "$dir/temp"
  printf '#!/bin/sh\nexit %s\n' "$build_exit" > "$dir/workspace/ci/build.sh"
  printf '#!/bin/sh\necho "reviewing #$1"\nexit %s\n' "$review_exit" > "$dir/workspace/ci/review.sh"
  chmod +x "$dir/workspace/ci/"*.sh
  env CI=true GITHUB_ACTIONS=true RUNNER_OS=Linux RUNNER_TEMP="$dir/temp" \
    GITHUB_WORKSPACE="$dir/workspace" GITHUB_REPOSITORY=example-org/widgets \
    GITHUB_REPOSITORY_OWNER=example-org GITHUB_SERVER_URL=https://github.com \
    GITHUB_REF=refs/heads/main GITHUB_SHA=0123456789abcdef0123456789abcdef01234567 \
    GITHUB_WORKFLOW="$workflow" \
    GITHUB_WORKFLOW_REF="example-org/widgets/.github/workflows/$workflow.yml@refs/heads/main" \
    GITHUB_EVENT_NAME=workflow_dispatch GITHUB_JOB="$name" GITHUB_RUN_ID="$run_id" \
    GITHUB_RUN_NUMBER="$run_id" GITHUB_RUN_ATTEMPT=1 \
    python3 "$work/runner.py" "$work/workflows.json" "$workflow" "$name" "$dir/state.json" \
    "$from" "$to" "LEDGER_REMOTE=$server" "LEDGER_TOKEN=unused-by-a-path-remote" >>"$dir/log" 2>&1
}
tip() { git -C "$server" rev-parse -q --verify refs/heads/main || echo none; }
steps_of() { python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))[sys.argv[2]]["jobs"][sys.argv[3]]["steps"]))' "$work/workflows.json" "$1" "$2"; }
n=$(steps_of review review)
last=$((n - 1))

job review review 1001 0 end || fail "job 1001 failed: $(cat "$work/runs/1001/log")"
[ "$(tip)" != none ] || fail "job 1001 published nothing: $(cat "$work/runs/1001/log")"
ok "a job that succeeds records its events and publishes them through the hook"

before=$(tip)
if job review review 1002 0 end 1 0; then fail "job 1002 should have failed at its build step"; fi
grep -q "run: Seal and publish the ledger" "$work/runs/1002/log" || fail "job 1002 did not run its final step: $(cat "$work/runs/1002/log")"
grep -q "failed with exit .*: Seal and publish" "$work/runs/1002/log" && fail "job 1002's publish step failed: $(cat "$work/runs/1002/log")"
[ "$(tip)" = "$before" ] || fail "job 1002 recorded nothing but moved the ledger ref"
ok "a job that records nothing (its build failed) seals and publishes nothing, and its final step succeeds"

if job review review 1003 0 end 0 1; then fail "job 1003 should have failed at its review step"; fi
grep -q "failed with exit .*: Seal and publish" "$work/runs/1003/log" && fail "job 1003's publish step failed: $(cat "$work/runs/1003/log")"
ok "a job whose review fails still publishes (the seal closes its open start)"

# Four jobs run to their last step, then their publish steps start together.
for r in 1004 1005 1006 1007; do
  job review review "$r" 0 "$last" || fail "job $r failed before publishing: $(cat "$work/runs/$r/log")"
done
pids=()
for r in 1004 1005 1006 1007; do
  job review review "$r" "$last" end & pids+=($!)
done
for i in "${!pids[@]}"; do
  wait "${pids[$i]}" || fail "racing publish of job $((1004 + i)) failed: $(cat "$work/runs/$((1004 + i))/log")"
done
ok "four jobs whose publish steps race each other all land"

# The scheduled workflow: sweep and compact through --remote.
m=$(steps_of ledger-maintenance maintain)
job ledger-maintenance maintain 2001 0 end || fail "the scheduled workflow failed: $(cat "$work/runs/2001/log")"
ok "the scheduled workflow (sweep and compact with --remote) runs"

# A fresh clone holds exactly the expected events and verifies clean.
git clone -q "$server" "$work/fresh"
action-ledger -q verify --repo "$work/fresh" || fail "the fresh clone does not verify clean"
action-ledger -q log --repo "$work/fresh" --json > "$work/events.jsonl"
python3 - "$work/events.jsonl" <<'PY' || fail "the fresh clone does not hold the expected events"
import collections, json, sys
events = [json.loads(l) for l in open(sys.argv[1])]
by_run = collections.defaultdict(list)
for e in events:
    by_run[e["producer"]["run_id"]].append(e["action"]["status"])
expected = {"1001": ["completed", "started"], "1003": ["failed", "started"]}
expected.update({r: ["completed", "started"] for r in ["1004", "1005", "1006", "1007"]})
got = {r: sorted(s) for r, s in by_run.items()}
if got != expected:
    sys.exit(f"events by run: {got}, expected {expected}")
for e in events:
    p = e["producer"]
    assert p["repository"] == "example-org/widgets" and p["workflow"] == "review.yml", p
    assert p["job"] == "review" and p["component"] == "review-runner.__run_3.initial", p
PY
[ "$(git -C "$work/fresh" rev-list --count HEAD)" = 6 ] || fail "expected one commit per publishing job (6): $(git -C "$work/fresh" log --oneline)"
ok "a fresh clone verifies clean and holds each run's events in one commit per job, none from the job that recorded nothing"
echo "e2e-ci: $pass passed, 0 failed"
