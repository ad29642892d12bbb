//! The only place that prints Cargo build-script directives.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

static ENABLED: AtomicBool = AtomicBool::new(true);

/// Turns directives off (when relax-build is used outside a build script, e.g. in tests).
pub(crate) fn set_enabled(enabled: bool) {
    ENABLED.store(enabled, Ordering::Relaxed);
}

fn emit(line: std::fmt::Arguments<'_>) {
    if ENABLED.load(Ordering::Relaxed) {
        println!("{line}");
    }
}

pub(crate) fn rerun_if_changed(path: &Path) {
    emit(format_args!("cargo::rerun-if-changed={}", path.display()));
}

pub(crate) fn rerun_if_env_changed(name: &str) {
    emit(format_args!("cargo::rerun-if-env-changed={name}"));
}

pub(crate) fn rustc_env(name: &str, value: &str) {
    emit(format_args!("cargo::rustc-env={name}={value}"));
}

/// A warning shown by Cargo; one line per line of `message`. Outside a build script
/// (directives off) it goes to stderr.
pub(crate) fn warning(message: &str) {
    if !ENABLED.load(Ordering::Relaxed) {
        eprintln!("warning: {message}");
        return;
    }
    for line in message.lines() {
        emit(format_args!("cargo::warning={line}"));
    }
}
