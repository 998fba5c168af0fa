#!/usr/bin/env bash
# End-to-end check of the README's GitHub Actions workflows, run verbatim: every ```yaml block of
# README.md that starts with `# .github/workflows/...` is extracted from the README itself, and
# the reusable action's steps from hooks/github-action/action.yml (so neither can drift), and
# they are executed in order, in a simulated Actions environment (an embedded runner.py):
# - the GITHUB_* and RUNNER_* variables Actions sets (and not GITHUB_RUN_STARTED_AT, which it
#   does not); RUNNER_TOOL_CACHE per scenario, TMPDIR inside the job's RUNNER_TEMP;
# - a fresh GITHUB_ENV and GITHUB_PATH file per step, applied to the later steps (NAME=value and
#   NAME<<EOF; the directories are put first on PATH);
# - `run:` steps with Actions' bash (`bash -e {0}`; `shell: bash` is `bash --noprofile --norc
#   -eo pipefail {0}`);
# - `if:` conditions, with the implicit `success() &&` when no status function is called;
#   `always()` steps run after a failed step;
# - `uses: <owner>/<repo>/hooks/github-action@<ref>` expands into the composite action's steps,
#   with its `with:` inputs and the action's declared defaults (an undeclared input, or a missing
#   required one, is an error). Inside the action, success() and failure() read the action's own
#   status, not the job's (the runner's rule for a composite's main steps), so a publish step with
#   `if: always()` after a failed build still runs its steps;
# - expressions: a small, strict evaluator of what the workflows and the action use: the
#   contexts inputs, github, runner, env and secrets (workflow level only), literals, ! == !=
#   && || ( ), format(), always(), success(), failure(), cancelled(). An expression it cannot
#   evaluate (another function or context, an unknown property) stops the run with exit 3 and a
#   message naming the step and the expression, never an empty value. env.NAME of a variable
#   that is not set is null, as in Actions;
# - GITHUB_ACTION: the step's id, else `__run`, `__run_2`, ... numbered over the job's script
#   steps, and `__OWNER_REPO` (`__OWNER_REPO_2`, ... the second time) for an action, the form
#   the GitHub docs give ("for an action, __repo-owner_name-of-action-repo"; the steps that are
#   not scripts take no `__run` number). The steps of a composite action get the GITHUB_ACTION
#   of the step that calls it (actions/runner#615: "all nested run steps match the parent"), and
#   GITHUB_ACTION_PATH/REPOSITORY/REF of the action. So the README's review job records from its
#   second script step: the events' component is `review-runner.__run_2.initial`;
# - the job's `env:` values that come from secrets, and LEDGER_REMOTE, are given by this script
#   (LEDGER_REMOTE is a local bare server repository with `hooks install`, whose hook runs the
#   server's own copy of the binary; pushes go through its hook);
# - `actions/checkout` is not run (a workspace with the job's own scripts, ci/build.sh and
#   ci/review.sh, whose exit codes each scenario chooses); any other `uses:` is an error.
# Scenarios: a job that succeeds; a job whose build fails, so it records nothing (its publish
# step must publish nothing and succeed); a job whose review fails (its open start is closed by
# the seal and published); four jobs whose publish steps race each other. In those the runner
# has action-ledger on PATH, so the action's install step keeps it. Then the install's download:
# the binary packaged as .github/workflows/release.yml packages it (the archive and SHA256SUMS),
# served by `python3 -m http.server` on 127.0.0.1, reached through a `gh` stub first on PATH
# (`gh release view` and `gh release download` only, by curl), on a runner without action-ledger
# (and without cargo): a job downloads, checks and caches it and publishes with it; a second job
# reuses the tool cache without downloading; a tampered archive fails the install with the
# `::error::` line and installs nothing. Then the scheduled workflow (`mode: maintain`: sweep
# and compact with --remote). At the end a fresh clone of the server verifies clean and holds
# exactly the expected events.
# Usage: scripts/e2e-ci.sh   (BIN=path/to/action-ledger to choose the binary)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
bin=${BIN:-${CARGO_TARGET_DIR:-$here/target}/debug/action-ledger}
[ -x "$bin" ] || (cd "$here" && cargo build --quiet)
work=$(mktemp -d)
http_pid=
cleanup() {
  [ -z "$http_pid" ] || kill "$http_pid" 2>/dev/null || true
  [ -z "$http_pid" ] || wait "$http_pid" 2>/dev/null || true
  [ -n "${KEEP:-}" ] || rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "e2e-ci: FAIL: $*" >&2; exit 1; }
pass=0
ok() { pass=$((pass + 1)); echo "e2e-ci: ok: $*"; }
export GIT_AUTHOR_NAME=tester GIT_AUTHOR_EMAIL=tester@invalid GIT_COMMITTER_NAME=tester GIT_COMMITTER_EMAIL=tester@invalid
# Nothing of the ledger's own configuration may leak in from the caller: the workflow sets it.
for v in $(env | sed -n 's/^\(CLAWSWEEPER_[A-Z_]*\|ACTION_LEDGER_[A-Z_]*\|GITHUB_[A-Z_]*\|RUNNER_[A-Z_]*\)=.*/\1/p'); do
  unset "$v"
