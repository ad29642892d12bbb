//! TVM's runtime libraries (`libtvm_ffi.so`, `libtvm_runtime.so`) built for a Cargo
//! target: where a build finds them, and fetching a cross target's from the pinned
//! wheels.
//!
//! Looked up, in order: `RELAX_RUNTIME_DIR_<TARGET>`; the package's prepared copy
//! (`.relax/runtime/<target>/`, written by `cargo relax prepare`); for the host, the
//! toolchain's own (or a cached probe's); for a cross target, the managed toolchain's
//! `targets/<target>/lib`, fetched with pip when missing and allowed.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::cargo::Cargo;
use crate::env;
use crate::error::{io, Error, Result};
use crate::files::{self, LockFile};
use crate::toolchain::{self, Toolchain};
use crate::versions::{TVM_FFI_VERSION, TVM_VERSION};

/// The two libraries, in loading order.
pub const LIBRARIES: [&str; 2] = ["libtvm_ffi.so", "libtvm_runtime.so"];

/// Whether `dir` holds both libraries.
pub fn holds_libraries(dir: &Path) -> bool {
    LIBRARIES.iter().all(|library| dir.join(library).is_file())
}

/// The first folder of `dirs` that holds `library`.
pub fn find(dirs: &[PathBuf], library: &str) -> Option<PathBuf> {
    dirs.iter()
        .map(|dir| dir.join(library))
        .find(|path| path.is_file())
}

/// Where the managed toolchain keeps the runtime libraries of a (cross) Cargo target.
pub fn managed_target_dir(cargo: Cargo, cargo_target: &str) -> Result<PathBuf> {
    Ok(toolchain::managed_dir(cargo)?
        .join("targets")
        .join(cargo_target)
        .join("lib"))
}

/// The prepared copy of a target's libraries in a package's prepared folder.
pub fn prepared_dir(prepared_root: &Path, cargo_target: &str) -> PathBuf {
    prepared_root.join("runtime").join(cargo_target)
}

/// How to find the runtime libraries of a Cargo target (see [`dirs`]).
pub struct Lookup<'a> {
    pub cargo_target: &'a str,
    pub host: &'a str,
    /// The package's prepared folder (`.relax/`).
    pub prepared_root: &'a Path,
    /// The toolchain, if this build already found one (host builds use its libraries).
    pub toolchain: Option<&'a Toolchain>,
    /// Finds a toolchain; asked only when a cross target's libraries must be fetched.
    pub find_toolchain: &'a dyn Fn() -> Option<&'a Toolchain>,
    /// Finds the folders of a cached probe, without starting Python.
    pub known_dirs: &'a dyn Fn() -> Vec<PathBuf>,
    /// Whether a missing cross-target runtime may be fetched (with a toolchain).
    pub fetch: bool,
    pub cargo: Cargo,
}

/// Folders holding `libtvm_ffi.so` and `libtvm_runtime.so` built for a Cargo target
/// (possibly none, for a host build that needed no toolchain and knows none).
pub fn dirs(lookup: &Lookup<'_>) -> Result<Vec<PathBuf>> {
    let variable = env::target_runtime_dir(lookup.cargo_target);
    if let Some(dir) = env::var(lookup.cargo, &variable) {
        let dir = PathBuf::from(dir);
        if !holds_libraries(&dir) {
            return Err(Error::Toolchain {
                message: format!(
                    "{variable}={} does not hold libtvm_ffi.so and libtvm_runtime.so; point it at a folder with both, built for {}",
                    dir.display(),
                    lookup.cargo_target
                ),
            });
        }
        return Ok(vec![dir]);
    }
    let prepared = prepared_dir(lookup.prepared_root, lookup.cargo_target);
    if holds_libraries(&prepared) {
        return Ok(vec![prepared]);
    }
    if lookup.cargo_target == lookup.host {
        return Ok(match lookup.toolchain {
            Some(toolchain) => toolchain.runtime_library_dirs.clone(),
            None => (lookup.known_dirs)(),
        });
    }
    let dir = managed_target_dir(lookup.cargo, lookup.cargo_target)?;
    if holds_libraries(&dir) {
        return Ok(vec![dir]);
    }
    let toolchain = match lookup.fetch {
        true => lookup.toolchain.or_else(lookup.find_toolchain),
        false => None,
    };
    match toolchain {
        Some(toolchain) => {
            fetch_target(lookup.cargo, toolchain, lookup.cargo_target, &dir)?;
            Ok(vec![dir])
        }
        _ => Err(Error::Toolchain {
            message: format!(
                "the TVM runtime libraries for {target} are not in {dir}, and this build cannot fetch them \
                 (offline, or no TVM toolchain).\nFix: run `cargo relax prepare --target {target}` (it fetches them \
                 with pip and keeps a copy in .relax/runtime/{target}/), or set {variable} to a folder holding \
                 libtvm_ffi.so and libtvm_runtime.so built for {target}.",
                target = lookup.cargo_target,
                dir = dir.display()
            ),
        }),
    }
}

