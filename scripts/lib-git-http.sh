# shellcheck shell=bash
# Serving bare repositories over smart HTTP on 127.0.0.1 (lighttpd + `git http-backend`), for
# the scripts that publish through a real Git server. Sourced, not run. The caller defines
# `fail MESSAGE` and an array `pids` (the server's pid is appended; the caller's cleanup ends
# it).
#
#   free_port                 prints a free TCP port of 127.0.0.1
#   have COMMAND PACKAGE      COMMAND is present, or installed from the Debian PACKAGE when
#                             running as root with apt-get; false otherwise
#   wait_for WHAT COMMAND...  runs COMMAND until it succeeds, at most 10 s, else `fail`s
#   start_git_http DIR [USERS]
#                             starts lighttpd on a free port (in $http_port) serving the bare
#                             repositories below DIR/srv as http://127.0.0.1:$http_port/git/NAME,
#                             with basic auth from the USERS file (`user:password` lines) when
#                             given; DIR/error.log, and DIR/access.log (one line per request,
#                             `REQUEST-LINE STATUS`, complete once lighttpd has stopped).
#                             Returns 1 when lighttpd is not installed and cannot be. The
#                             caller waits for it (wait_for with its credentials).

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'; }

have() { # command package
  command -v "$1" >/dev/null 2>&1 && return 0
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2" >/dev/null 2>&1 \
      || { apt-get update -qq >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2" >/dev/null 2>&1; } || true
  fi
  command -v "$1" >/dev/null 2>&1
}
PATH="$PATH:/usr/sbin:/sbin"

wait_for() { # what, command...: up to 10 s
  for _ in $(seq 100); do "${@:2}" >/dev/null 2>&1 && return 0; sleep 0.1; done
  fail "$1 did not come up within 10 s"
}

http_port=
start_git_http() { # dir [users file]
  local dir=$1 users=${2:-} auth=
  have lighttpd lighttpd || return 1
  http_port=$(free_port)
  mkdir -p "$dir/srv"
  if [ -n "$users" ]; then
    auth="auth.backend = \"plain\"
auth.backend.plain.userfile = \"$users\"
auth.require = ( \"/git/\" => ( \"method\" => \"basic\", \"realm\" => \"git\", \"require\" => \"valid-user\" ) )"
  fi
  cat >"$dir/lighttpd.conf" <<CONF
server.modules = ("mod_alias", "mod_auth", "mod_authn_file", "mod_cgi", "mod_setenv", "mod_accesslog")
server.bind = "127.0.0.1"
server.port = $http_port
server.document-root = "$dir/srv"
server.errorlog = "$dir/error.log"
server.max-connections = 1024
accesslog.filename = "$dir/access.log"
accesslog.format = "%r %s"
$auth
alias.url = ( "/git/" => "$(git --exec-path)/git-http-backend/" )
cgi.assign = ( "" => "" )
setenv.set-environment = ( "GIT_PROJECT_ROOT" => "$dir/srv", "GIT_HTTP_EXPORT_ALL" => "1" )
CONF
  lighttpd -D -f "$dir/lighttpd.conf" 2>>"$dir/error.log" &
  pids+=($!)
}
