#!/usr/bin/env bash
# Benchmark of `action-ledger serve` as the history grows (not a test; nothing is asserted about
# time). ONE `serve`, started once, on ONE repository that is never repacked (no `git gc`, no
# `maintain`), takes rounds of governed cycles from CLIENTS concurrent clients (guard with
# record=true, claim, outcome: the load generator of scripts/bench-serve.sh, bench_serve.rs) until
# the history holds ACTIONS actions. It prints JSON lines:
#   - per round ("mode":"serve"): actions so far, ops/s, claim and cycle p50/p99 (ms), errors,
#     serve's CPU time in the round (user + system, s) and per operation (µs; three an action),
#     repository bytes (du of the git directory), bytes per action added in the round, packs
#     and loose objects, and serve's resident memory (VmRSS) and peak (VmHWM) in KiB;
#   - then, on the final repository ("mode":"get action", "sweep", "action show", "verify"; each
#     the median, min and max of REPEAT runs in ms, except a stale sweep, which runs once):
#       GET /api/actions/ID of the oldest action on the long-running serve;
#       a sweep with nothing stale, over HTTP (GET /api/cron/outcome-sweep on the long-running
#       serve) and with the CLI (`action-ledger sweep`);
#       a sweep with STALE stale actions, over HTTP and with the CLI (each on its own STALE
#       actions, created through `serve` with its clock ($ACTION_LEDGER_NOW) two hours back and
#       left pending; the HTTP one on a fresh `serve`, after one GET). The creating `serve`
#       keeps its sightings of them, two hours back on its clock, in the repository's sightings
#       file, which the sweepers read: they time the actions from there, as a sweeper on the
#       machine that created them does;
#       the listing of the pending approvals among every closed action (LISTED of them, created
#       through a `serve` whose policy asks for approval; page of 50, newest first), over HTTP
#       (GET /api/actions?status=pending_approval, the SDK's get_pending_approvals) and with
#       the CLI (`action list --status pending_approval`), each with the total it answered;
#       `action show` of the oldest action; `verify` of the whole repository beside `git
#       cat-file --batch` of every blob in it (the ratio verify / cat-file);
#   - PostgreSQL's row-lock claim (the cycle of scripts/bench-serve.sh through pgbench, with an
#     index on the pending outcomes) in rounds of the same size up to the same table size
#     ("mode":"postgresql row lock": ops/s, cycle p50/p99, claim average, table bytes and bytes
#     per action), then its sweep with nothing stale and with STALE stale rows
#     ("mode":"postgresql sweep"), and its listing of LISTED pending approvals (a partial index
#     on them by creation time; "mode":"postgresql list"), when a PostgreSQL server can be
#     started here; else one SKIP line.
# Everything listens on 127.0.0.1 (PostgreSQL on a Unix socket) and lives in one temporary
# directory ($TMPDIR; a 1M-action repository may take tens of GB), removed on exit with its
# processes. The default run (1,000,000 actions) takes hours. HTTP times are curl's (request
# to the whole answer); CLI times are the whole process, start included.
#
# Usage: scripts/bench-serve-scale.sh [--actions N] [--round N] [--clients N] [--stale N]
#                                     [--repeat N] [--listed N] [--bin PATH] [--keep-repo DIR]
#                                     [--no-postgres]
#   or the same through the environment: ACTIONS=1000000 ROUND=20000 CLIENTS=64 STALE=1000
#   REPEAT=3 LISTED=100 BIN=path/to/action-ledger KEEP_REPO=dir NO_POSTGRES=1
#   scripts/bench-serve-scale.sh
#   --actions  actions in the history at the end (default 1,000,000)
#   --round    actions per round (default 20,000; rounded up to a multiple of the clients)
#   --clients  concurrent clients (default 64)
#   --stale    stale actions of each stale sweep (default 1,000)
#   --repeat   runs of each repeatable timing (default 3)
#   --listed   pending approvals among the closed actions for the listing (default 100)
#   --bin      the action-ledger binary to measure (default: build this checkout, release)
#   --keep-repo  move the final repository to DIR (which must not exist) instead of removing it,
#              to profile or time it further
#   --no-postgres  skip PostgreSQL
# Small example: scripts/bench-serve-scale.sh --actions 20000 --round 5000 --clients 32
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
actions=${ACTIONS:-1000000}
round=${ROUND:-20000}
clients=${CLIENTS:-64}
stale=${STALE:-1000}
repeat=${REPEAT:-3}
listed=${LISTED:-100}
bin=${BIN:-}
no_postgres=${NO_POSTGRES:-}
keep_repo=${KEEP_REPO:-}
usage() { sed -n '/^# Usage:/,/^# Small example/s/^# \{0,1\}//p' "$0"; }
while [ $# -gt 0 ]; do
  case $1 in
    --actions) actions=${2:?}; shift 2 ;;
    --round) round=${2:?}; shift 2 ;;
    --clients) clients=${2:?}; shift 2 ;;
    --stale) stale=${2:?}; shift 2 ;;
    --repeat) repeat=${2:?}; shift 2 ;;
    --listed) listed=${2:?}; shift 2 ;;
    --bin) bin=${2:?}; shift 2 ;;
    --keep-repo) keep_repo=${2:?}; shift 2 ;;
    --no-postgres) no_postgres=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "bench-serve-scale: unknown argument $1" >&2; usage >&2; exit 2 ;;
  esac