done

# The runner has action-ledger on PATH (the action's install step then keeps it); the server has
# its own copy, which its hook runs (`hooks install --bin`), whatever the pusher's PATH.
mkdir -p "$work/runner-bin" "$work/server-bin"
cp "$bin" "$work/runner-bin/action-ledger"
cp "$bin" "$work/server-bin/action-ledger"
runner_path="$work/runner-bin:$PATH"
export PATH="$work/runner-bin:$PATH"
server="$work/server/ledger-state.git"
action-ledger -q hooks install --repo "$server" --bin "$work/server-bin/action-ledger"

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
# GITHUB_ENV, GITHUB_PATH, whether a step failed, the GITHUB_ACTION numbering) in STATE between
# calls. Exit 0 when every step that ran succeeded, 1 when one failed, 3 when the simulator
# cannot run a step faithfully; the steps' output goes to the log.
cat > "$work/runner.py" <<'PY'
import json, os, re, subprocess, sys, yaml

workflows_file, action_file, workflow, job, state_file, first, last = sys.argv[1:8]
# The simulator's own values: NAME=value replaces the value of a job or step `env:` key NAME (the
# example's server address); secrets.NAME=value is a secret; github.token=value the job's token.
supplied = dict(a.split("=", 1) for a in sys.argv[8:])
secrets = {k[len("secrets."):]: v for k, v in supplied.items() if k.startswith("secrets.")}
env_overrides = {k: v for k, v in supplied.items() if "." not in k}
spec = json.load(open(workflows_file))[workflow]
steps = spec["jobs"][job]["steps"]
action = yaml.safe_load(open(action_file, encoding="utf-8"))
action_dir = os.path.dirname(os.path.abspath(action_file))
first = int(first)
last = len(steps) if last == "end" else int(last)
if os.path.exists(state_file):
    state = json.load(open(state_file))
else:
    state = {"env": {}, "failed": False, "runs": 0, "uses": {}, "path": []}


class SimError(Exception):
    """Something the simulator cannot do faithfully: the run stops (exit 3), never guesses."""


# ---------------------------------------------------------------------------------------------
# Expressions: a small, strict evaluator of the subset the README's workflows and action.yml use.
# Literals ('string' with '' for a quote, numbers, true, false, null), context properties
# (ctx.name, ctx.name-with-dashes), ! == != && || ( ), and the functions format(), always(),
# success(), failure(), cancelled(). Anything else (another function, an unknown context or
# property, a comparison between different types) is an error naming the step and the expression.
TOKEN = re.compile(
    r"\s*(?:(?P<str>'(?:[^']|'')*')|(?P<num>\d+(?:\.\d+)?)"
    r"|(?P<op>\|\||&&|==|!=|[()!,.])|(?P<ident>[A-Za-z_][A-Za-z0-9_-]*))"
)
STATUS_FUNCTIONS = {"always", "success", "failure", "cancelled"}


def tokenize(text):
    out, pos = [], 0
    text = text.rstrip()
    while pos < len(text):
        m = TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise SimError(f"cannot read the expression at {text[pos:]!r}")
        pos = m.end()
        kind = m.lastgroup
        out.append((kind, m.group(kind)))
    return out


def parse(text):
    tokens = tokenize(text)
    i = 0

    def peek():
        return tokens[i] if i < len(tokens) else (None, None)

    def take(value=None):
        nonlocal i
        tok = peek()
        if tok[0] is None or (value is not None and tok[1] != value):
            raise SimError(f"expected {value or 'more'} at token {i} of the expression")
        i += 1
        return tok

    def p_or():
        node = p_and()
        while peek() == ("op", "||"):
            take()
            node = ("or", node, p_and())
        return node

    def p_and():
        node = p_cmp()
        while peek() == ("op", "&&"):
            take()
            node = ("and", node, p_cmp())
        return node

    def p_cmp():
        node = p_not()
        if peek() in (("op", "=="), ("op", "!=")):
            op = take()[1]
            node = (op, node, p_not())
        return node

    def p_not():
        if peek() == ("op", "!"):
            take()
            return ("not", p_not())
        return p_primary()

    def p_primary():
        kind, value = take()
        if kind == "str":
            return ("lit", value[1:-1].replace("''", "'"))
        if kind == "num":
            return ("lit", float(value))
        if kind == "op" and value == "(":
            node = p_or()
            take(")")
            return node
        if kind != "ident":
            raise SimError(f"unexpected {value!r}")
        if value in ("true", "false"):
            return ("lit", value == "true")
        if value == "null":
            return ("lit", None)
        if peek() == ("op", "("):
            take()
            args = []
            if peek() != ("op", ")"):
                args.append(p_or())
                while peek() == ("op", ","):
                    take()
                    args.append(p_or())
            take(")")
            return ("call", value, args)
        path = [value]
        while peek() == ("op", "."):
            take()
            kind, name = take()
            if kind != "ident":
                raise SimError(f"expected a property name after {'.'.join(path)}")
            path.append(name)
        return ("ctx", path)

    node = p_or()
    if i != len(tokens):
        raise SimError(f"unexpected {tokens[i][1]!r} after a complete expression")
    return node


