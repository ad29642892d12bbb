//! The Cargo that `cargo relax` runs for package metadata and build scripts.

use std::process::Command;

/// A command of the Cargo that runs `cargo relax` (`CARGO`, which Cargo sets for its
/// subcommands), else of the `cargo` on `PATH`.
pub fn command() -> Command {
    Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
}
