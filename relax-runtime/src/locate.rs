//! Where TVM's two runtime libraries are looked for, at run time, without any path of
//! the build machine:
//!
//! 1. `RELAX_RUNTIME_DIR`, when set (and not empty);
//! 2. the executable's folder (how `cargo relax bundle` ships them);
//! 3. the copy relax-build made in the build's `OUT_DIR`, found relative to the
//!    executable's folder (so `cargo run` and `cargo test` need no variable);
//! 4. the managed toolchain, located from the environment as relax-build locates it
//!    (`RELAX_TOOLCHAIN_DIR`, else `$XDG_CACHE_HOME` or `~/.cache`, then
//!    `relax-cargo/toolchains/tvm-<version>`): its `targets/<target>/lib` for the
//!    running target, and its Python packages' `lib` folders.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// Environment variable naming a folder that holds both TVM runtime libraries.
pub const RUNTIME_DIR_VARIABLE: &str = "RELAX_RUNTIME_DIR";

/// What the model being loaded knows of where its runtime could be.
#[derive(Debug, Clone, Copy)]
pub struct Hints<'a> {
    /// The apache-tvm version the model was compiled with.
    pub tvm_version: &'a str,
    /// The Cargo target the executable was built for.
    pub cargo_target: &'a str,
    /// The runtime folder relative to the executable's folder, when relax-build knew it.
    pub relative_to_executable: Option<&'a str>,
}

fn non_empty(name: &str) -> Option<OsString> {
    std::env::var_os(name).filter(|value| !value.is_empty())
}

/// The folders to search, in order.
pub fn search_dirs(hints: &Hints<'_>) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    if let Some(dir) = non_empty(RUNTIME_DIR_VARIABLE) {
        dirs.push(PathBuf::from(dir));
    }
    let executable_dir = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(Path::to_path_buf));
    if let Some(dir) = &executable_dir {
        dirs.push(dir.clone());
        if let Some(relative) = hints.relative_to_executable {
            // Binaries live in the profile folder, tests and examples one below it.
            dirs.push(dir.join(relative));
            if let Some(parent) = dir.parent() {
                dirs.push(parent.join(relative));
            }
        }
    }
    if let Some(toolchain) = managed_toolchain(hints.tvm_version) {
        dirs.push(
            toolchain
                .join("targets")
                .join(hints.cargo_target)
                .join("lib"),
        );
        dirs.extend(site_package_lib_dirs(&toolchain));
    }
    dirs
}

/// `relax-cargo/toolchains/tvm-<version>` under `RELAX_TOOLCHAIN_DIR` or the user cache.
fn managed_toolchain(tvm_version: &str) -> Option<PathBuf> {
    let root = match non_empty("RELAX_TOOLCHAIN_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => {
            let cache = non_empty("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .or_else(|| non_empty("HOME").map(|home| Path::new(&home).join(".cache")))?;
            cache.join("relax-cargo").join("toolchains")
        }
    };
    Some(root.join(format!("tvm-{tvm_version}")))
}

/// `lib/python3.*/site-packages/{tvm_ffi,tvm}/lib` of a venv.
fn site_package_lib_dirs(venv: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(venv.join("lib")) else {
        return Vec::new();
    };
    let mut pythons: Vec<PathBuf> = entries
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| {
            path.file_name()
                .is_some_and(|name| name.to_string_lossy().starts_with("python3"))
        })
        .collect();
    pythons.sort();
    pythons
        .into_iter()
        .flat_map(|python| {
            let packages = python.join("site-packages");
            [
                packages.join("tvm_ffi").join("lib"),
                packages.join("tvm").join("lib"),
            ]
        })
        .collect()
}

/// The first folder of `dirs` holding `library`.
pub fn find(library: &str, dirs: &[PathBuf]) -> Option<PathBuf> {
    dirs.iter()
        .map(|dir| dir.join(library))
        .find(|path| path.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_copy_next_to_the_build_is_searched_from_binaries_and_tests() {
        let dirs = search_dirs(&Hints {
            tvm_version: "0.27.0.post1",
            cargo_target: "x86_64-unknown-linux-gnu",
            relative_to_executable: Some("build/app-0123/out/relax/runtime"),
        });
        let exe_dir = std::env::current_exe()
            .unwrap()
            .parent()
            .unwrap()
            .to_path_buf();
        assert!(dirs.contains(&exe_dir.join("build/app-0123/out/relax/runtime")));
        assert!(dirs.contains(
            &exe_dir
                .parent()
                .unwrap()
                .join("build/app-0123/out/relax/runtime")
        ));
        assert!(dirs
            .iter()
            .any(|dir| dir.ends_with("tvm-0.27.0.post1/targets/x86_64-unknown-linux-gnu/lib")));
    }
}
