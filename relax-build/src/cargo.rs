//! The only place that prints Cargo build-script directives.
//!
//! Whether they are printed is a setting of the [`Config`](crate::Config) that made the
//! [`Cargo`] value (like `cc::Build::cargo_metadata`), never process-global state.

use std::path::Path;

/// Prints `cargo::` directives, or (outside a build script) only warnings to stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cargo {
    directives: bool,
}

impl Cargo {
    /// Directives on: relax-build runs in a build script.
    pub const BUILD_SCRIPT: Cargo = Cargo { directives: true };
    /// Directives off: relax-build runs in a tool (warnings go to stderr).
    pub const TOOL: Cargo = Cargo { directives: false };

    /// Directives on (a build script) or off (a tool).
    pub fn new(directives: bool) -> Cargo {
        Cargo { directives }
    }

    fn emit(self, line: std::fmt::Arguments<'_>) {
        if self.directives {
            println!("{line}");
        }
    }

    /// `cargo::rerun-if-changed=<path>`.
    pub fn rerun_if_changed(self, path: &Path) {
        self.emit(format_args!("cargo::rerun-if-changed={}", path.display()));
    }

    /// `cargo::rerun-if-env-changed=<name>`.
    pub fn rerun_if_env_changed(self, name: &str) {
        self.emit(format_args!("cargo::rerun-if-env-changed={name}"));
    }

    /// `cargo::rustc-env=<name>=<value>`.
    pub fn rustc_env(self, name: &str, value: &str) {
        self.emit(format_args!("cargo::rustc-env={name}={value}"));
    }

    /// A warning shown by Cargo, one directive per line of `message`; outside a build
    /// script it goes to stderr.
    pub fn warning(self, message: &str) {
        if !self.directives {
            eprintln!("warning: {message}");
            return;
        }
        for line in message.lines() {
            self.emit(format_args!("cargo::warning={line}"));
        }
    }
}