def uses_status(node):
    if node[0] == "call" and node[1] in STATUS_FUNCTIONS:
        return True
    return any(isinstance(c, tuple) and uses_status(c) for c in node[1:]) or (
        node[0] == "call" and any(uses_status(a) for a in node[2])
    )


def truthy(v):
    return not (v is None or v is False or v == "" or v == 0)


def to_string(v):
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return str(int(v)) if v.is_integer() else str(v)
    return v


def evaluate(node, ctx):
    """ctx: {'contexts': {name: callable(prop) -> value}, 'failed': bool}."""
    kind = node[0]
    if kind == "lit":
        return node[1]
    if kind == "or":
        left = evaluate(node[1], ctx)
        return left if truthy(left) else evaluate(node[2], ctx)
    if kind == "and":
        left = evaluate(node[1], ctx)
        return evaluate(node[2], ctx) if truthy(left) else left
    if kind == "not":
        return not truthy(evaluate(node[1], ctx))
    if kind in ("==", "!="):
        a, b = evaluate(node[1], ctx), evaluate(node[2], ctx)
        if type(a) is not type(b):
            raise SimError(f"compares {to_string(a)!r} ({type(a).__name__}) with {to_string(b)!r} ({type(b).__name__})")
        same = a.casefold() == b.casefold() if isinstance(a, str) else a == b
        return same if kind == "==" else not same
    if kind == "call":
        name, args = node[1], node[2]
        if name in STATUS_FUNCTIONS:
            if args:
                raise SimError(f"{name}() takes no arguments")
            return {"always": True, "success": not ctx["failed"], "failure": ctx["failed"], "cancelled": False}[name]
        if name == "format":
            if not args:
                raise SimError("format() needs a format string")
            fmt = evaluate(args[0], ctx)
            values = [to_string(evaluate(a, ctx)) for a in args[1:]]
            if not isinstance(fmt, str):
                raise SimError("format()'s first argument must be a string")

            def field(m):
                if m.group(0) in ("{{", "}}"):
                    return m.group(0)[0]
                n = int(m.group(1))
                if n >= len(values):
                    raise SimError(f"format() has no argument {{{n}}}")
                return values[n]

            return re.sub(r"\{\{|\}\}|\{(\d+)\}", field, fmt)
        raise SimError(f"the function {name}() is not implemented by the simulator")
    if kind == "ctx":
        path = node[1]
        if len(path) != 2:
            raise SimError(f"{'.'.join(path)}: only context.property is implemented")
        contexts = ctx["contexts"]
        if path[0] not in contexts:
            raise SimError(f"the context {path[0]!r} is not available here (available: {', '.join(sorted(contexts))})")
        return contexts[path[0]](path[1])
    raise SimError(f"cannot evaluate {kind}")


def expand(value, ctx, where):
    """A value of the workflow or the action: literal text with ${{ }} parts, evaluated."""
    if isinstance(value, bool):
        return "true" if value else "false"
    value = str(value)
    out, pos = [], 0
    for m in re.finditer(r"\$\{\{(.*?)\}\}", value, re.S):
        out.append(value[pos:m.start()])
        try:
            out.append(to_string(evaluate(parse(m.group(1)), ctx)))
        except SimError as e:
            raise SimError(f"{where}: cannot evaluate `${{{{{m.group(1)}}}}}`: {e}") from None
        pos = m.end()
    rest = value[pos:]
    if "${{" in rest:
        raise SimError(f"{where}: unterminated expression in {value!r}")
    out.append(rest)
    return "".join(out)


def condition(text, ctx, where):
    """An `if:`: success() && (text) unless text calls a status function; empty is success()."""
    text = str(text).strip() if text is not None else ""
    if text.startswith("${{") and text.endswith("}}"):
        text = text[3:-2]
    if not text.strip():
        return not ctx["failed"]
    try:
        node = parse(text)
        if not uses_status(node):
            node = ("and", ("call", "success", []), node)
        return truthy(evaluate(node, ctx))
    except SimError as e:
        raise SimError(f"{where}: cannot evaluate `if: {text.strip()}`: {e}") from None


# ---------------------------------------------------------------------------------------------
# Contexts.
GITHUB_FROM_ENV = {
    "repository": "GITHUB_REPOSITORY", "repository_owner": "GITHUB_REPOSITORY_OWNER",
    "server_url": "GITHUB_SERVER_URL", "ref": "GITHUB_REF", "sha": "GITHUB_SHA",
    "workflow": "GITHUB_WORKFLOW", "workflow_ref": "GITHUB_WORKFLOW_REF",
    "event_name": "GITHUB_EVENT_NAME", "job": "GITHUB_JOB", "run_id": "GITHUB_RUN_ID",
    "run_number": "GITHUB_RUN_NUMBER", "run_attempt": "GITHUB_RUN_ATTEMPT",
    "workspace": "GITHUB_WORKSPACE",
}
RUNNER_FROM_ENV = {"os": "RUNNER_OS", "arch": "RUNNER_ARCH", "temp": "RUNNER_TEMP", "tool_cache": "RUNNER_TOOL_CACHE"}


