#!/usr/bin/env bash
# Sets up what the tests need on a fresh machine, then runs every check and test.
#
# Needs: the Rust toolchain (cargo, rustfmt, clippy) and python3 with venv and pip.
# The first build provisions the pinned TVM toolchain itself (a venv under
# ~/.cache/relax-cargo/toolchains, about a minute), as it would for a user.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! python3 -c 'import venv, ensurepip' 2>/dev/null; then
  echo "python3 with venv and ensurepip is needed; installing Debian's python3-venv" >&2
  apt-get update -qq && apt-get install -y -qq python3 python3-venv python3-pip
fi
rustup component add rustfmt clippy >/dev/null 2>&1 || true

cargo fmt --all -- --check
cargo clippy --workspace --all-targets --all-features -- -D warnings
cargo test --workspace
cargo test -p relax-runtime --features half
