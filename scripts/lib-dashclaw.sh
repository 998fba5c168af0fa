# shellcheck shell=bash
# The real DashClaw Python SDK (dashclaw==5.33.9, from PyPI) for the scripts that drive `serve`
# as its users do. Sourced, not run. The caller defines `fail MESSAGE` and `$work` (a temporary
# directory).
#
#   dashclaw_python NAME   sets `py` to a Python interpreter that imports dashclaw 5.33.9: the
#                          virtual environment $SERVE_VENV when it has it, else one made under
#                          $work. When no virtual environment can be made or the package
#                          cannot be installed, prints one `NAME: SKIP: …` line and exits 0.
dashclaw_python() {
  local venv=${SERVE_VENV:-$work/venv}
  if ! "$venv/bin/python" -c 'import dashclaw' 2>/dev/null; then
    python3 -m venv "$venv" >/dev/null 2>&1 || { echo "$1: SKIP: python3 -m venv is not available"; exit 0; }
    if ! "$venv/bin/pip" install -q --disable-pip-version-check dashclaw==5.33.9 >"$work/pip.log" 2>&1; then
      echo "$1: SKIP: cannot install dashclaw==5.33.9 from the package index ($(tail -1 "$work/pip.log"))"
      exit 0
    fi
  fi
  py="$venv/bin/python"
  "$py" -c 'import importlib.metadata as m; v = m.version("dashclaw"); assert v == "5.33.9", v' ||
    fail "dashclaw is not 5.33.9"
}