def strict_lookup(name, table):
    def get(prop):
        if prop not in table:
            raise SimError(f"{name}.{prop} is not a property the simulator knows (it knows: {', '.join(sorted(table))})")
        return table[prop]
    return get


def contexts_for(env_context, step_action, composite=None):
    github = {k: os.environ[v] for k, v in GITHUB_FROM_ENV.items()}
    github["action"] = step_action
    github["token"] = supplied.get("github.token", "ghs_simulated-job-token")
    if composite:
        github.update(action_path=action_dir, action_repository=composite["repository"], action_ref=composite["ref"])
    contexts = {
        "github": strict_lookup("github", github),
        "runner": strict_lookup("runner", {k: os.environ[v] for k, v in RUNNER_FROM_ENV.items()}),
        # The env context holds the workflow's, the job's and the steps' env and what GITHUB_ENV
        # set, not the runner's own variables: an absent name is null, as in Actions.
        "env": lambda prop: env_context.get(prop),
    }
    if composite:
        contexts["inputs"] = strict_lookup("inputs", composite["inputs"])
    else:
        contexts["secrets"] = strict_lookup("secrets", secrets)
    return contexts


def resolve_env(mapping, ctx, where):
    out = {}
    for key, value in (mapping or {}).items():
        # The simulator's own values replace the example's server address.
        out[key] = env_overrides[key] if key in env_overrides else expand(value, ctx, f"{where}: env {key}")
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


def run_script(label, name, script_text, shell, env_extra, step_action, where_files):
    """One `run:`: its GITHUB_ENV and GITHUB_PATH files applied afterwards. Returns the exit code."""
    env_file = os.path.join(os.environ["RUNNER_TEMP"], f"_env_{where_files}")
    path_file = os.path.join(os.environ["RUNNER_TEMP"], f"_path_{where_files}")
    open(env_file, "w").close()
    open(path_file, "w").close()
    script = os.path.join(os.environ["RUNNER_TEMP"], f"_step_{where_files}.sh")
    with open(script, "w", encoding="utf-8") as f:
        f.write(script_text)
    env = dict(os.environ)
    env.update(env_extra)
    env.update({"GITHUB_ACTION": step_action, "GITHUB_ENV": env_file, "GITHUB_PATH": path_file})
    for d in state["path"]:
        env["PATH"] = d + ":" + env["PATH"]
    # Actions' bash: `bash -e {0}` when the step names no shell, `bash --noprofile --norc -eo
    # pipefail {0}` for `shell: bash`.
    if shell is None:
        argv = ["bash", "-e", script]
    elif shell == "bash":
        argv = ["bash", "--noprofile", "--norc", "-eo", "pipefail", script]
    else:
        raise SimError(f"{label} {name!r}: shell {shell!r} is not implemented by the simulator")
    print(f"  {label} run: {name}", flush=True)
    code = subprocess.run(argv, cwd=os.environ["GITHUB_WORKSPACE"], env=env).returncode
    apply_env_file(env_file, state["env"])
    state["path"].extend(l for l in open(path_file).read().splitlines() if l)
    return code


def step_id_for(step):
    """GITHUB_ACTION: the step's id, else `__run`, `__run_2`, ... for scripts and
    `__OWNER_REPO`, `__OWNER_REPO_2`, ... for actions (numbered per action, like scripts)."""
    if step.get("id"):
        return step["id"]
    if "run" in step:
        state["runs"] += 1
        return "__run" if state["runs"] == 1 else f"__run_{state['runs']}"
    owner_repo = "_".join(step["uses"].split("@", 1)[0].split("/")[:2])
    base = "__" + re.sub(r"[^A-Za-z0-9_.-]", "", owner_repo)
    n = state["uses"].get(base, 0) + 1
    state["uses"][base] = n
    return base if n == 1 else f"{base}_{n}"


ACTION_USES = re.compile(r"^(?P<repository>[^/@\s]+/[^/@\s]+)/hooks/github-action@(?P<ref>\S+)$")
OUTER_KEYS = {"name", "id", "if", "run", "shell", "env", "uses", "with"}
INNER_KEYS = {"name", "id", "if", "run", "shell", "env"}


