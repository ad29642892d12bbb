#!/usr/bin/env bash
# Sets up what the tests need on a fresh machine, then runs every check and test.
#
# Needs: the Rust toolchain (cargo, rustfmt, clippy) and python3 with venv and pip;
# installs the aarch64 cross toolchain, qemu-user and the Rust target when missing.
# The first build provisions the pinned TVM toolchain itself (a venv under
# ~/.cache/relax-cargo/toolchains, about a minute), as it would for a user.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! python3 -c 'import venv, ensurepip' 2>/dev/null; then
  echo "python3 with venv and ensurepip is needed; installing Debian's python3-venv" >&2
  apt-get update -qq && apt-get install -y -qq python3 python3-venv python3-pip
fi
rustup component add rustfmt clippy >/dev/null 2>&1 || true

# Cross-compilation tests: aarch64 C/C++ toolchain, qemu, and the Rust target.
if ! command -v aarch64-linux-gnu-g++ >/dev/null || ! command -v qemu-aarch64 >/dev/null; then
  echo "installing the aarch64 cross toolchain and qemu-user (Debian packages)" >&2
  apt-get update -qq && apt-get install -y -qq gcc-aarch64-linux-gnu g++-aarch64-linux-gnu qemu-user
fi
rustup target list --installed | grep -qx aarch64-unknown-linux-gnu || rustup target add aarch64-unknown-linux-gnu

cargo fmt --all -- --check
cargo clippy --workspace --all-targets --all-features -- -D warnings
# The benchmark in its short mode, so it cannot rot (figures: `cargo run --release -p relax-bench`).
cargo run --release -p relax-bench -- --quick
cargo test --workspace
cargo test -p relax-runtime --features half

