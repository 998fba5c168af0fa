#!/usr/bin/env bash
# Builds the static Linux binary the release workflow ships (x86_64-unknown-linux-musl) and
# checks that it is static and runs. The target's standard library comes from rustup; when it
# is not installed and cannot be (rustup's server unreachable), one SKIP line says so.
# usage: scripts/build-musl.sh
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
target=x86_64-unknown-linux-musl
[ "$(uname -m)-$(uname -s)" = x86_64-Linux ] || { echo "build-musl: SKIP: not an x86_64 Linux machine"; exit 0; }
if ! rustup target list --installed 2>/dev/null | grep -qx "$target"; then
  if ! timeout 120 rustup target add "$target" >/dev/null 2>&1; then
    echo "build-musl: SKIP: the $target standard library is not installed and rustup cannot download it here"
    exit 0
  fi
fi
cd "$here"
cargo build --release --locked --quiet --target "$target"
bin=${CARGO_TARGET_DIR:-$here/target}/$target/release/action-ledger
file "$bin" 2>/dev/null | grep -q "static" || ldd "$bin" 2>&1 | grep -q "not a dynamic" || { echo "build-musl: FAIL: $bin is not static"; exit 1; }
"$bin" --version
echo "build-musl: ok: static $target binary, $(du -h "$bin" | cut -f1)"