def run_action(index, step, step_action, job_env):
    """A `uses:` of hooks/github-action: the composite action's steps, with its inputs."""
    m = ACTION_USES.match(step["uses"])
    where = f"[{job} step {index}] {step.get('name') or step['uses']}"
    if action.get("runs", {}).get("using") != "composite":
        raise SimError(f"{action_file}: only a composite action is implemented")
    env_context = dict(job_env)
    env_context.update(state["env"])
    outer_ctx = {"contexts": contexts_for(env_context, step_action), "failed": state["failed"]}
    step_env = resolve_env(step.get("env"), outer_ctx, where)
    env_context.update(step_env)
    declared = action.get("inputs") or {}
    given = step.get("with") or {}
    unknown = sorted(set(given) - set(declared))
    if unknown:
        raise SimError(f"{where}: with: {', '.join(unknown)} is not an input of {action_file}")
    composite = {"repository": m.group("repository"), "ref": m.group("ref"), "inputs": {}}
    for name in declared:
        if name in given:
            composite["inputs"][name] = expand(given[name], outer_ctx, f"{where}: with: {name}")
    defaults_ctx = {"contexts": contexts_for(env_context, step_action, composite), "failed": False}
    for name, spec_in in declared.items():
        if name not in given:
            if spec_in.get("required") and "default" not in spec_in:
                raise SimError(f"{where}: the required input {name!r} is not given")
            composite["inputs"][name] = expand(spec_in.get("default", ""), defaults_ctx, f"{where}: the default of {name}")
    print(f"  [{job} step {index}] action: {step.get('name') or step['uses']} "
          f"(mode {composite['inputs'].get('mode')}, GITHUB_ACTION {step_action})", flush=True)
    failed = False  # the action's own status: success() inside a composite reads it, not the job's
    for j, inner in enumerate(action["runs"]["steps"]):
        label = f"[{job} step {index}.{j}]"
        name = inner.get("name") or inner.get("run", "").splitlines()[0]
        extra = sorted(set(inner) - INNER_KEYS)
        if extra or "run" not in inner:
            raise SimError(f"{label} {name!r}: {', '.join(extra) or 'a step without run:'} is not implemented by the simulator")
        if "shell" not in inner:
            raise SimError(f"{label} {name!r}: a composite action's run step must name its shell")
        env_context = dict(job_env)
        env_context.update(state["env"])
        env_context.update(step_env)
        ctx = {"contexts": contexts_for(env_context, step_action, composite), "failed": failed}
        if not condition(inner.get("if"), ctx, f"{label} {name!r}"):
            print(f"  {label} skipped (if: {inner.get('if', 'success()')}): {name}", flush=True)
            continue
        inner_env = dict(job_env)
        inner_env.update(state["env"])
        inner_env.update(step_env)
        inner_env.update(resolve_env(inner.get("env"), ctx, f"{label} {name!r}"))
        inner_env.update({"GITHUB_ACTION_PATH": action_dir, "GITHUB_ACTION_REPOSITORY": composite["repository"],
                          "GITHUB_ACTION_REF": composite["ref"]})
        script = expand(inner["run"], ctx, f"{label} {name!r}: run")
        code = run_script(label, name, script, inner["shell"], inner_env, step_action, f"{index}_{j}")
        if code != 0:
            print(f"  {label} failed with exit {code}: {name}", flush=True)
            failed = True
    return failed


def main():
    contexts = contexts_for({}, "", None)
    job_env = resolve_env(spec["jobs"][job].get("env"), {"contexts": contexts, "failed": False}, f"{workflow}/{job}")
    for index in range(first, last):
        step = steps[index]
        label = f"[{job} step {index}]"
        name = step.get("name") or step.get("uses") or step.get("run", "").splitlines()[0]
        extra = sorted(set(step) - OUTER_KEYS)
        if extra:
            raise SimError(f"{label} {name!r}: {', '.join(extra)} is not implemented by the simulator")
        step_action = step_id_for(step)
        if "uses" in step and not ACTION_USES.match(step["uses"]):
            if not step["uses"].startswith("actions/checkout@"):
                raise SimError(f"{label}: uses: {step['uses']} is not implemented by the simulator")
            print(f"  {label} skip (uses: {step['uses']}): the simulator provides the workspace", flush=True)
            continue
        env_context = dict(job_env)
        env_context.update(state["env"])
        ctx = {"contexts": contexts_for(env_context, step_action), "failed": state["failed"]}
        if not condition(step.get("if"), ctx, f"{label} {name!r}"):
            print(f"  {label} skipped after a failure: {name}", flush=True)
            continue
        if "uses" in step:
            failed = run_action(index, step, step_action, job_env)
        else:
            env = dict(job_env)
            env.update(state["env"])
            env.update(resolve_env(step.get("env"), ctx, f"{label} {name!r}"))
            code = run_script(label, name, expand(step["run"], ctx, f"{label} {name!r}: run"),
                              step.get("shell"), env, step_action, str(index))
            failed = code != 0
            if failed:
                print(f"  {label} failed with exit {code}: {name}", flush=True)
        if failed:
            if "uses" in step:
                print(f"  {label} failed: {name}", flush=True)
            state["failed"] = True
            state.setdefault("failures", []).append(name)


try:
    main()
except SimError as e:
    print(f"e2e-ci simulator: {e}", file=sys.stderr, flush=True)
    sys.exit(3)
json.dump(state, open(state_file, "w"))
sys.exit(1 if state["failed"] else 0)
PY

