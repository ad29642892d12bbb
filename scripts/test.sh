#!/usr/bin/env bash
# Sets up what the tests need on a fresh machine, then runs every check and test.
#
# Needs: the Rust toolchain (cargo, rustfmt, clippy) and python3 with venv and pip;
# installs the aarch64 cross toolchain, qemu-user and the Rust target when missing.
# The first build provisions the pinned TVM toolchain itself (a venv under
# ~/.cache/relax-cargo/toolchains, about a minute), as it would for a user.
set -euo pipefail
cd "$(dirname "$0")/.."

# Runs a step and says how long it took, so that a slow CI run shows where its time went.
step() {
  local start=$SECONDS
  "$@"
  printf 'test.sh: %.120s: %d s\n' "$*" $((SECONDS - start)) >&2
}

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

# Debug builds keep line tables only: full debug info was half of the ~13 GB that a run
# writes (the workspace's and the fixture apps' target folders), and a full disk fails it.
export CARGO_PROFILE_DEV_DEBUG=line-tables-only
step cargo fmt --all -- --check
step cargo clippy --workspace --all-targets --all-features -- -D warnings
# docs.rs builds the libraries with DOCS_RS=1 on a machine without Python or TVM.
step env DOCS_RS=1 RUSTDOCFLAGS="-D warnings" RELAX_PYTHON=/nonexistent/python \
  cargo doc --no-deps -p relax-build -p relax-kernels -p relax-perf-map -p relax-runtime -p relax-runtime-macros
# The benchmark and the soak run in their short modes, so that they cannot rot (figures:
# `cargo run --release -p relax-bench`; tests/bench_outputs.rs checks its models' outputs).
# They build in the target dir the tests' own cargo runs use (tests/support's
# fixture_target_dir), so that the tests find relax-bench and its models built.
step env CARGO_TARGET_DIR=target/fixtures cargo run --release -p relax-bench -- --quick
step env CARGO_TARGET_DIR=target/fixtures cargo run --release -p relax-bench --bin soak -- --quick
step cargo bench -p relax-kernels -- --quick
step cargo test --workspace --no-fail-fast
# The torch-digits example is a workspace of its own (it installs torch): checked here.
step cargo fmt --manifest-path examples/torch-digits/Cargo.toml -- --check
step cargo clippy --manifest-path examples/torch-digits/Cargo.toml --all-targets -- -D warnings
step cargo test -p relax-runtime --features half,ndarray
# relax-kernels' tests (each kernel against naive loops: Winograd, panels, convolutions...)
# on aarch64 too, where the kernels take their portable paths, under qemu; no TVM needed.
step env CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="qemu-aarch64 -L /usr/aarch64-linux-gnu" \
  cargo test -p relax-kernels --target aarch64-unknown-linux-gnu
# The crates package and would publish (dependencies by version, the driver and docs included).
# Cargo verifies each crate against the others' packaged copies, extracted under
# registry/src/-<hash>/ per checkout folder and built as registry crates. It neither
# extracts nor rebuilds a name and version it has seen, so copies from an earlier run
# would stand in for today's: both go first, and the check builds in its own folder.
rm -rf "${CARGO_HOME:-$HOME/.cargo}"/registry/src/-*/{relax-build,relax-kernels,relax-perf-map,relax-runtime,relax-runtime-macros,cargo-relax}-[0-9]* target/publish-check
step env CARGO_TARGET_DIR=target/publish-check \
  cargo publish --dry-run --allow-dirty -p relax-kernels -p relax-perf-map -p relax-runtime-macros -p relax-runtime -p relax-build -p cargo-relax
rm -rf target/publish-check

