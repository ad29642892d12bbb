//! Every environment variable relax-build reads, in one place.
//!
//! | variable | meaning |
//! |---|---|
//! | `RELAX_PYTHON` | the Python interpreter to use; it must have `apache-tvm==0.27.0.post1` |
//! | `VIRTUAL_ENV` | an active virtualenv, used when its Python has the pinned TVM |
//! | `RELAX_TOOLCHAIN_DIR` | where the managed toolchain lives (default: `$XDG_CACHE_HOME/relax-cargo/toolchains`, else `~/.cache/relax-cargo/toolchains`) |
//! | `RELAX_BOOTSTRAP_PYTHON` | the python3 that creates the managed toolchain's venv (default: `python3` on `PATH`) |
//! | `RELAX_ALLOW_TVM_VERSION` | `1` accepts a TVM other than the pinned one (unsupported) |
//!
//! Each is read through [`var`], which also tells Cargo to rerun the build script when
//! it changes. Variables that Cargo sets for build scripts (`TARGET`, `OUT_DIR`, ...)
//! are read through [`cargo_var`].

use std::ffi::OsString;

use crate::cargo;
use crate::error::{Error, Result};

pub const PYTHON: &str = "RELAX_PYTHON";
pub const VIRTUAL_ENV: &str = "VIRTUAL_ENV";
pub const TOOLCHAIN_DIR: &str = "RELAX_TOOLCHAIN_DIR";
pub const BOOTSTRAP_PYTHON: &str = "RELAX_BOOTSTRAP_PYTHON";
pub const ALLOW_TVM_VERSION: &str = "RELAX_ALLOW_TVM_VERSION";
pub const XDG_CACHE_HOME: &str = "XDG_CACHE_HOME";
pub const HOME: &str = "HOME";

/// Reads a variable that changes relax-build's output, and asks Cargo to watch it.
pub fn var(name: &str) -> Option<OsString> {
    cargo::rerun_if_env_changed(name);
    std::env::var_os(name).filter(|value| !value.is_empty())
}

/// Reads a variable that Cargo sets for build scripts (Cargo already tracks these).
pub fn cargo_var(name: &'static str) -> Result<String> {
    std::env::var(name).map_err(|_| Error::MissingEnv {
        variable: name,
        hint: "relax-build runs from a build script (build.rs); outside one, set it through relax_build::Config",
    })
}
