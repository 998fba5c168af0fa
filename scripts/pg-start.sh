# PostgreSQL for the benchmarks' comparator, sourced by scripts/bench-serve*.sh (not run alone).
#
# pg_start DIR MAX_CONNECTIONS LABEL
#   Starts a throwaway server from the distribution's binaries (/usr/lib/postgresql/*/bin) as the
#   `postgres` user, data and Unix socket in DIR (created), no TCP listener. On success sets
#   `pg=DIR`, puts the server binaries on PATH and returns 0; otherwise prints one
#   "LABEL: SKIP PostgreSQL: <why>" line, leaves `pg` empty and returns 1.
# pg_stop
#   Stops the server started by pg_start, if any (for the caller's EXIT trap).
# psql_ ARGS...
#   psql against that server as `postgres`, stopping at the first error.
# pg_create_actions [pending]
#   The comparator's table: one row per action, as a DashClaw server keeps it; with
#   `pending` also the partial index on the pending outcomes by creation time.

pg=

pg_start() {
  local dir=$1 max_connections=$2 label=$3 bin
  bin=$(find /usr/lib/postgresql -maxdepth 2 -name bin -type d 2>/dev/null | sort -V | tail -1 || true)
  if [ -z "$bin" ] || [ ! -x "$bin/postgres" ] || ! id postgres >/dev/null 2>&1 \
     || ! command -v runuser >/dev/null || ! PATH="$bin:$PATH" command -v pgbench >/dev/null; then
    echo "$label: SKIP PostgreSQL: no PostgreSQL server binaries (or no postgres user, runuser or pgbench) on this machine"
    return 1
  fi
  export PATH="$bin:$PATH"
  mkdir "$dir" && chown postgres "$dir"
  if ! runuser -u postgres -- initdb -D "$dir" -A trust -U postgres >"$dir.log" 2>&1 \
    || ! runuser -u postgres -- pg_ctl -D "$dir" -l "$dir/server.log" -w \
         -o "-k $dir -c listen_addresses= -c max_connections=$max_connections" start >>"$dir.log" 2>&1; then
    echo "$label: SKIP PostgreSQL: cannot start a local server ($(tail -1 "$dir.log"))"
    return 1
  fi
  pg=$dir
}

pg_stop() {
  if [ -n "$pg" ]; then
    runuser -u postgres -- pg_ctl -D "$pg" stop -m immediate >/dev/null 2>&1 || true
  fi
}

psql_() { runuser -u postgres -- psql -h "$pg" -U postgres -q -X -v ON_ERROR_STOP=1 "$@"; }

pg_create_actions() {
  psql_ -c "CREATE TABLE action_records (
    action_id text PRIMARY KEY, agent_id text NOT NULL, created_by text NOT NULL,
    act_content_hash text, status text NOT NULL, outcome_status text NOT NULL DEFAULT 'pending',
    outcome_at timestamptz, execution_protocol int, execution_claimed_at timestamptz,
    execution_attempt_id text, created_at timestamptz NOT NULL DEFAULT now());"
  if [ "${1:-}" = pending ]; then
    psql_ -c "CREATE INDEX action_records_pending ON action_records (created_at) WHERE outcome_status = 'pending';"
  fi
}
