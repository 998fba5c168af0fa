#!/usr/bin/env bash
# cargo-deny's gate (scripts/check.sh runs it; scripts/deny.toml is its configuration):
#   - licences, bans and sources of every crate in Cargo.lock, always when cargo-deny is
#     installed: a licence outside the allow list, a `*` requirement, a crate from a registry
#     other than crates.io or from git fails the gate;
#   - advisories (the RustSec database), only when the database can be fetched now.
# Without cargo-deny on PATH it prints one SKIP line and exits 0; it does not install it
# (`cargo install --locked cargo-deny` compiles about 210 crates with LTO; its cost is in the
# CHANGELOG).
# usage: scripts/deny.sh
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v cargo-deny >/dev/null 2>&1; then
  echo "SKIP cargo deny: cargo-deny is not installed (cargo install --locked cargo-deny)"
  exit 0
fi
deny=(cargo deny --manifest-path Cargo.toml --config scripts/deny.toml --locked)
# (--config is cargo-deny's global option, before `check`: 0.20 refuses it after.) The
# inclusion graphs are left out: `cargo tree -i CRATE` shows how a reported crate comes in.
"${deny[@]}" check --hide-inclusion-graph bans licenses sources
# Advisories. cargo-deny's `--offline` (0.20 has no `--disable-fetch` any more) opens the local
# copy of the database without fetching, and fails when there is none or it is older than 90
# days, with exit status 1, the same as a vulnerable dependency: the gate could not tell the
# two apart. So the database is fetched first (`cargo deny fetch db`, a shallow clone of
# github.com/rustsec/advisory-db into $CARGO_HOME/advisory-dbs, outside the checkout) and only
# when that succeeds is the check run, offline, against what was just fetched; when the fetch
# fails (no network to GitHub) this prints one SKIP line with git's reason.
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if timeout 300 "${deny[@]}" fetch db >"$log" 2>&1; then
  "${deny[@]}" --offline check --hide-inclusion-graph advisories
else
  reason=$(grep -m1 '^fatal:' "$log" || tail -1 "$log")
  echo "SKIP cargo deny advisories: the advisory database (github.com/rustsec/advisory-db) cannot be fetched (${reason:-timed out})"
fi
