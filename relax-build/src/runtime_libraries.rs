//! TVM's runtime libraries (`libtvm_ffi.so`, `libtvm_runtime.so`) built for a Cargo
//! target: where a build finds them, and fetching a cross target's from the pinned
//! wheels.
//!
//! Looked up, in order: `RELAX_RUNTIME_DIR_<TARGET>`; the package's prepared copy
//! (`.relax/runtime/<target>/`, written by `cargo relax prepare`); for the host, the
//! toolchain's own (or a cached probe's); for a cross target, the managed toolchain's
//! `targets/<target>/lib`, fetched with pip when missing and allowed.

use std::path::{Path, PathBuf};

use crate::cargo::Cargo;
use crate::env;
use crate::error::{io, Error, Result};
use crate::files::{self, LockFile};
use crate::locks::{self, Kind, Lock};
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
///
/// The wheels are hash-locked like the toolchain: their lines come from the shipped
/// toolchain lock of the target's platform (for the toolchain's CPython), pip downloads
/// them with `--require-hashes --only-binary=:all:`, and their sha256 is checked here
/// again before they are unzipped. No code of theirs runs here: the libraries are only
/// copied out.
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
    let python_tag = toolchain::python_tag(toolchain.python.as_os_str())?;
    let lock = wheels_lock(cargo_target, &python_tag)?;
    cargo.warning(&format!(
        "relax-build: fetching the TVM runtime libraries for {cargo_target} (the {arch} wheels of apache-tvm=={TVM_VERSION} and apache-tvm-ffi=={TVM_FFI_VERSION}, hash-locked) into {}",
        dir.display()
    ));
    let download = tempfile::Builder::new()
        .prefix(".download-")
        .tempdir_in(parent)
        .map_err(io(format!(
            "making a download folder in {}",
            parent.display()
        )))?;
    let wheels = download.path().join("wheels");
    let version = format!("{}.{}", &python_tag[2..3], &python_tag[3..]);
    let mut arguments: Vec<std::ffi::OsString> = vec![
        "download".into(),
        "-d".into(),
        wheels.clone().into(),
        "--python-version".into(),
        version.into(),
    ];
    for platform in [
        "manylinux_2_28",
        "manylinux_2_27",
        "manylinux_2_24",
        "manylinux2014",
    ] {
        arguments.push("--platform".into());
        arguments.push(format!("{platform}_{arch}").into());
    }
    let arguments: Vec<&std::ffi::OsStr> = arguments.iter().map(|arg| arg.as_os_str()).collect();
    toolchain::pip_locked(
        &toolchain.python,
        &arguments,
        &lock,
        &download.path().join("wheels.txt"),
        &format!("downloading the {arch} TVM runtime wheels with pip"),
    )?;
    check_wheels(&wheels, &lock)?;
    let partial = download.path().join("lib");
    let script = r#"
import os, shutil, sys, zipfile
wheels, out = sys.argv[1:3]
os.makedirs(out)
wanted = {"tvm/lib/libtvm_runtime.so", "tvm_ffi/lib/libtvm_ffi.so"}
for wheel in sorted(os.listdir(wheels)):
    with zipfile.ZipFile(os.path.join(wheels, wheel)) as archive:
        for name in archive.namelist():
            if name in wanted:
                with archive.open(name) as source, open(os.path.join(out, os.path.basename(name)), "wb") as target:
                    shutil.copyfileobj(source, target)
"#;
    toolchain::run(
        toolchain
            .command()
            .arg("-c")
            .arg(script)
            .arg(&wheels)
            .arg(&partial),
        &format!("unzipping the {arch} TVM runtime wheels"),
    )?;
    if !holds_libraries(&partial) {
        return Err(Error::Toolchain {
            message: format!(
                "the {arch} wheels had no libtvm_ffi.so / libtvm_runtime.so (looked in {})",
                wheels.display()
            ),
        });
    }
    if dir.exists() {
        std::fs::remove_dir_all(dir).map_err(io(format!("removing {}", dir.display())))?;
    }
    std::fs::rename(&partial, dir).map_err(io(format!(
        "renaming {} to {}",
        partial.display(),
        dir.display()
    )))
}

