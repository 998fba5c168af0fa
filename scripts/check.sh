#!/usr/bin/env bash
# The project's gates, in the order CI runs them (.ci/run calls this script).
set -euo pipefail
cd "$(dirname "$0")/.."
# What is in the checkout now (build output aside); the gates below must not add to it.
checkout_state() {
  git status --porcelain --ignored --untracked-files=all 2>/dev/null | grep -v '^!! target/' || true
}
checkout_before=$(checkout_state)
# What the gates run beside the binary (Debian packages, the DashClaw SDK) is fetched in the
# background while the build below runs: on a fresh machine the downloads then cost no wall
# time. The SDK's virtual environment lives outside the checkout, removed on exit.
scratch=$(mktemp -d)
provision=
# (`|| true`: a finished provisioner cannot be killed, and under `set -e` that would be the
# script's exit status.)
trap 'if [ -n "$provision" ]; then kill "$provision" 2>/dev/null || true; fi; rm -rf "$scratch"' EXIT
if [ -z "${SERVE_VENV:-}" ]; then
  export SERVE_VENV="$scratch/venv"
  scripts/provision.sh "$SERVE_VENV" >"$scratch/provision.log" 2>&1 &
else
  scripts/provision.sh >"$scratch/provision.log" 2>&1 &
fi
provision=$!
# Each gate's heading carries the seconds since the start, so a slow CI run shows where it went.
began=$SECONDS
step() { printf '== [%4d s] %s\n' "$((SECONDS - began))" "$1"; }
step "cargo fmt --check"
cargo fmt --all -- --check
step "cargo clippy -D warnings"
cargo clippy --all-targets --quiet -- -D warnings
# store/release.rs drops mapped pack pages with madvise while this process has one store; that
# is sound only if every gix repository or object database of the process is a Store's.
step "gix repositories are opened only in src/store/ (store/release.rs's safety argument)"
if grep -rnE 'gix::(open[a-z_]*|discover[a-z_]*|init[a-z_]*|odb|ThreadSafeRepository|Repository)\b' src --include='*.rs' \
  | grep -v '^src/store/'; then
  echo "a gix repository or object database is opened outside src/store/ (see Store::release_mapped_packs)"
  exit 1
fi
step "cargo doc -D warnings"
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --quiet
# cargo-deny (scripts/deny.sh, configured by scripts/deny.toml): licences, bans and sources
# always, advisories only when the RustSec database can be fetched now; a violation fails the
# gate. It runs when cargo-deny is on PATH and otherwise prints one SKIP line: building it costs
# minutes of CPU (CHANGELOG), too much to add to every run beside the build, so CI machines that
# want the gate install cargo-deny beforehand.
step "cargo deny: licences, bans, sources; advisories when the database can be fetched (skips without cargo-deny)"
scripts/deny.sh
# The declared minimum Rust version (Cargo.toml's rust-version) is built with when that
# toolchain is installed; clippy's incompatible_msrv lint (above) already refuses standard
# library items newer than it.
msrv=$(sed -n 's/^rust-version = "\(.*\)"$/\1/p' Cargo.toml)
step "cargo +$msrv check (minimum supported Rust version)"
if rustup run "$msrv" cargo --version >/dev/null 2>&1; then
  CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}/msrv" cargo "+$msrv" check --all-targets --quiet
else
  echo "SKIP cargo +$msrv check: toolchain $msrv is not installed (rustup toolchain install $msrv)"
fi
# One optimized build serves the tests and every script: the release profile's dependencies are
# compiled once (a debug build would compile them a second time), and the property, model and
# end-to-end runs take a fraction of their debug-build time.
step "cargo build --release (the binary every script below runs)"
cargo build --release --quiet
export BIN="${CARGO_TARGET_DIR:-$PWD/target}/release/action-ledger"
step "cargo test (release profile)"
cargo test --release --quiet -- --skip conformance_vectors
step "conformance vectors (CONFORMANCE_DIR=${CONFORMANCE_DIR:-testdata/conformance})"
cargo test --release --quiet --lib conformance_vectors -- --nocapture
step "provisioning (started at the beginning, in the background)"
wait "$provision" || true
cat "$scratch/provision.log"
step "end-to-end (day1 corpus, real git)"
scripts/e2e.sh
step "end-to-end hook (git push over a local transport)"
scripts/e2e-hook.sh
step "end-to-end compaction and log (day1 corpus, real git, pushes through the hook)"
scripts/e2e-compact.sh
step "load: 16 publishers, replayers and conflicting writers, local and remote (bounded)"
scripts/load.sh both 16 2
step "crash: SIGKILL publish at random moments (bounded)"
scripts/crash.sh 200
step "malformed trees: writers refuse, verify, verify --range and the hook report (real git)"
scripts/e2e-malformed-trees.sh
step "durability order of every write (strace: fsync before rename, ref after objects)"
scripts/durability.sh
step "execution finality races (concurrent claims; a report against the sweep)"
scripts/finality-race.sh
step "serve with the real DashClaw SDK (skips when the package index is unreachable)"
scripts/e2e-serve.sh
step "serve's webhooks: signed deliveries to a receiver across a restart and a SIGKILL, each exactly once after de-duplication (skips when the package index is unreachable)"
scripts/e2e-webhooks.sh
step "the operators' dashboard in headless Chromium over the DevTools protocol (skips without chromium)"
scripts/e2e-dashboard.sh
step "the README's GitHub Actions workflows and the action's steps, run verbatim in a simulated runner (the install's download from a local release) against a hooked server"
scripts/e2e-ci.sh
step "crash: SIGKILL every other writer at random moments (bounded)"
scripts/crash.sh 6 publish-remote seal compact create claim outcome sweep run-wrapper run-child serve maintain migrate
step "crash: SIGKILL record and seal while they deliver to an HTTPS CrabFleet stand-in, 1,000 kills: 0 lost, 0 duplicated (bounded)"
scripts/crash.sh 1000 projection
step "live projection end to end: seal and publish SPOOL against a dead CrabFleet (hang, black hole, refused, 503) within the drain deadline + 1 s; log and verify of the published failures"
python3 scripts/e2e-projection.py "$BIN"
step "out of space and I/O errors at every write, fsync and rename (bounded)"
scripts/enospc.sh 5
step "smart HTTP (lighttpd + git http-backend, basic auth) and ssh (sshd) remotes with the hook; wire faults (bounded)"
scripts/e2e-remote.sh all 24
step "no credential of a remote URL in any output or cache repository: every --remote command, serve, every failure path"
scripts/e2e-secrets.sh
step "git maintenance (prune-packed, repack, gc, pack-refs, commit-graph, maintenance tasks) beside every writer (bounded)"
scripts/e2e-maintenance.sh 6
step "actionlint on every workflow and the reusable action (skips when it cannot be installed)"
scripts/lint-workflows.sh
step "static musl build, unoptimised (static-smoke profile; skips when the target is not installed)"
scripts/build-musl.sh --profile static-smoke
step "hostile HTTP against serve while well-behaved clients run (bounded)"
scripts/e2e-hostile.sh 1 8
step "fuzzing: each cargo-fuzz target 10 s (skips without nightly or cargo-fuzz)"
scripts/fuzz.sh 10
step "nothing was written into the checkout"
if [ "$(checkout_state)" != "$checkout_before" ]; then
  echo "the gates wrote into the checkout (tests and scripts must use temporary directories):"
  diff <(echo "$checkout_before") <(checkout_state) || true
  exit 1
fi
step "all gates passed"
