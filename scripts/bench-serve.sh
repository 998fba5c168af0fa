#!/usr/bin/env bash
# Benchmark of `action-ledger serve` (not a test; nothing is asserted about time). CLIENTS
# concurrent clients (default 64) each run CYCLES governed cycles (default 40): guard with
# record, claim, outcome, each a durable commit. Reports, as JSON lines:
#   - group commit (the server's default): operations committed per second, p50/p99 latency of
#     the claim and of the whole cycle;
#   - one commit per operation (--max-batch 1), the same clients with fewer cycles each
#     (SINGLE_CYCLES, default CYCLES/8);
#   - a PostgreSQL row-lock claim (INSERT; UPDATE … WHERE execution_claimed_at IS NULL; UPDATE …
#     WHERE outcome_status='pending', each its own transaction) through pgbench with the same
#     number of clients, when a PostgreSQL server can be started here (else a SKIP line).
# Usage: scripts/bench-serve.sh            CLIENTS=64 CYCLES=40 scripts/bench-serve.sh
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
target=${CARGO_TARGET_DIR:-$here/target}
clients=${CLIENTS:-64}
cycles=${CYCLES:-40}
# One commit per operation is far slower: fewer cycles keep the run short (rates are per second).
single_cycles=${SINGLE_CYCLES:-$(( cycles / 8 > 2 ? cycles / 8 : 2 ))}
(cd "$here" && cargo build --release --quiet --bin action-ledger)
bin=$target/release/action-ledger
work=$(mktemp -d)
# The load generator is one std-only Rust file, compiled on its own (no crate of its own).
load=$work/bench_serve
rustc -O --edition 2024 -o "$load" "$here/scripts/bench_serve.rs"
chmod 755 "$work"
server_pid=
# shellcheck source=scripts/pg-start.sh
. "$here/scripts/pg-start.sh"
cleanup() {
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null || true
  pg_stop
  rm -rf "$work"
}
trap cleanup EXIT
unset ACTION_LEDGER_NOW ACTION_LEDGER_API_KEY SOURCE_DATE_EPOCH
key=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
printf 'bench %s\n' "$(printf %s "$key" | sha256sum | cut -d' ' -f1)" >"$work/keys"

serve_run() { # label, max-batch, cycles
  local label=$1 batch=$2 n=$3 repo="$work/state-$2.git"
  "$bin" serve --repo "$repo" --listen 127.0.0.1:0 --api-keys "$work/keys" --sweep-every 0 \
    --max-batch "$batch" --json >"$work/out" 2>"$work/err" &
  server_pid=$!
  for _ in $(seq 200); do grep -q listening "$work/out" 2>/dev/null && break; sleep 0.05; done
  local url
  url=$(sed -n 's/.*"url":"\([^"]*\)".*/\1/p' "$work/out")
  [ -n "$url" ] || { echo "bench-serve: the server did not start: $(cat "$work/err")" >&2; exit 2; }
  # Warm up (first commits, page cache), then measure.
  "$load" "$url" "$key" 8 5 >/dev/null
  local result
  result=$("$load" "$url" "$key" "$clients" "$n")
  kill -TERM "$server_pid"; wait "$server_pid" || true; server_pid=
  local commits
  commits=$(git --git-dir "$repo" rev-list --count main)
  echo "{\"mode\":\"$label\",\"commits\":$commits,\"result\":$result}"
}

echo "bench-serve: $clients clients x $cycles governed cycles (guard+record, claim, outcome), $(nproc) cores"
serve_run "group commit" 256 "$cycles"
serve_run "one commit per operation" 1 "$single_cycles"

# PostgreSQL row-lock claim, when a server can be run here.
pg_start "$work/pg" $((clients + 10)) bench-serve || exit 0
pg_create_actions
cat >"$pg/cycle.sql" <<'SQL'
\set n random(1, 9000000000000000)
INSERT INTO action_records (action_id, agent_id, created_by, act_content_hash, status, execution_protocol) VALUES ('act_' || :client_id || '_' || :n, 'bench-agent', 'bench', 'sha256:x', 'running', 1);
UPDATE action_records SET execution_claimed_at = now(), execution_attempt_id = 'attempt-' || :n WHERE action_id = 'act_' || :client_id || '_' || :n AND agent_id = 'bench-agent' AND created_by = 'bench' AND act_content_hash IS NOT DISTINCT FROM 'sha256:x' AND status = 'running' AND outcome_status = 'pending' AND execution_claimed_at IS NULL AND execution_protocol = 1 RETURNING action_id;
UPDATE action_records SET outcome_status = 'completed', outcome_at = now(), status = 'completed' WHERE action_id = 'act_' || :client_id || '_' || :n AND outcome_status = 'pending';
SQL
chown postgres "$pg/cycle.sql"
(cd "$pg" && runuser -u postgres -- pgbench -h "$pg" -U postgres -n -c "$clients" -j 2 -t "$cycles" \
  -f "$pg/cycle.sql" -r -l --log-prefix="$pg/pgbench" postgres >"$pg/pgbench.out" 2>&1) \
  || { echo "bench-serve: SKIP PostgreSQL: pgbench failed ($(tail -1 "$pg/pgbench.out"))"; exit 0; }
tps=$(sed -n 's/^tps = \([0-9.]*\).*/\1/p' "$pg/pgbench.out" | head -1)
claim_avg=$(grep -A4 'statement latencies' "$pg/pgbench.out" | grep 'UPDATE action_records SET execution_claimed_at' | awk '{print $1}')
# Per-cycle latencies (microseconds, third column of the transaction log).
read -r p50 p99 < <(cat "$pg"/pgbench.* | awk '{print $3}' | sort -n | awk '{a[NR]=$1} END {i50=int((NR-1)*0.5+0.5)+1; i99=int((NR-1)*0.99+0.5)+1; printf "%.2f %.2f\n", a[i50]/1000, a[i99]/1000}')
echo "{\"mode\":\"postgresql row lock\",\"result\":{\"clients\":$clients,\"cycles_per_s\":$tps,\"ops_per_s\":$(awk "BEGIN{printf \"%.0f\", $tps*3}"),\"claim_ms\":{\"avg\":$claim_avg},\"cycle_ms\":{\"p50\":$p50,\"p99\":$p99}}}"
