//! Every environment variable relax-build reads, in one place.
//!
//! | variable | meaning |
//! |---|---|
//! | `RELAX_PYTHON` | the Python interpreter to use; it must have `apache-tvm==0.27.0.post1` |
//! | `VIRTUAL_ENV` | an active virtualenv, used when its Python has the pinned TVM |
//! | `RELAX_TOOLCHAIN_DIR` | where the managed toolchain lives (default: `<user cache>/relax-cargo/toolchains`) |
//! | `RELAX_BOOTSTRAP_PYTHON` | the python3 that creates the managed toolchain's venv (default: `python3` on `PATH`) |
//! | `RELAX_ALLOW_TVM_VERSION` | `1` accepts a TVM other than the pinned one (unsupported) |
//! | `RELAX_CACHE_DIR` | the artifact cache (default: `<user cache>/relax-cargo/cache`) |
//! | `RELAX_OFFLINE` | `1`/`true`: use only prepared artifacts; never start Python or touch the network |
//! | `CARGO_NET_OFFLINE` | `true` (as set by `cargo --offline`): same as `RELAX_OFFLINE=1` |
//! | `XDG_CACHE_HOME`, `HOME` | locate `<user cache>`: `$XDG_CACHE_HOME`, else `$HOME/.cache` |
//!
//! Each is read through [`var`], which also tells Cargo to rerun the build script when
//! it changes. Variables that Cargo sets for build scripts (`TARGET`, `OUT_DIR`, ...)
//! are read through [`cargo_var`].

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::cargo;
use crate::error::{Error, Result};

pub const PYTHON: &str = "RELAX_PYTHON";
pub const VIRTUAL_ENV: &str = "VIRTUAL_ENV";
pub const TOOLCHAIN_DIR: &str = "RELAX_TOOLCHAIN_DIR";
pub const BOOTSTRAP_PYTHON: &str = "RELAX_BOOTSTRAP_PYTHON";
pub const ALLOW_TVM_VERSION: &str = "RELAX_ALLOW_TVM_VERSION";
pub const CACHE_DIR: &str = "RELAX_CACHE_DIR";
pub const OFFLINE: &str = "RELAX_OFFLINE";
pub const CARGO_NET_OFFLINE: &str = "CARGO_NET_OFFLINE";
pub const XDG_CACHE_HOME: &str = "XDG_CACHE_HOME";
pub const HOME: &str = "HOME";
pub const PATH: &str = "PATH";

/// Reads a variable that changes relax-build's output, and asks Cargo to watch it.
pub fn var(name: &str) -> Option<OsString> {
    cargo::rerun_if_env_changed(name);
    std::env::var_os(name).filter(|value| !value.is_empty())
}

/// Whether a variable is set to a true-ish value (`1`, `true`, `yes`).
pub fn flag(name: &str) -> bool {
    var(name)
        .is_some_and(|value| matches!(value.to_str(), Some("1" | "true" | "yes" | "TRUE" | "True")))
}

/// Whether builds must not start Python or touch the network.
pub fn offline() -> bool {
    flag(OFFLINE) | flag(CARGO_NET_OFFLINE)
}

/// The user's cache folder: `$XDG_CACHE_HOME`, else `$HOME/.cache`.
pub fn user_cache_dir() -> Result<PathBuf> {
    var(XDG_CACHE_HOME)
        .map(PathBuf::from)
        .or_else(|| var(HOME).map(|home| Path::new(&home).join(".cache")))
        .ok_or_else(|| Error::Toolchain {
            message: "cannot place relax-build's cache: neither XDG_CACHE_HOME nor HOME is set; \
                      set RELAX_CACHE_DIR and RELAX_TOOLCHAIN_DIR to writable folders"
                .to_string(),
        })
}

/// Reads a variable that Cargo sets for build scripts (Cargo already tracks these).
pub fn cargo_var(name: &'static str) -> Result<String> {
    std::env::var(name).map_err(|_| Error::MissingEnv {
        variable: name,
        hint: "relax-build runs from a build script (build.rs); outside one, set it through relax_build::Config",
    })
}
