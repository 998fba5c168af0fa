#!/usr/bin/env bash
# Installs what the gates of scripts/check.sh run beside the binary, so that a fresh machine
# fetches it once, in one go, while the build runs (check.sh starts this in the background):
#   - the Debian packages, when missing and this runs as root (or with passwordless sudo) with
#     apt-get: lighttpd (smart HTTP remotes), openssh-server and openssh-client (ssh remotes),
#     strace (the durability order), musl-tools (the static build), chromium (the dashboard's
#     browser test). One `apt-get install` of all that is missing; `apt-get update` only when
#     it fails. apt-get waits for the package lock rather than failing on it.
#   - with VENV, a Python virtual environment there with the real DashClaw SDK (dashclaw==5.33.9
#     from PyPI), which the scripts that drive `serve` use through $SERVE_VENV.
# Prints one line per component: present, installed, or SKIP and why. Each script still installs
# (or skips) what it needs when run on its own; this only does it earlier. Exits 0 whatever it
# could install: a gate whose component is missing prints its own SKIP line.
# usage: scripts/provision.sh [VENV]
set -uo pipefail
venv=${1:-}
PATH="$PATH:/usr/sbin:/sbin"
# command package
wanted=(
  "lighttpd lighttpd"
  "sshd openssh-server"
  "ssh openssh-client"
  "strace strace"
  "musl-gcc musl-tools"
  "chromium chromium"
)
missing=()
for pair in "${wanted[@]}"; do
  set -- $pair
  if command -v "$1" >/dev/null 2>&1; then
    echo "provision: $2: present"
  else
    missing+=("$2")
  fi
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then sudo=(); else sudo=(sudo -n); fi
  if ! command -v apt-get >/dev/null 2>&1 || { [ ${#sudo[@]} -gt 0 ] && ! sudo -n true 2>/dev/null; }; then
    for p in "${missing[@]}"; do echo "provision: $p: SKIP: not root (nor passwordless sudo) with apt-get"; done
  else
    apt=("${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -y -qq -o DPkg::Lock::Timeout=300)
    log=$(mktemp)
    trap 'rm -f "$log"' EXIT
    timeout 900 "${apt[@]}" install "${missing[@]}" >"$log" 2>&1 ||
      { timeout 300 "${apt[@]}" update >>"$log" 2>&1 && timeout 900 "${apt[@]}" install "${missing[@]}" >>"$log" 2>&1; } ||
      # One package the index lacks must not keep the others out.
      for p in "${missing[@]}"; do timeout 600 "${apt[@]}" install "$p" >>"$log" 2>&1; done
    for pair in "${wanted[@]}"; do
      set -- $pair
      case " ${missing[*]} " in *" $2 "*) ;; *) continue ;; esac
      if command -v "$1" >/dev/null 2>&1; then
        echo "provision: $2: installed"
      else
        echo "provision: $2: SKIP: apt-get could not install it ($(tail -1 "$log"))"
      fi
    done
  fi
fi
if [ -n "$venv" ]; then
  if "$venv/bin/python" -c 'import dashclaw' 2>/dev/null; then
    echo "provision: dashclaw: present in $venv"
  elif ! python3 -m venv "$venv" >/dev/null 2>&1; then
    echo "provision: dashclaw: SKIP: python3 -m venv is not available"
  elif timeout 300 "$venv/bin/pip" install -q --disable-pip-version-check dashclaw==5.33.9 >/dev/null 2>&1; then
    echo "provision: dashclaw: installed 5.33.9"
  else
    echo "provision: dashclaw: SKIP: cannot install dashclaw==5.33.9 from the package index"
  fi
fi
exit 0