# job WORKFLOW JOB RUN_ID FROM TO [build-exit review-exit]: one simulated job (its state and
# directories under $work/runs/RUN_ID); appends the job's log to runs/RUN_ID/log. The runner's
# PATH is $JOB_PATH (default: with action-ledger), its tool cache $TOOL_CACHE (default: the
# job's own). Exit 3 from the runner (the simulator cannot do what a step asks) fails the script.
job() {
  local workflow=$1 name=$2 run_id=$3 from=$4 to=$5 build_exit=${6:-0} review_exit=${7:-0}
  local dir="$work/runs/$run_id" rc=0
  mkdir -p "$dir/workspace/ci" "$dir/temp/tmp"
  printf '#!/bin/sh\nexit %s\n' "$build_exit" > "$dir/workspace/ci/build.sh"
  printf '#!/bin/sh\necho "reviewing #$1"\nexit %s\n' "$review_exit" > "$dir/workspace/ci/review.sh"
  chmod +x "$dir/workspace/ci/"*.sh
  env PATH="${JOB_PATH:-$runner_path}" TMPDIR="$dir/temp/tmp" GH_STUB_LOG="$dir/gh.log" \
    CI=true GITHUB_ACTIONS=true RUNNER_OS=Linux RUNNER_ARCH=X64 RUNNER_TEMP="$dir/temp" \
    RUNNER_TOOL_CACHE="${TOOL_CACHE:-$dir/toolcache}" \
    GITHUB_WORKSPACE="$dir/workspace" GITHUB_REPOSITORY=example-org/widgets \
    GITHUB_REPOSITORY_OWNER=example-org GITHUB_SERVER_URL=https://github.com \
    GITHUB_REF=refs/heads/main GITHUB_SHA=0123456789abcdef0123456789abcdef01234567 \
    GITHUB_WORKFLOW="$workflow" \
    GITHUB_WORKFLOW_REF="example-org/widgets/.github/workflows/$workflow.yml@refs/heads/main" \
    GITHUB_EVENT_NAME=workflow_dispatch GITHUB_JOB="$name" GITHUB_RUN_ID="$run_id" \
    GITHUB_RUN_NUMBER="$run_id" GITHUB_RUN_ATTEMPT=1 \
    python3 "$work/runner.py" "$work/workflows.json" "$here/hooks/github-action/action.yml" \
    "$workflow" "$name" "$dir/state.json" "$from" "$to" \
    "LEDGER_REMOTE=$server" "secrets.LEDGER_TOKEN=unused-by-a-path-remote" >>"$dir/log" 2>&1 || rc=$?
  [ "$rc" != 3 ] || fail "the simulator stopped job $run_id: $(cat "$dir/log")"
  return "$rc"
}
tip() { git -C "$server" rev-parse -q --verify refs/heads/main || echo none; }
steps_of() { python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))[sys.argv[2]]["jobs"][sys.argv[3]]["steps"]))' "$work/workflows.json" "$1" "$2"; }
n=$(steps_of review review)
last=$((n - 1))

job review review 1001 0 end || fail "job 1001 failed: $(cat "$work/runs/1001/log")"
[ "$(tip)" != none ] || fail "job 1001 published nothing: $(cat "$work/runs/1001/log")"
grep -q "on PATH" "$work/runs/1001/log" || fail "job 1001's install did not keep action-ledger from PATH: $(cat "$work/runs/1001/log")"
ok "a job that succeeds records its events and publishes them through the hook (the action's setup and publish)"

before=$(tip)
if job review review 1002 0 end 1 0; then fail "job 1002 should have failed at its build step"; fi
grep -q "step $last\.[0-9]*\] run: Seal and publish the ledger" "$work/runs/1002/log" || fail "job 1002 did not run the action's publish step: $(cat "$work/runs/1002/log")"
grep -q "step ${last}[].].*failed" "$work/runs/1002/log" && fail "job 1002's publish step failed: $(cat "$work/runs/1002/log")"
[ "$(tip)" = "$before" ] || fail "job 1002 recorded nothing but moved the ledger ref"
ok "a job that records nothing (its build failed) seals and publishes nothing, and its final step succeeds"

if job review review 1003 0 end 0 1; then fail "job 1003 should have failed at its review step"; fi
grep -q "step $last\.[0-9]*\] run: Seal and publish the ledger" "$work/runs/1003/log" || fail "job 1003 did not run the action's publish step: $(cat "$work/runs/1003/log")"
grep -q "step ${last}[].].*failed" "$work/runs/1003/log" && fail "job 1003's publish step failed: $(cat "$work/runs/1003/log")"
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