/// The hash lock of the two TVM wheels for `cargo_target`: their lines of the shipped
/// toolchain lock of the target's platform and a CPython tag.
fn wheels_lock(cargo_target: &str, python_tag: &str) -> Result<Lock> {
    let arch = cargo_target.split('-').next().unwrap_or_default();
    let no_wheels = |reason: String| {
        Error::Toolchain {
        message: format!(
            "relax-build cannot fetch TVM's runtime libraries for {cargo_target}: {reason}.\n\
             Fix: set {} to a folder holding libtvm_ffi.so and libtvm_runtime.so built for {cargo_target}.",
            env::target_runtime_dir(cargo_target)
        ),
    }
    };
    if !cargo_target.contains("-linux-") {
        return Err(no_wheels(
            "the pinned TVM wheels exist for Linux targets only".to_string(),
        ));
    }
    let toolchain_lock = locks::shipped_for(&format!("linux-{arch}"), Kind::Toolchain, python_tag)
        .map_err(no_wheels)?;
    let names = [
        format!("apache-tvm=={TVM_VERSION} "),
        format!("apache-tvm-ffi=={TVM_FFI_VERSION} "),
    ];
    let lines: Vec<&str> = toolchain_lock
        .text
        .lines()
        .filter(|line| names.iter().any(|name| line.starts_with(name.as_str())))
        .collect();
    if lines.len() != names.len() {
        return Err(no_wheels(format!(
            "{} does not pin both TVM wheels",
            toolchain_lock.name
        )));
    }
    Ok(Lock {
        name: format!("{} (its TVM wheels)", toolchain_lock.name),
        text: format!("{}\n", lines.join("\n")).into(),
    })
}

/// That every wheel pip left in `wheels` has a sha256 `lock` allows (pip checked them
/// too; this does not rely on it).
fn check_wheels(wheels: &Path, lock: &Lock) -> Result<()> {
    let allowed: Vec<&str> = lock
        .text
        .split_whitespace()
        .filter_map(|word| word.strip_prefix("--hash=sha256:"))
        .collect();
    let entries = std::fs::read_dir(wheels).map_err(io(format!("reading {}", wheels.display())))?;
    for entry in entries {
        let path = entry
            .map_err(io(format!("reading {}", wheels.display())))?
            .path();
        let found = files::sha256_file(&path)?;
        if !allowed.contains(&found.as_str()) {
            return Err(Error::HashMismatch {
                lock: lock.name.clone(),
                packages: vec![path.display().to_string()],
                message: format!(
                    "the downloaded wheel {} has sha256 {found}, which the hash lock {} does not \
                     allow ({}); it was not unzipped.\nFix: use a trustworthy package index (check \
                     PIP_INDEX_URL and pip.conf) and try again.",
                    path.display(),
                    lock.name,
                    allowed.join(", ")
                ),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The wheels' lock is the two TVM lines of the target platform's toolchain lock.
    #[test]
    fn the_wheels_lock_holds_the_two_tvm_lines_of_the_targets_platform() {
        let lock = wheels_lock("aarch64-unknown-linux-gnu", "cp311").unwrap();
        let toolchain = locks::shipped_for("linux-aarch64", Kind::Toolchain, "cp311").unwrap();
        let lines: Vec<&str> = lock.text.lines().collect();
        assert_eq!(lines.len(), 2, "{}", lock.text);
        for line in lines {
            assert!(toolchain.text.lines().any(|own| own == line), "{line}");
            assert!(line.contains("--hash=sha256:"), "{line}");
        }
        assert!(lock
            .text
            .starts_with(&format!("apache-tvm=={TVM_VERSION} ")));
        assert!(lock.name.contains("linux-aarch64/cp311/toolchain.txt"));
    }

    #[test]
    fn a_target_without_wheels_names_the_variable_to_set() {
        let error = wheels_lock("aarch64-apple-darwin", "cp311")
            .unwrap_err()
            .to_string();
        for part in [
            "cannot fetch TVM's runtime libraries for aarch64-apple-darwin",
            "Linux targets only",
            "Fix: set RELAX_RUNTIME_DIR_AARCH64_APPLE_DARWIN",
        ] {
            assert!(error.contains(part), "{part:?} in: {error}");
        }
        let error = wheels_lock("riscv64gc-unknown-linux-gnu", "cp311")
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("no hash lock for linux-riscv64gc with CPython 3.11"),
            "{error}"
        );
    }

    /// A wheel whose sha256 the lock does not allow is refused before it is unzipped.
    #[test]
    fn a_tampered_wheel_is_refused_before_it_is_unzipped() {
        let wheels = tempfile::tempdir().unwrap();
        let lock = wheels_lock("aarch64-unknown-linux-gnu", "cp311").unwrap();
        let wheel = wheels
            .path()
            .join("apache_tvm_ffi-0.1.14.post1-cp311-cp311-manylinux_2_28_aarch64.whl");
        std::fs::write(&wheel, b"not the locked wheel").unwrap();
        let error = check_wheels(wheels.path(), &lock).unwrap_err();
        assert!(matches!(error, Error::HashMismatch { .. }), "{error}");
        let message = error.to_string();
        for part in [
            &format!("the downloaded wheel {} has sha256", wheel.display()),
            "which the hash lock relax-build/locks/linux-aarch64/cp311/toolchain.txt (its TVM wheels) does not allow",
            "it was not unzipped",
        ] {
            assert!(message.contains(part), "{part:?} in: {message}");
        }
    }
}