/// Copies both libraries from `dirs` into `to` (the prepared folder), each through a
/// temporary name.
pub fn copy_into(dirs: &[PathBuf], to: &Path, cargo_target: &str) -> Result<()> {
    std::fs::create_dir_all(to).map_err(io(format!("creating {}", to.display())))?;
    for library in LIBRARIES {
        let source = find(dirs, library).ok_or_else(|| Error::Toolchain {
            message: format!(
                "no {library} for {cargo_target} in {}",
                dirs.iter()
                    .map(|dir| dir.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        })?;
        files::place_copy(&source, &to.join(library), false)?;
    }
    Ok(())
}

/// Downloads the pinned wheels for `cargo_target`'s platform with the toolchain's pip and
/// extracts `libtvm_ffi.so` and `libtvm_runtime.so` into `dir` (atomically, under a lock).
pub fn fetch_target(
    cargo: Cargo,
    toolchain: &Toolchain,
    cargo_target: &str,
    dir: &Path,
) -> Result<()> {
    let arch = cargo_target.split('-').next().unwrap_or_default();
    let parent = dir.parent().expect("the runtime dir has a parent");
    std::fs::create_dir_all(parent).map_err(io(format!("creating {}", parent.display())))?;
    let _lock = LockFile::acquire(&parent.join("fetch.lock"), || {})?;
    if holds_libraries(dir) {
        return Ok(());
    }
    cargo.warning(&format!(
        "relax-build: fetching the TVM runtime libraries for {cargo_target} (the {arch} wheels of apache-tvm=={TVM_VERSION} and apache-tvm-ffi=={TVM_FFI_VERSION}) into {}",
        dir.display()
    ));
    let script = format!(
        r#"
import os, shutil, subprocess, sys, tempfile, zipfile
target = {dir:?}
partial = target + ".partial"
platforms = ["manylinux_2_28_{arch}", "manylinux_2_27_{arch}", "manylinux_2_24_{arch}", "manylinux2014_{arch}"]
with tempfile.TemporaryDirectory() as download:
    command = [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--no-input",
               "--only-binary=:all:", "--no-deps", "--python-version", "%d.%d" % sys.version_info[:2], "-d", download,
               "apache-tvm=={TVM_VERSION}", "apache-tvm-ffi=={TVM_FFI_VERSION}"]
    for platform in platforms:
        command += ["--platform", platform]
    subprocess.check_call(command)
    shutil.rmtree(partial, ignore_errors=True)
    os.makedirs(partial)
    wanted = {{"tvm/lib/libtvm_runtime.so", "tvm_ffi/lib/libtvm_ffi.so"}}
    for wheel in os.listdir(download):
        with zipfile.ZipFile(os.path.join(download, wheel)) as archive:
            for name in archive.namelist():
                if name in wanted:
                    with archive.open(name) as source, open(os.path.join(partial, os.path.basename(name)), "wb") as out:
                        shutil.copyfileobj(source, out)
shutil.rmtree(target, ignore_errors=True)
os.replace(partial, target)
"#,
        dir = dir.to_string_lossy()
    );
    toolchain::run(
        Command::new(&toolchain.python).arg("-c").arg(script),
        &format!("fetching the {arch} TVM runtime wheels with pip"),
    )?;
    if !holds_libraries(dir) {
        return Err(Error::Toolchain {
            message: format!(
                "the {arch} wheels had no libtvm_ffi.so / libtvm_runtime.so (looked in {})",
                dir.display()
            ),
        });
    }
    Ok(())
}
