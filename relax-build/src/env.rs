//! Every environment variable relax-build reads, by name, and the one function that
//! reads them. What each means is documented once, in the crate docs' table
//! (`docs/environment.md`).
//!
//! [`var`] also tells Cargo to rerun the build script when the variable changes.
//! Variables that Cargo sets for build scripts (`TARGET`, `OUT_DIR`, ...) are read
//! through [`cargo_var`], since Cargo already tracks them.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::cargo::Cargo;
use crate::error::{Error, Result};

pub const PYTHON: &str = "RELAX_PYTHON";
pub const VIRTUAL_ENV: &str = "VIRTUAL_ENV";
pub const TOOLCHAIN_DIR: &str = "RELAX_TOOLCHAIN_DIR";
pub const BOOTSTRAP_PYTHON: &str = "RELAX_BOOTSTRAP_PYTHON";
pub const ALLOW_TVM_VERSION: &str = "RELAX_ALLOW_TVM_VERSION";
pub const CACHE_DIR: &str = "RELAX_CACHE_DIR";
pub const CACHE_SIZE: &str = "RELAX_CACHE_SIZE";
pub const OFFLINE: &str = "RELAX_OFFLINE";
pub const CARGO_NET_OFFLINE: &str = "CARGO_NET_OFFLINE";
pub const XDG_CACHE_HOME: &str = "XDG_CACHE_HOME";
pub const HOME: &str = "HOME";
pub const PATH: &str = "PATH";
pub const CARGO_ENCODED_RUSTFLAGS: &str = "CARGO_ENCODED_RUSTFLAGS";
pub const RUSTC: &str = "RUSTC";

/// `RELAX_<MODEL>_<SUFFIX>`: a per-model override (`PIPELINE`, `TIR_PIPELINE`,
/// `OPT_LEVEL`, `TARGET`, `OFFLOAD`, `ONNX_PREPARE`, `PRECISION`).
pub fn model_variable(model: &str, suffix: &str) -> String {
    format!("RELAX_{}_{suffix}", model.to_ascii_uppercase())
}

/// `RELAX_RUNTIME_DIR_<TARGET>` (upper case, `-` as `_`): TVM runtime libraries built
/// for a Cargo target.
pub fn target_runtime_dir(cargo_target: &str) -> String {
    format!(
        "RELAX_RUNTIME_DIR_{}",
        cargo_target.replace('-', "_").to_ascii_uppercase()
    )
}

/// The variables naming the C++ compiler that links a cross target's model library,
/// in the order they are tried (as Cargo and the `cc` crate name them).
pub fn cross_compiler_variables(cargo_target: &str) -> [String; 4] {
    let underscored = cargo_target.replace('-', "_");
    [
        format!("CXX_{cargo_target}"),
        format!("CXX_{underscored}"),
        "TARGET_CXX".to_string(),
        format!("CARGO_TARGET_{}_LINKER", underscored.to_ascii_uppercase()),
    ]
}

/// Reads a variable that changes relax-build's output, and asks Cargo to watch it.
/// An empty value counts as unset.
pub fn var(cargo: Cargo, name: &str) -> Option<OsString> {
    cargo.rerun_if_env_changed(name);
    std::env::var_os(name).filter(|value| !value.is_empty())
}

/// Whether a variable is set to a true-ish value (`1`, `true`, `yes`, any case).
pub fn flag(cargo: Cargo, name: &str) -> bool {
    var(cargo, name).is_some_and(|value| is_true(&value.to_string_lossy()))
}

/// `1`, `true` or `yes`, in any case.
pub fn is_true(value: &str) -> bool {
    matches!(
        value.trim().to_ascii_lowercase().as_str(),
        "1" | "true" | "yes"
    )
}

/// Whether builds must not start Python or touch the network.
pub fn offline(cargo: Cargo) -> bool {
    flag(cargo, OFFLINE) | flag(cargo, CARGO_NET_OFFLINE)
}

/// The user's cache folder: `$XDG_CACHE_HOME`, else `$HOME/.cache`.
pub fn user_cache_dir(cargo: Cargo) -> Result<PathBuf> {
    var(cargo, XDG_CACHE_HOME)
        .map(PathBuf::from)
        .or_else(|| var(cargo, HOME).map(|home| Path::new(&home).join(".cache")))
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

/// The build's rustflags (`CARGO_ENCODED_RUSTFLAGS`, separated by `\x1f`).
pub fn rustflags() -> Vec<String> {
    std::env::var(CARGO_ENCODED_RUSTFLAGS)
        .map(|flags| {
            flags
                .split('\x1f')
                .filter(|flag| !flag.is_empty())
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn true_values_match_the_drivers_reading() {
        for value in ["1", "true", "TRUE", "True", "yes", " 1 "] {
            assert!(is_true(value), "{value}");
        }
        for value in ["0", "false", "", "no", "2"] {
            assert!(!is_true(value), "{value}");
        }
    }

    #[test]
    fn per_target_names_are_upper_case_with_underscores() {
        assert_eq!(
            target_runtime_dir("aarch64-unknown-linux-gnu"),
            "RELAX_RUNTIME_DIR_AARCH64_UNKNOWN_LINUX_GNU"
        );
        assert_eq!(
            model_variable("digits", "PIPELINE"),
            "RELAX_DIGITS_PIPELINE"
        );
        assert_eq!(
            cross_compiler_variables("aarch64-unknown-linux-gnu")[3],
            "CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER"
        );
    }
}