# The install's download. A release as release.yml builds it: the archive (the binary, README.md
# and CHANGELOG.md at its top) named action-ledger-TAG-TARGET.tar.gz, and SHA256SUMS over the
# archives, as its publish job writes it. The binary is this build's, not a musl one: the
# download path is what is checked, not the target.
tag="v$("$bin" --version | awk '{print $2}')"
target=x86_64-unknown-linux-musl
asset="action-ledger-$tag-$target.tar.gz"
releases="$work/releases/example-org/action-ledger/releases"
mkdir -p "$work/package" "$releases/download/$tag"
cp "$bin" "$work/package/action-ledger"
cp "$here/README.md" "$here/CHANGELOG.md" "$work/package/"
tar czf "$releases/download/$tag/$asset" -C "$work/package" action-ledger README.md CHANGELOG.md
(cd "$releases/download/$tag" && sha256sum action-ledger-* > SHA256SUMS)
printf '%s\n' "$tag" > "$releases/latest"
# The release server, on a free port of 127.0.0.1 (a few tries: the port is chosen, then bound).
port=
for _ in 1 2 3 4 5; do
  p=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  python3 -u -m http.server --bind 127.0.0.1 --directory "$work/releases" "$p" >>"$work/http.log" 2>&1 &
  http_pid=$!
  for _ in $(seq 50); do
    if curl -fsS --max-time 2 -o /dev/null "http://127.0.0.1:$p/example-org/action-ledger/releases/latest" 2>/dev/null; then port=$p; break; fi
    kill -0 "$http_pid" 2>/dev/null || break
    sleep 0.1
  done
  [ -z "$port" ] || break
  kill "$http_pid" 2>/dev/null || true; wait "$http_pid" 2>/dev/null || true; http_pid=
done
[ -n "$port" ] || fail "the release server did not start: $(cat "$work/http.log")"
# The gh stub: `gh release view [TAG] --repo R [--json tagName --jq .tagName]` and `gh release
# download TAG --repo R --pattern NAME... --dir D`, from the release server; anything else fails.
mkdir -p "$work/gh-bin"
cat > "$work/gh-bin/gh" <<'GH'
#!/usr/bin/env bash
set -euo pipefail
echo "gh $*" >> "${GH_STUB_LOG:-/dev/null}"
base=${GH_STUB_BASE:?the gh stub needs GH_STUB_BASE}
[ "${1:-}" = release ] && [ $# -ge 2 ] || { echo "gh stub: only gh release view|download: $*" >&2; exit 2; }
sub=$2
shift 2
tag= repo= json= jq= dir=. patterns=()
while [ $# -gt 0 ]; do
  case $1 in
    --repo | -R) repo=$2; shift 2 ;;
    --json) json=$2; shift 2 ;;
    --jq | -q) jq=$2; shift 2 ;;
    --pattern | -p) patterns+=("$2"); shift 2 ;;
    --dir | -D) dir=$2; shift 2 ;;
    -*) echo "gh stub: unsupported option $1" >&2; exit 2 ;;
    *) [ -z "$tag" ] || { echo "gh stub: unexpected argument $1" >&2; exit 2; }; tag=$1; shift ;;
  esac
done
[ -n "$repo" ] || { echo "gh stub: --repo is required" >&2; exit 2; }
get() { curl -fsS --max-time 30 "$@"; }
case $sub in
  view)
    [ -n "$tag" ] || tag=$(get "$base/$repo/releases/latest" 2>/dev/null) || { echo "release not found" >&2; exit 1; }
    get -o /dev/null "$base/$repo/releases/download/$tag/SHA256SUMS" 2>/dev/null || { echo "release not found" >&2; exit 1; }
    if [ -n "$json" ]; then
      [ "$json" = tagName ] && [ "$jq" = .tagName ] || { echo "gh stub: only --json tagName --jq .tagName" >&2; exit 2; }
      echo "$tag"
    else
      printf 'title:\t%s\ntag:\t%s\n' "$tag" "$tag"
    fi
    ;;
  download)
    [ -n "$tag" ] && [ ${#patterns[@]} -gt 0 ] || { echo "gh stub: download needs TAG and --pattern" >&2; exit 2; }
    mkdir -p "$dir"
    for p in "${patterns[@]}"; do
      case $p in *[][*?]*) echo "gh stub: glob patterns are not implemented: $p" >&2; exit 2 ;; esac
      get -o "$dir/$p" "$base/$repo/releases/download/$tag/$p" || { echo "no assets match the file pattern $p" >&2; exit 1; }
    done
    ;;
  *) echo "gh stub: gh release $sub is not implemented" >&2; exit 2 ;;
esac
GH
chmod +x "$work/gh-bin/gh"
export GH_STUB_BASE="http://127.0.0.1:$port"
# A runner without action-ledger and without cargo: the stub first, then the system's directories.
bare_path="$work/gh-bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
if PATH="$bare_path" command -v action-ledger >/dev/null || PATH="$bare_path" command -v cargo >/dev/null; then
  fail "the bare runner's PATH ($bare_path) has action-ledger or cargo"
fi
downloads() { grep -c "GET /example-org/action-ledger/releases/download/$tag/$asset " "$work/http.log" || true; }
cached="$work/toolcache-a/action-ledger/$tag/$target"

before=$(tip)
JOB_PATH=$bare_path TOOL_CACHE="$work/toolcache-a" job review review 3001 0 end \
  || fail "job 3001 (download) failed: $(cat "$work/runs/3001/log")"
grep -q "action-ledger: $tag for $target (checked against SHA256SUMS)" "$work/runs/3001/log" || fail "job 3001 did not install the release: $(cat "$work/runs/3001/log")"
[ -x "$cached/action-ledger" ] && [ "$("$cached/action-ledger" --version)" = "action-ledger ${tag#v}" ] || fail "job 3001 left no action-ledger in $cached"
python3 -c 'import json,sys; sys.exit(sys.argv[2] not in json.load(open(sys.argv[1]))["path"])' "$work/runs/3001/state.json" "$cached" \
  || fail "job 3001's install did not add $cached to GITHUB_PATH"