done
for v in actions round clients stale repeat listed; do
  case ${!v} in
    ''|*[!0-9]*|0*) echo "bench-serve-scale: --$v must be a positive integer, got '${!v}'" >&2; exit 2 ;;
  esac
done
if [ -z "$bin" ]; then
  (cd "$here" && cargo build --release --quiet --bin action-ledger)
  bin=${CARGO_TARGET_DIR:-$here/target}/release/action-ledger
fi
[ -x "$bin" ] || { echo "bench-serve-scale: no binary at $bin" >&2; exit 2; }
if [ -n "$keep_repo" ]; then
  [ ! -e "$keep_repo" ] || { echo "bench-serve-scale: --keep-repo $keep_repo exists" >&2; exit 2; }
  keep_repo=$(cd "$(dirname "$keep_repo")" && pwd)/$(basename "$keep_repo")
fi
bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
# Cycles per client in a round; the round is rounded up to a multiple of the clients.
per_client=$(( (round + clients - 1) / clients ))
round=$(( per_client * clients ))
max_rounds=$(( (actions + round - 1) / round ))

work=$(mktemp -d)
chmod 755 "$work"
server_pid=
job_pid=
# shellcheck source=scripts/pg-start.sh
. "$here/scripts/pg-start.sh"
stop_server() { # bounded: TERM, then KILL after 60 s
  [ -n "$server_pid" ] || return 0
  kill -TERM "$server_pid" 2>/dev/null || true
  for _ in $(seq 600); do kill -0 "$server_pid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$server_pid" 2>/dev/null || true
  wait "$server_pid" 2>/dev/null || true
  server_pid=
}
# OUT ERR COMMAND...: runs COMMAND in the background and waits for it, so that a signal's trap
# runs at once (not after the round) and the cleanup can end it.
in_bg() {
  local out=$1 err=$2 rc=0
  shift 2
  "$@" >"$out" 2>"$err" &
  job_pid=$!
  wait "$job_pid" || rc=$?
  job_pid=
  return "$rc"
}
cleanup() {
  if [ -n "$job_pid" ]; then
    kill -TERM "$job_pid" 2>/dev/null || true
    wait "$job_pid" 2>/dev/null || true
  fi
  stop_server
  pg_stop
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
# The load generator of scripts/bench-serve.sh, one std-only Rust file compiled on its own.
load=$work/bench_serve
rustc -O --edition 2024 -o "$load" "$here/scripts/bench_serve.rs"
unset ACTION_LEDGER_NOW ACTION_LEDGER_API_KEY ACTION_LEDGER_CRON_SECRET SOURCE_DATE_EPOCH
key=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
cron=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
printf 'bench %s\n' "$(printf %s "$key" | sha256sum | cut -d' ' -f1)" >"$work/keys"
repo=$work/state.git
url=

start_server() { # [ACTION_LEDGER_NOW [ARGS...]]: starts serve on $repo, sets server_pid and url
  local now=${1:-}
  shift || true
  : >"$work/out"
  ACTION_LEDGER_NOW=$now ACTION_LEDGER_CRON_SECRET=$cron "$bin" serve --repo "$repo" \
    --listen 127.0.0.1:0 --api-keys "$work/keys" --sweep-every 0 --json "$@" \
    >"$work/out" 2>"$work/err" &
  server_pid=$!
  for _ in $(seq 600); do
    grep -q listening "$work/out" 2>/dev/null && break
    kill -0 "$server_pid" 2>/dev/null || break
    sleep 0.05
  done
  url=$(sed -n 's/.*"url":"\([^"]*\)".*/\1/p' "$work/out")
  [ -n "$url" ] || { echo "bench-serve-scale: the server did not start: $(cat "$work/err")" >&2; exit 2; }
}
json_num() { # FIELD JSON: the number of "FIELD": (null when there is none)
  local v
  v=$(sed -n "s/.*\"$1\":\(-\{0,1\}[0-9][0-9.]*\).*/\1/p" <<<"$2" | head -1)
  echo "${v:-null}"
}
json_str() { # FIELD JSON: the first string of "FIELD":
  sed -n "s/.*\"$1\":\"\([^\"]*\)\".*/\1/p" <<<"$2" | head -1
}
json_obj() { # FIELD JSON: the flat object of "FIELD": (null when there is none)
  local v
  v=$(sed -n "s/.*\"$1\":\({[^{}]*}\).*/\1/p" <<<"$2" | head -1)
  echo "${v:-null}"
}
kib() { # FIELD: serve's /proc status line, in KiB (null when unreadable)
  local v
  v=$(awk -v f="$1:" '$1 == f {print $2}' "/proc/$server_pid/status" 2>/dev/null || true)
  echo "${v:-null}"
}
cpu_ticks() { # serve's user + system CPU time so far, in clock ticks (fields 14 and 15 of stat)
  awk '{sub(/^.*\) /, ""); print $12 + $13}' "/proc/$server_pid/stat" 2>/dev/null || echo 0
}
tick_hz=$(getconf CLK_TCK)
# The clock in microseconds, read without starting a process (bash 5's $EPOCHREALTIME).
now_us() { local t=$EPOCHREALTIME; echo "${t/[.,]/}"; }
ms_since() { local b; b=$(now_us); awk -v a="$1" -v b="$b" 'BEGIN {printf "%.1f", (b - a) / 1e3}'; }
stats_ms() { # milliseconds, one a line, on stdin: {"min","median","max"}
  sort -n | awk '{a[NR] = $1} END {printf "{\"min\":%s,\"median\":%s,\"max\":%s}", a[1], a[int((NR + 1) / 2)], a[NR]}'
}
time_cmd() { # LABEL COMMAND...: runs it $repeat times; ms stats on stdout, last output in $work/cmd.out
  local label=$1 i t rc
  shift
  : >"$work/times"
  for i in $(seq "$repeat"); do
    rc=0
    t=$(now_us)
    "$@" >"$work/cmd.out" 2>"$work/cmd.err" || rc=$?
    ms_since "$t" >>"$work/times"
    echo >>"$work/times"
    if [ "$rc" -ne 0 ]; then
      echo "bench-serve-scale: $label exited $rc (run $i): $(tail -3 "$work/cmd.err")" >&2
    fi
  done
  stats_ms <"$work/times"
}
http_sweep() { # one HTTP sweep: prints "MS BODY", MS from the request to the whole answer
  local s
  s=$(curl -sS --max-time 3600 -o "$work/sweep.json" -w '%{time_total}' \
    -H "Authorization: Bearer $cron" "$url/api/cron/outcome-sweep") \
    || { echo "bench-serve-scale: the HTTP sweep failed" >&2; exit 2; }
  echo "$(awk -v s="$s" 'BEGIN {printf "%.1f", s * 1000}') $(tr -d '\n' <"$work/sweep.json" 2>/dev/null)"
}
http_get_action() { # ID: one GET /api/actions/ID; prints the ms from the request to the whole answer
  local s
  s=$(curl -sS --max-time 600 -o /dev/null -w '%{time_total} %{http_code}' -H "x-api-key: $key" \
    "$url/api/actions/$1") || { echo "bench-serve-scale: GET /api/actions/$1 failed" >&2; exit 2; }
  [ "${s#* }" = 200 ] || echo "bench-serve-scale: GET /api/actions/$1 answered ${s#* }" >&2
  awk -v s="${s%% *}" 'BEGIN {printf "%.1f\n", s * 1000}'
}
repo_bytes() { du -sb "$repo" | cut -f1; }
packs() { find "$repo/objects/pack" -name '*.pack' 2>/dev/null | wc -l; }
loose() { find "$repo/objects" -path '*/objects/[0-9a-f][0-9a-f]/*' -type f 2>/dev/null | wc -l; }
make_stale() { # N: creates N actions two hours back, left pending (serve with its clock moved back)
  local n=$1 c past result
  for c in 64 50 40 32 25 20 16 10 8 5 4 2 1; do [ $(( n % c )) -eq 0 ] && break; done
  past=$(date -u -d '-2 hours' +%Y-%m-%dT%H:%M:%SZ)
  start_server "$past"
  in_bg "$work/load.out" "$work/load.err" "$load" "$url" "$key" "$c" $(( n / c )) pending
  result=$(cat "$work/load.out")
  stop_server
  [ "$(json_num actions "$result")" = "$n" ] \
    || { echo "bench-serve-scale: creating $n stale actions failed: $result" >&2; exit 2; }
}

echo "bench-serve-scale: $clients clients, rounds of $round governed cycles (guard+record, claim, outcome) up to $actions actions, one serve, no gc; $(nproc) cores; $("$bin" --version 2>/dev/null || echo "$bin")"

# Rounds on one long-running serve.
start_server
total=0
bytes_before=$(repo_bytes)
first_action=
for r in $(seq "$max_rounds"); do
  remaining=$(( actions - total ))
  [ "$remaining" -gt 0 ] || break
  n=$(( remaining < round ? (remaining + clients - 1) / clients : per_client ))
  cpu_before=$(cpu_ticks)
  in_bg "$work/load.out" "$work/load.err" "$load" "$url" "$key" "$clients" "$n"
  cpu_round=$(( $(cpu_ticks) - cpu_before ))
  result=$(cat "$work/load.out")
  created=$(json_num actions "$result")
  [ "$created" != null ] || created=0
  [ -n "$first_action" ] || first_action=$(json_str first_action_id "$result")
  total=$(( total + created ))
  bytes=$(repo_bytes)
  per_action=$(awk -v a="$bytes" -v b="$bytes_before" -v n="$created" 'BEGIN {printf "%.0f", n ? (a - b) / n : 0}')
  bytes_before=$bytes
  echo "{\"mode\":\"serve\",\"round\":$r,\"actions\":$total,\"round_actions\":$created,\"clients\":$clients,\"seconds\":$(json_num seconds "$result"),\"ops_per_s\":$(json_num ops_per_s "$result"),\"claim_ms\":$(json_obj claim_ms "$result"),\"cycle_ms\":$(json_obj cycle_ms "$result"),\"errors\":$(json_num errors "$result"),\"serve_cpu_s\":$(awk -v t="$cpu_round" -v hz="$tick_hz" 'BEGIN {printf "%.1f", t / hz}'),\"cpu_us_per_op\":$(awk -v t="$cpu_round" -v hz="$tick_hz" -v n="$created" 'BEGIN {printf "%.0f", n ? t / hz * 1e6 / (3 * n) : 0}'),\"repo_bytes\":$bytes,\"bytes_per_action\":$per_action,\"packs\":$(packs),\"loose_objects\":$(loose),\"rss_kib\":$(kib VmRSS),\"peak_rss_kib\":$(kib VmHWM)}"
  if [ "$created" -eq 0 ]; then
    echo "bench-serve-scale: a round created no action: $(json_str first_error "$result")" >&2
    exit 2
  fi
done
[ -n "$first_action" ] || { echo "bench-serve-scale: no action id from the load generator" >&2; exit 2; }

# A point read on the long-running serve: GET of the oldest action.
: >"$work/times"
for _ in $(seq "$repeat"); do http_get_action "$first_action" >>"$work/times"; done
echo "{\"mode\":\"get action\",\"via\":\"http\",\"actions\":$total,\"action_id\":\"$first_action\",\"runs\":$repeat,\"ms\":$(stats_ms <"$work/times")}"

# Sweeps with nothing stale: HTTP on the long-running serve, then the CLI.
: >"$work/times"
for _ in $(seq "$repeat"); do
  out=$(http_sweep); ms=${out%% *}; body=${out#* }
  echo "$ms" >>"$work/times"
done
echo "{\"mode\":\"sweep\",\"via\":\"http\",\"actions\":$total,\"stale\":0,\"runs\":$repeat,\"ms\":$(stats_ms <"$work/times"),\"swept\":$(json_num rows_swept "$body"),\"rss_kib\":$(kib VmRSS),\"peak_rss_kib\":$(kib VmHWM)}"
stop_server
ms=$(time_cmd "sweep" "$bin" sweep --repo "$repo" --json)
summary=$(grep '"type":"sweep"' "$work/cmd.out" | tail -1 || true)
echo "{\"mode\":\"sweep\",\"via\":\"cli\",\"actions\":$total,\"stale\":0,\"runs\":$repeat,\"ms\":$ms,\"summary\":${summary:-null}}"

# Sweeps with $stale stale actions: HTTP on a fresh serve, then the CLI, each on its own.
make_stale "$stale"
total=$(( total + stale ))
start_server
http_get_action "$first_action" >/dev/null # warm: the fresh serve reads the tip once
out=$(http_sweep); ms=${out%% *}; body=${out#* }
echo "{\"mode\":\"sweep\",\"via\":\"http\",\"actions\":$total,\"stale\":$stale,\"runs\":1,\"ms\":{\"min\":$ms,\"median\":$ms,\"max\":$ms},\"swept\":$(json_num rows_swept "$body")}"
stop_server
make_stale "$stale"
total=$(( total + stale ))
ms=$(repeat=1 time_cmd "sweep" "$bin" sweep --repo "$repo" --json)
summary=$(grep '"type":"sweep"' "$work/cmd.out" | tail -1 || true)
echo "{\"mode\":\"sweep\",\"via\":\"cli\",\"actions\":$total,\"stale\":$stale,\"runs\":1,\"ms\":$ms,\"summary\":${summary:-null}}"

# The pending approvals among every closed action: created through a serve whose policy asks
# for approval of the load's action type, then listed over HTTP and with the CLI.
echo '{"default":"allow","rules":[{"id":"bench-approvals","action_type":"build","verdict":"require_approval"}]}' \
  >"$work/approvals.json"
for c in 4 2 1; do [ $(( listed % c )) -eq 0 ] && break; done
start_server "" --policy "$work/approvals.json"
in_bg "$work/load.out" "$work/load.err" "$load" "$url" "$key" "$c" $(( listed / c )) pending
[ "$(json_num actions "$(cat "$work/load.out")")" = "$listed" ] \
  || { echo "bench-serve-scale: creating $listed pending approvals failed: $(cat "$work/load.out")" >&2; exit 2; }
total=$(( total + listed ))
: >"$work/times"
for _ in $(seq "$repeat"); do
  s=$(curl -sS --max-time 600 -o "$work/list.json" -w '%{time_total} %{http_code}' -H "x-api-key: $key" \
    "$url/api/actions?status=pending_approval&limit=50") || { echo "bench-serve-scale: the listing failed" >&2; exit 2; }
  [ "${s#* }" = 200 ] || { echo "bench-serve-scale: the listing answered ${s#* }" >&2; exit 2; }
  awk -v s="${s%% *}" 'BEGIN {printf "%.1f\n", s * 1000}' >>"$work/times"
done
echo "{\"mode\":\"list pending approvals\",\"via\":\"http\",\"actions\":$total,\"pending_approvals\":$listed,\"runs\":$repeat,\"ms\":$(stats_ms <"$work/times"),\"total\":$(json_num total "$(tr -d '\n' <"$work/list.json")")}"
stop_server
ms=$(time_cmd "action list" "$bin" action list --repo "$repo" --status pending_approval --limit 50 --json)
echo "{\"mode\":\"list pending approvals\",\"via\":\"cli\",\"actions\":$total,\"pending_approvals\":$listed,\"runs\":$repeat,\"ms\":$ms,\"total\":$(json_num total "$(tr -d '\n' <"$work/cmd.out")")}"

# One point lookup, then the whole repository against git's own reading of its blobs.
ms=$(time_cmd "action show" "$bin" action show --repo "$repo" --json "$first_action")
echo "{\"mode\":\"action show\",\"actions\":$total,\"action_id\":\"$first_action\",\"runs\":$repeat,\"ms\":$ms}"
git --git-dir "$repo" cat-file --batch-all-objects --batch-check='%(objectname) %(objecttype)' \
  | awk '$2 == "blob" {print $1}' >"$work/blobs"
verify_ms=$(time_cmd "verify" "$bin" verify --repo "$repo" --json)
verify_summary=$(grep '"type":"summary"' "$work/cmd.out" | tail -1 || true)
cat_file_blobs() { git --git-dir "$repo" cat-file --batch <"$work/blobs"; }
cat_ms=$(time_cmd "git cat-file" cat_file_blobs)
ratio=$(awk -v a="$(json_num median "$verify_ms")" -v b="$(json_num median "$cat_ms")" 'BEGIN {printf "%.2f", (b > 0 ? a / b : 0)}')
if [ -n "$keep_repo" ]; then
  mv "$repo" "$keep_repo"
  repo=$keep_repo
  echo "bench-serve-scale: the repository is kept in $keep_repo" >&2
fi
echo "{\"mode\":\"verify\",\"actions\":$total,\"runs\":$repeat,\"ms\":$verify_ms,\"summary\":${verify_summary:-null},\"cat_file_blobs\":$(wc -l <"$work/blobs"),\"cat_file_ms\":$cat_ms,\"ratio_verify_to_cat_file\":$ratio,\"repo_bytes\":$(repo_bytes),\"packs\":$(packs)}"

# PostgreSQL row-lock claim, in rounds of the same size up to the same table size.
if [ -n "$no_postgres" ]; then
  echo "bench-serve-scale: SKIP PostgreSQL: --no-postgres"
  exit 0
fi
pg_start "$work/pg" $((clients + 10)) bench-serve-scale || exit 0
pg_create_actions pending
cat >"$pg/cycle.sql" <<'SQL'
\set n random(1, 9000000000000000)
INSERT INTO action_records (action_id, agent_id, created_by, act_content_hash, status, execution_protocol) VALUES ('act_' || :client_id || '_' || :n, 'bench-agent', 'bench', 'sha256:x', 'running', 1);
UPDATE action_records SET execution_claimed_at = now(), execution_attempt_id = 'attempt-' || :n WHERE action_id = 'act_' || :client_id || '_' || :n AND agent_id = 'bench-agent' AND created_by = 'bench' AND act_content_hash IS NOT DISTINCT FROM 'sha256:x' AND status = 'running' AND outcome_status = 'pending' AND execution_claimed_at IS NULL AND execution_protocol = 1 RETURNING action_id;
UPDATE action_records SET outcome_status = 'completed', outcome_at = now(), status = 'completed' WHERE action_id = 'act_' || :client_id || '_' || :n AND outcome_status = 'pending';
SQL
chown postgres "$pg/cycle.sql"
rows() { psql_ -At -c "SELECT count(*) FROM action_records"; }
table_bytes() { psql_ -At -c "SELECT pg_total_relation_size('action_records')"; }
pg_total=0
pg_bytes_before=$(table_bytes)
for r in $(seq "$max_rounds"); do
  remaining=$(( actions - pg_total ))
  [ "$remaining" -gt 0 ] || break
  n=$(( remaining < round ? (remaining + clients - 1) / clients : per_client ))
  rm -f "$pg"/pgbench_log.*
  if ! in_bg "$pg/pgbench.out" "$pg/pgbench.err" runuser -u postgres -- env -C "$pg" pgbench -h "$pg" \
      -U postgres -n -c "$clients" -j 2 -t "$n" -f "$pg/cycle.sql" -r -l --log-prefix="$pg/pgbench_log" \
      postgres; then
    cat "$pg/pgbench.err" >>"$pg/pgbench.out"
    echo "bench-serve-scale: SKIP PostgreSQL: pgbench failed ($(tail -1 "$pg/pgbench.out"))"
    exit 0
  fi
  before=$pg_total
  pg_total=$(rows)
  bytes=$(table_bytes)
  tps=$(sed -n 's/^tps = \([0-9.]*\).*/\1/p' "$pg/pgbench.out" | head -1)
  claim_avg=$(grep -A4 'statement latencies' "$pg/pgbench.out" | grep 'UPDATE action_records SET execution_claimed_at' | awk '{print $1}')
  # Per-cycle latencies (microseconds, third column of the transaction log).
  read -r p50 p99 < <(cat "$pg"/pgbench_log.* | awk '{print $3}' | sort -n \
    | awk '{a[NR]=$1} END {i50=int((NR-1)*0.5+0.5)+1; i99=int((NR-1)*0.99+0.5)+1; printf "%.2f %.2f\n", a[i50]/1000, a[i99]/1000}')
  per_action=$(awk -v a="$bytes" -v b="$pg_bytes_before" -v n="$(( pg_total - before ))" 'BEGIN {printf "%.0f", n ? (a - b) / n : 0}')
  pg_bytes_before=$bytes
  echo "{\"mode\":\"postgresql row lock\",\"round\":$r,\"actions\":$pg_total,\"round_actions\":$(( pg_total - before )),\"clients\":$clients,\"ops_per_s\":$(awk -v t="$tps" 'BEGIN {printf "%.0f", t * 3}'),\"claim_ms\":{\"avg\":${claim_avg:-null}},\"cycle_ms\":{\"p50\":$p50,\"p99\":$p99},\"table_bytes\":$bytes,\"bytes_per_action\":$per_action}"
  [ "$pg_total" -gt "$before" ] || { echo "bench-serve-scale: a PostgreSQL round added no row" >&2; exit 2; }
done
# Its sweep: the same rule (pending, created before the timeout) as one UPDATE.
pg_sweep() { # prints the statement's time in ms (psql's \timing) and the rows it updated
  runuser -u postgres -- psql -h "$pg" -U postgres -X -v ON_ERROR_STOP=1 -At -c '\timing on' \
    -c "UPDATE action_records SET outcome_status = 'lost_confirmation', outcome_at = now() WHERE outcome_status = 'pending' AND created_at < now() - interval '15 minutes'" \
    | awk '/^UPDATE / {n = $2} /^Time: / {t = $2} END {print t, n}'
}
: >"$work/times"
for _ in $(seq "$repeat"); do
  out=$(pg_sweep); ms=${out%% *}; swept=${out#* }
  echo "$ms" >>"$work/times"
done
echo "{\"mode\":\"postgresql sweep\",\"actions\":$pg_total,\"stale\":0,\"runs\":$repeat,\"ms\":$(stats_ms <"$work/times"),\"swept\":${swept:-null}}"
psql_ -c "INSERT INTO action_records (action_id, agent_id, created_by, act_content_hash, status, execution_protocol, created_at)
  SELECT 'stale_' || i, 'bench-agent', 'bench', 'sha256:x', 'running', 1, now() - interval '2 hours' FROM generate_series(1, $stale) i"
out=$(pg_sweep); ms=${out%% *}; swept=${out#* }
echo "{\"mode\":\"postgresql sweep\",\"actions\":$(( pg_total + stale )),\"stale\":$stale,\"runs\":1,\"ms\":{\"min\":$ms,\"median\":$ms,\"max\":$ms},\"swept\":${swept:-null}}"
# Its listing of the pending approvals: the newest page of 50, by a partial index.
psql_ -c "CREATE INDEX action_records_pending_approval ON action_records (created_at) WHERE status = 'pending_approval';
  INSERT INTO action_records (action_id, agent_id, created_by, act_content_hash, status, execution_protocol)
  SELECT 'approval_' || i, 'bench-agent', 'bench', 'sha256:x', 'pending_approval', 1 FROM generate_series(1, $listed) i" >/dev/null
pg_list() { # prints the statement's time in ms (psql's \timing)
  runuser -u postgres -- psql -h "$pg" -U postgres -X -v ON_ERROR_STOP=1 -At -c '\timing on' \
    -c "SELECT * FROM action_records WHERE status = 'pending_approval' ORDER BY created_at DESC LIMIT 50" \
    | awk '/^Time: / {t = $2} END {print t}'
}
: >"$work/times"
for _ in $(seq "$repeat"); do pg_list >>"$work/times"; done
echo "{\"mode\":\"postgresql list\",\"actions\":$(( pg_total + stale + listed )),\"pending_approvals\":$listed,\"runs\":$repeat,\"ms\":$(stats_ms <"$work/times")}"
