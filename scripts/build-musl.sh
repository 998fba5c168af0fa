#!/usr/bin/env bash
# Builds the static Linux binary the release workflow ships (x86_64-unknown-linux-musl) and
# checks that it is static and runs. The target's standard library comes from rustup and the C
# compiler for the crates with C parts (ring, under rustls) from the distribution's musl-tools;
# when either is missing and cannot be installed, one SKIP line says so.
# With --profile NAME it builds that Cargo profile instead of release (check.sh uses
# static-smoke: the same target, linkage and start-up check, unoptimised, in a fraction of the
# time; the release workflow builds what ships with --release).
# usage: scripts/build-musl.sh [--profile NAME]
set -euo pipefail
profile=release
if [ "${1:-}" = --profile ]; then
  profile=${2:?usage: scripts/build-musl.sh [--profile NAME]}
fi
here=$(cd "$(dirname "$0")/.." && pwd)
target=x86_64-unknown-linux-musl
[ "$(uname -m)-$(uname -s)" = x86_64-Linux ] || { echo "build-musl: SKIP: not an x86_64 Linux machine"; exit 0; }
if ! rustup target list --installed 2>/dev/null | grep -qx "$target"; then
  if ! timeout 120 rustup target add "$target" >/dev/null 2>&1; then
    echo "build-musl: SKIP: the $target standard library is not installed and rustup cannot download it here"
    exit 0
  fi
fi
if ! command -v musl-gcc >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    timeout 300 apt-get install -y -qq musl-tools >/dev/null 2>&1 ||
      { timeout 120 apt-get update -qq >/dev/null 2>&1 && timeout 300 apt-get install -y -qq musl-tools >/dev/null 2>&1; } || true
  elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null && command -v apt-get >/dev/null 2>&1; then
    timeout 300 sudo -n apt-get install -y -qq musl-tools >/dev/null 2>&1 || true
  fi
  command -v musl-gcc >/dev/null 2>&1 ||
    { echo "build-musl: SKIP: musl-gcc (Debian package musl-tools) is not installed and cannot be installed here"; exit 0; }
fi
export CC_x86_64_unknown_linux_musl=${CC_x86_64_unknown_linux_musl:-musl-gcc}
cd "$here"
cargo build --profile "$profile" --locked --quiet --target "$target"
# Cargo's directory of the dev profile is `debug`.
dir=$profile
[ "$profile" = dev ] && dir=debug
bin=${CARGO_TARGET_DIR:-$here/target}/$target/$dir/action-ledger
file "$bin" 2>/dev/null | grep -q "static" || ldd "$bin" 2>&1 | grep -q "not a dynamic" || { echo "build-musl: FAIL: $bin is not static"; exit 1; }
"$bin" --version
echo "build-musl: ok: static $target binary ($profile profile), $(du -h "$bin" | cut -f1)"