[ "$(downloads)" = 1 ] || fail "job 3001 downloaded the archive $(downloads) times (its publish step must find it on PATH): $(cat "$work/http.log")"
[ "$(tip)" != "$before" ] || fail "job 3001 published nothing with the downloaded binary: $(cat "$work/runs/3001/log")"
ok "a runner without action-ledger: the action downloads the release (gh), checks SHA256SUMS, caches it in RUNNER_TOOL_CACHE, adds it to GITHUB_PATH, and the job publishes with it"

JOB_PATH=$bare_path TOOL_CACHE="$work/toolcache-a" job review review 3002 0 end \
  || fail "job 3002 (cached) failed: $(cat "$work/runs/3002/log")"
[ "$(downloads)" = 1 ] || fail "job 3002 downloaded the archive again: $(cat "$work/http.log")"
grep -q "release download" "$work/runs/3002/gh.log" && fail "job 3002 called gh release download: $(cat "$work/runs/3002/gh.log")"
grep -q "action-ledger: $tag for $target" "$work/runs/3002/log" || fail "job 3002 did not take the cached binary: $(cat "$work/runs/3002/log")"
ok "a second job on the same runner reuses the tool cache without downloading"

cp "$releases/download/$tag/$asset" "$work/asset.good"
printf 'tampered' >> "$releases/download/$tag/$asset"
before=$(tip)
if JOB_PATH=$bare_path TOOL_CACHE="$work/toolcache-b" job review review 3003 0 end; then
  fail "job 3003 (tampered archive) should have failed: $(cat "$work/runs/3003/log")"
fi
cp "$work/asset.good" "$releases/download/$tag/$asset"
grep -qx "::error::$asset does not match the release's SHA256SUMS" "$work/runs/3003/log" || fail "job 3003 did not say the checksum failed: $(cat "$work/runs/3003/log")"
grep -q "step 1\.0\] failed" "$work/runs/3003/log" || fail "job 3003's install step did not fail: $(cat "$work/runs/3003/log")"
grep -q "step 1\.1\] run:" "$work/runs/3003/log" && fail "job 3003 ran the setup after a failed install: $(cat "$work/runs/3003/log")"
[ -z "$(find "$work/toolcache-b" -type f 2>/dev/null)" ] || fail "job 3003 installed something: $(find "$work/toolcache-b" -type f)"
[ -z "$(ls -A "$work/runs/3003/temp/tmp")" ] || fail "job 3003 left its download outside RUNNER_TEMP: $(ls -A "$work/runs/3003/temp/tmp")"
python3 -c 'import json,sys; sys.exit(any("toolcache" in d for d in json.load(open(sys.argv[1]))["path"]))' "$work/runs/3003/state.json" \
  || fail "job 3003 added a tool cache directory to GITHUB_PATH"
[ "$(tip)" = "$before" ] || fail "job 3003 published something"
ok "a tampered archive fails the install with the ::error:: line, installs nothing, and the job records and publishes nothing"

# The scheduled workflow: the action's maintain mode, sweep and compact through --remote.
job ledger-maintenance maintain 2001 0 end || fail "the scheduled workflow failed: $(cat "$work/runs/2001/log")"
grep -q "run: Land pending publications, sweep and compact the state repository" "$work/runs/2001/log" && grep -q "^pending publications: .* 0 left$" "$work/runs/2001/log" || fail "the scheduled workflow did not land pending publications, sweep and compact: $(cat "$work/runs/2001/log")"
ok "the scheduled workflow (the action's maintain mode: sweep and compact with --remote) runs"

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
expected.update({r: ["completed", "started"] for r in ["1004", "1005", "1006", "1007", "3001", "3002"]})
got = {r: sorted(s) for r, s in by_run.items()}
if got != expected:
    sys.exit(f"events by run: {got}, expected {expected}")
for e in events:
    p = e["producer"]
    assert p["repository"] == "example-org/widgets" and p["workflow"] == "review.yml", p
    # The second script step of the job records (the action's steps take no __run number).
    assert p["job"] == "review" and p["component"] == "review-runner.__run_2.initial", p
PY
# One publication per publishing job: its own commit, or one of the Ledger-Publication lines of
# a commit that landed pending publications of jobs finishing at once.
direct=$(git -C "$work/fresh" log --format=%s | grep -vc "pending publication(s) combined" || true)
combined=$(git -C "$work/fresh" log --format=%B | grep -c "^Ledger-Publication: " || true)
[ $((direct + combined)) = 8 ] || fail "expected one publication per publishing job (8), got $direct commit(s) and $combined combined: $(git -C "$work/fresh" log --oneline)"
ok "a fresh clone verifies clean and holds each run's events, one publication per job, none from the jobs that recorded nothing"
echo "e2e-ci: $pass passed, 0 failed"
