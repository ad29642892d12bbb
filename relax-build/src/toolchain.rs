//! Finding (or provisioning) a Python with the pinned TVM.
//!
//! Candidates, in order:
//!
//! 1. `RELAX_PYTHON`: an explicit choice; if it is unusable, that is the error;
//! 2. `python = "..."` in `[package.metadata.relax]` (a path, or a command looked up on
//!    `PATH`): likewise;
//! 3. the active virtualenv (`VIRTUAL_ENV`);
//! 4. the managed toolchain, if it is complete;
//! 5. `python3` on `PATH`;
//! 6. otherwise the managed toolchain is provisioned: a venv under `RELAX_TOOLCHAIN_DIR`
//!    with the packages of `versions::requirements()`, installed hash-locked
//!    (`pip install --require-hashes --no-deps` from the shipped lock for this platform
//!    and the venv's CPython, see [`crate::locks`]), made behind a file lock and marked
//!    complete only when the install succeeded. The marker records the lock's name and
//!    sha256: a second provisioning with the same lock reuses the venv without running
//!    pip; a half-made venv is removed and made again; one complete for another lock
//!    (an older relax-build's pins) is upgraded in place from the new lock (packages
//!    the new lock drops stay), and one made before the locks is made again.
//!
//! A candidate is probed without importing TVM (which costs over a second): the probe
//! reads the installed package versions and where their libraries and `RECORD` files
//! are. Probes are cached by interpreter path and modification time, so a build whose
//! models are all cached starts no Python at all. The toolchain's build hash is the
//! sha256 of the two wheels' `RECORD` files (which list the sha256 of every installed
//! file), computed in Rust on every build.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::UNIX_EPOCH;

use serde::{Deserialize, Serialize};

use crate::cargo::Cargo;
use crate::env;
use crate::error::{io, Error, Result};
use crate::files::{self, LockFile};
use crate::locks::{self, Kind, Lock};
use crate::metadata::PythonSetting;
use crate::versions::{install_command, TVM_VERSION};

/// A usable Python with TVM.
#[derive(Debug, Clone)]
pub struct Toolchain {
    /// The interpreter.
    pub python: PathBuf,
    /// Its apache-tvm version.
    pub tvm_version: String,
    /// Folders holding `libtvm_ffi.so` and `libtvm_runtime.so`.
    pub runtime_library_dirs: Vec<PathBuf>,
    /// sha256 over the installed wheels' RECORD files: changes with any TVM rebuild.
    pub build_hash: String,
    /// Which candidate it was (`RELAX_PYTHON`, `the managed toolchain`, ...).
    pub origin: String,
    /// Whether `RELAX_ALLOW_TVM_VERSION` lets another TVM version through.
    pub allow_other_version: bool,
    /// Folders put first on `PYTHONPATH` for this Python: the optional packages a build
    /// asked for (torch for PyTorch sources), kept apart from the base toolchain (see
    /// docs/environment.md, "Optional packages, apart"). Empty for a build that asked for
    /// none.
    pub python_path: Vec<PathBuf>,
}

impl Toolchain {
    /// A command running this Python, with [`Toolchain::python_path`] first on
    /// `PYTHONPATH`.
    pub fn command(&self) -> Command {
        let mut command = Command::new(&self.python);
        if !self.python_path.is_empty() {
            let inherited = std::env::var_os("PYTHONPATH").unwrap_or_default();
            let paths = self
                .python_path
                .iter()
                .cloned()
                .chain(std::env::split_paths(&inherited));
            command.env(
                "PYTHONPATH",
                std::env::join_paths(paths).expect("toolchain folders hold no path separator"),
            );
        }
        command
    }
}

/// What the probe script reports.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Probe {
    tvm: Option<String>,
    tvm_lib: Option<PathBuf>,
    tvm_ffi_lib: Option<PathBuf>,
    records: Vec<PathBuf>,
}

/// A probe remembered for an interpreter of a given modification time.
#[derive(Debug, Serialize, Deserialize)]
struct CachedProbe {
    python: PathBuf,
    modified_ns: u128,
    probe: Probe,
}

const PROBE: &str = r#"
import importlib.metadata as metadata, importlib.util as util, json, os
def version(name):
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None
def lib_dir(package):
    spec = util.find_spec(package)
    return os.path.join(os.path.dirname(spec.origin), "lib") if spec and spec.origin else None
def record(name):
    try:
        files = metadata.distribution(name).files or []
    except metadata.PackageNotFoundError:
        return None
    paths = [str(f.locate()) for f in files if f.name == "RECORD"]
    return paths[0] if paths else None
print(json.dumps({
    "tvm": version("apache-tvm"),
    "tvm_lib": lib_dir("tvm"),
    "tvm_ffi_lib": lib_dir("tvm_ffi"),
    "records": [r for r in (record("apache-tvm"), record("apache-tvm-ffi")) if r],
}))
"#;

/// Where to look for a Python: the manifest's setting, the probe cache, and how to report.
pub struct Lookup<'a> {
    pub manifest_python: Option<&'a PythonSetting>,
    /// The folder of cached probes.
    pub probes_dir: &'a Path,
    pub cargo: Cargo,
}

impl Lookup<'_> {
    /// Finds a Python with the pinned TVM, provisioning the managed toolchain when none is found.
    pub fn find_or_provision(&self) -> Result<Toolchain> {
        let cargo = self.cargo;
        let allow_other_version = env::flag(cargo, env::ALLOW_TVM_VERSION);
        let probe = |python: &Path, origin: &str| {
            self.probe_cached(python, allow_other_version)
                .map(|mut toolchain| {
                    toolchain.origin = origin.to_string();
                    toolchain
                })
        };
        let install = install_command();
        if let Some(python) = env::var(cargo, env::PYTHON) {
            let python = PathBuf::from(python);
            return probe(&python, "RELAX_PYTHON").map_err(|reason| Error::Toolchain {
                message: format!(
                    "RELAX_PYTHON={} cannot be used: {reason}\n\
                     Fix: point RELAX_PYTHON at a Python with TVM (`{install}`), \
                     or unset it to let relax-build find or provision one.",
                    python.display()
                ),
            });
        }
        if let Some(setting) = self.manifest_python {
            let (shown, python) = match setting {
                PythonSetting::Path(path) => (path.display().to_string(), Ok(path.clone())),
                PythonSetting::Command(name) => (
                    name.clone(),
                    find_on_path(cargo, name)
                        .ok_or_else(|| format!("`{name}` is not a program on PATH")),
                ),
            };
            return python
                .and_then(|python| probe(&python, "package.metadata.relax.python"))
                .map_err(|reason| Error::Toolchain {
                    message: format!(
                        "`package.metadata.relax.python` = {shown} cannot be used: {reason}\n\
                         Fix: point it at a Python with TVM (`{install}`), or remove the key."
                    ),
                });
        }
        let mut tried = Vec::new();
        if let Some(venv) = env::var(cargo, env::VIRTUAL_ENV) {
            let python = Path::new(&venv).join("bin").join("python");
            match probe(&python, "the active virtualenv") {
                Ok(toolchain) => return Ok(toolchain),
                Err(reason) => {
                    tried.push(format!("active virtualenv {}: {reason}", python.display()))
                }
            }
        }
        let managed = managed_dir(cargo)?;
        if is_complete(&managed, &LockSource::Shipped) {
            match probe(&managed_python(&managed), "the managed toolchain") {
                Ok(toolchain) => return Ok(toolchain),
                Err(reason) => {
                    tried.push(format!("managed toolchain {}: {reason}", managed.display()))
                }
            }
        }
        if let Some(python) = find_on_path(cargo, "python3") {
            match probe(&python, "python3 on PATH") {
                Ok(toolchain) => return Ok(toolchain),
                Err(reason) => {
                    tried.push(format!("python3 on PATH ({}): {reason}", python.display()))
                }
            }
        } else {
            tried.push("python3 on PATH: not found".to_string());
        }
        let failure = |message: String| {
            // A failure that names its own fix (no lock for this platform) gets no other.
            let fix = if message.contains("\nFix: ") {
                String::new()
            } else {
                format!(
                    "\nFix: make sure `python3 -m venv` works and pip can reach PyPI (or a mirror \
                     through PIP_INDEX_URL), or set RELAX_PYTHON to a Python where you ran `{install}`."
                )
            };
            Error::Toolchain {
                message: format!(
                    "no usable Python with apache-tvm {TVM_VERSION} was found, and provisioning one failed.\n\
                     Tried:\n{}  provisioning the managed toolchain in {}: {message}{fix}",
                    tried.iter().map(|line| format!("  {line}\n")).collect::<String>(),
                    managed.display()
                ),
            }
        };
        provision(cargo, &managed, &LockSource::Shipped).map_err(|error| match error {
            // A tampered package is the whole story; "make sure pip can reach PyPI" is not the fix.
            Error::HashMismatch { .. } => error,
            other => failure(other.to_string()),
        })?;
        probe(
            &managed_python(&managed),
            "the managed toolchain (just provisioned)",
        )
        .map_err(failure)
    }

    fn probe_path(&self, python: &Path) -> PathBuf {
        let name = files::sha256_bytes(python.as_os_str().as_encoded_bytes());
        self.probes_dir.join(format!("{}.json", &name[..16]))
    }

    /// Probes an interpreter, reusing a cached probe when the interpreter is unchanged.
    fn probe_cached(
        &self,
        python: &Path,
        allow_other_version: bool,
    ) -> std::result::Result<Toolchain, String> {
        let modified =
            modified_ns(python).ok_or_else(|| format!("{} does not exist", python.display()))?;
        let cache_path = self.probe_path(python);
        let cached = std::fs::read(&cache_path)
            .ok()
            .and_then(|bytes| serde_json::from_slice::<CachedProbe>(&bytes).ok())
            .filter(|cached| cached.python == python && cached.modified_ns == modified)
            .filter(|cached| cached.probe.records.iter().all(|record| record.is_file()));
        if let Some(cached) = cached {
            if let Ok(toolchain) = toolchain_from(python, &cached.probe, allow_other_version) {
                return Ok(toolchain);
            }
        }
        let probe = run_probe(python)?;
        let toolchain = toolchain_from(python, &probe, allow_other_version)?;
        let entry = CachedProbe {
            python: python.to_path_buf(),
            modified_ns: modified,
            probe,
        };
        if std::fs::create_dir_all(self.probes_dir).is_ok() {
            // A cache: failing to write it only costs a probe next time.
            let _ = files::write_atomically(
                &cache_path,
                &serde_json::to_vec(&entry).expect("probes serialize"),
            );
        }
        Ok(toolchain)
    }

    /// Runtime library folders known without starting Python: those of a cached probe
    /// of `RELAX_PYTHON`, the manifest's `python`, or the managed toolchain, if they exist.
    pub fn known_runtime_library_dirs(&self) -> Vec<PathBuf> {
        let cargo = self.cargo;
        let mut candidates: Vec<PathBuf> = env::var(cargo, env::PYTHON)
            .map(PathBuf::from)
            .into_iter()
            .collect();
        match self.manifest_python {
            Some(PythonSetting::Path(path)) => candidates.push(path.clone()),
            Some(PythonSetting::Command(name)) => candidates.extend(find_on_path(cargo, name)),
            None => {}
        }
        if let Ok(managed) = managed_dir(cargo) {
            candidates.push(managed_python(&managed));
        }
        candidates
            .iter()
            .filter_map(|python| {
                let bytes = std::fs::read(self.probe_path(python)).ok()?;
                let cached: CachedProbe = serde_json::from_slice(&bytes).ok()?;
                let dirs = [cached.probe.tvm_ffi_lib?, cached.probe.tvm_lib?];
                dirs.iter().all(|dir| dir.is_dir()).then(|| dirs.to_vec())
            })
            .next()
            .unwrap_or_default()
    }
}

/// Where the managed toolchain's packages come from.
#[derive(Debug, Clone)]
pub enum LockSource {
    /// The locks shipped in relax-build, for this platform and the venv's CPython.
    Shipped,
    /// One given lock, whatever the platform (tests).
    Given(Lock),
}

impl LockSource {
    /// The lock of `kind` for a CPython tag (`cp311`), or why there is none.
    fn for_python(&self, kind: Kind, python_tag: &str) -> std::result::Result<Lock, String> {
        match self {
            LockSource::Shipped => locks::shipped(kind, python_tag),
            LockSource::Given(lock) => Ok(lock.clone()),
        }
    }

    /// The lock a complete marker names, if this source still has it.
    fn named(&self, name: &str) -> Option<Lock> {
        match self {
            LockSource::Shipped => locks::shipped_named(name),
            LockSource::Given(lock) => (lock.name == name).then(|| lock.clone()),
        }
    }
}

/// What provisioning the managed toolchain did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provisioned {
    /// The toolchain was complete for the same lock: nothing was run.
    Reused,
    /// A new venv was made and installed from the lock.
    Made,
    /// A venv complete for another lock was upgraded in place from the new one.
    Upgraded,
}

/// Whether `dir` holds a toolchain completely installed from a lock `locks` still has,
/// unchanged (the marker records the lock's name and sha256). Starts no Python.
fn is_complete(dir: &Path, locks: &LockSource) -> bool {
    let Ok(text) = std::fs::read_to_string(dir.join(COMPLETE_MARKER)) else {
        return false;
    };
    let mut words = text.split_whitespace();
    match (words.next(), words.next(), words.next(), words.next()) {
        (Some("lock"), Some(name), Some("sha256"), Some(sha256)) => locks
            .named(name)
            .is_some_and(|lock| lock.sha256() == sha256),
        _ => false,
    }
}

fn marker_text(lock: &Lock) -> String {
    format!("lock {} sha256 {}\n", lock.name, lock.sha256())
}

/// The CPython tag (`cp311`) of an interpreter, which picks its lock.
pub(crate) fn python_tag(python: &std::ffi::OsStr) -> Result<String> {
    let shown = Path::new(python).display().to_string();
    let output = Command::new(python)
        .args([
            "-c",
            "import sys; print('%s%d%d' % ('cp' if sys.implementation.name == 'cpython' \
             else sys.implementation.name, *sys.version_info[:2]))",
        ])
        .output()
        .map_err(|error| Error::Toolchain {
            message: format!("cannot run {shown} to read its Python version ({error})"),
        })?;
    if !output.status.success() {
        return Err(Error::Toolchain {
            message: format!(
                "{shown} failed to report its Python version: {}",
                String::from_utf8_lossy(&output.stderr).trim()
            ),
        });
    }
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_string())
}

/// Why there is no lock for `python` here, and the fix.
pub(crate) fn no_lock(reason: String, python: &std::ffi::OsStr) -> Error {
    Error::Toolchain {
        message: format!(
            "{reason}; {} would make the venv.\nFix: set RELAX_BOOTSTRAP_PYTHON to a CPython \
             relax-build has locks for, or set RELAX_PYTHON to a Python of your own where you \
             ran `{}`.",
            Path::new(python).display(),
            install_command()
        ),
    }
}

/// The folder of the managed toolchain for the pinned TVM version.
pub fn managed_dir(cargo: Cargo) -> Result<PathBuf> {
    let root = match env::var(cargo, env::TOOLCHAIN_DIR) {
        Some(dir) => PathBuf::from(dir),
        None => env::user_cache_dir(cargo)?
            .join("relax-cargo")
            .join("toolchains"),
    };
    Ok(root.join(format!("tvm-{TVM_VERSION}")))
}

pub(crate) fn managed_python(dir: &Path) -> PathBuf {
    dir.join("bin").join("python")
}

/// A program on `PATH`, as a shell would find it.
fn find_on_path(cargo: Cargo, program: &str) -> Option<PathBuf> {
    search_path(&env::var(cargo, env::PATH)?, program)
}

/// The first `<dir>/<program>` of a `PATH` value that is a file.
fn search_path(path: &std::ffi::OsStr, program: &str) -> Option<PathBuf> {
    std::env::split_paths(path)
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file())
}

fn modified_ns(path: &Path) -> Option<u128> {
    let modified = std::fs::metadata(path).ok()?.modified().ok()?;
    Some(modified.duration_since(UNIX_EPOCH).ok()?.as_nanos())
}

fn run_probe(python: &Path) -> std::result::Result<Probe, String> {
    let output = Command::new(python)
        .arg("-c")
        .arg(PROBE)
        .output()
        .map_err(|error| format!("cannot run it ({error})"))?;
    if !output.status.success() {
        return Err(format!(
            "it failed to run a version probe: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    serde_json::from_slice(&output.stdout)
        .map_err(|error| format!("its version probe printed something unexpected ({error})"))
}

fn toolchain_from(
    python: &Path,
    probe: &Probe,
    allow_other_version: bool,
) -> std::result::Result<Toolchain, String> {
    let tvm_version = probe
        .tvm
        .clone()
        .ok_or("apache-tvm is not installed there")?;
    if tvm_version != TVM_VERSION && !allow_other_version {
        return Err(format!(
            "it has apache-tvm {tvm_version}, but relax-build supports {TVM_VERSION} \
             (set RELAX_ALLOW_TVM_VERSION=1 to try it anyway)"
        ));
    }
    let runtime_library_dirs = [probe.tvm_ffi_lib.clone(), probe.tvm_lib.clone()]
        .into_iter()
        .collect::<Option<Vec<_>>>()
        .ok_or("the tvm or tvm_ffi package has no lib folder")?;
    let mut records = Vec::new();
    for record in &probe.records {
        records.extend(
            std::fs::read(record)
                .map_err(|error| format!("cannot read {} ({error})", record.display()))?,
        );
    }
    Ok(Toolchain {
        python: python.to_path_buf(),
        tvm_version,
        runtime_library_dirs,
        build_hash: files::sha256_bytes(&records),
        origin: String::new(),
        allow_other_version,
        python_path: Vec::new(),
    })
}

const COMPLETE_MARKER: &str = "relax-toolchain-complete";

/// Creates (or upgrades) the managed toolchain from its lock unless it is complete for
/// the same lock; safe to run from several builds at once.
pub fn provision(cargo: Cargo, dir: &Path, locks: &LockSource) -> Result<Provisioned> {
    if is_complete(dir, locks) {
        return Ok(Provisioned::Reused);
    }
    let parent = dir.parent().expect("the toolchain dir has a parent");
    std::fs::create_dir_all(parent).map_err(io(format!("creating {}", parent.display())))?;
    let _lock = lock_beside(cargo, dir, "lock", "provisioning the TVM toolchain")?;
    if is_complete(dir, locks) {
        return Ok(Provisioned::Reused);
    }
    let marker = dir.join(COMPLETE_MARKER);
    let python = managed_python(dir);
    // Complete for another lock: upgraded in place when the lock has the venv's Python.
    // (A venv of a relax-build before the locks, installed without hashes, is made again:
    // pip would keep its packages as they are.)
    let made_from_a_lock =
        std::fs::read_to_string(&marker).is_ok_and(|text| text.starts_with("lock "));
    let upgrade_lock = if made_from_a_lock && python.is_file() {
        python_tag(python.as_os_str())
            .ok()
            .and_then(|tag| locks.for_python(Kind::Toolchain, &tag).ok())
    } else {
        None
    };
    let (lock, upgraded) = match upgrade_lock {
        Some(lock) => {
            cargo.warning(&format!(
                "relax-build: upgrading the managed TVM toolchain in {} to the hash lock {}",
                dir.display(),
                lock.name
            ));
            std::fs::remove_file(&marker).map_err(io(format!("removing {}", marker.display())))?;
            (lock, true)
        }
        None => {
            let bootstrap =
                env::var(cargo, env::BOOTSTRAP_PYTHON).unwrap_or_else(|| "python3".into());
            let tag = python_tag(&bootstrap)?;
            let lock = locks
                .for_python(Kind::Toolchain, &tag)
                .map_err(|reason| no_lock(reason, &bootstrap))?;
            if dir.exists() {
                cargo.warning(
                    "relax-build: removing a half-made (or unusable) toolchain left by an \
                     interrupted install",
                );
                std::fs::remove_dir_all(dir).map_err(io(format!("removing {}", dir.display())))?;
            }
            cargo.warning(&format!(
                "relax-build: creating the managed TVM toolchain in {} (one time, about a minute)",
                dir.display()
            ));
            run(
                Command::new(&bootstrap).arg("-m").arg("venv").arg(dir),
                &format!(
                    "`{} -m venv {}`",
                    bootstrap.to_string_lossy(),
                    dir.display()
                ),
            )?;
            (lock, false)
        }
    };
    cargo.warning(&format!(
        "relax-build: installing the {} packages of the hash lock {} with pip",
        lock.pins().len(),
        lock.name
    ));
    pip_locked(
        &python,
        &["install".as_ref()],
        &lock,
        &dir.join(format!("relax-{}", Kind::Toolchain.file_name())),
        "pip install of the pinned TVM",
    )?;
    std::fs::write(&marker, marker_text(&lock))
        .map_err(io(format!("writing {}", marker.display())))?;
    cargo.warning("relax-build: the managed TVM toolchain is ready");
    Ok(if upgraded {
        Provisioned::Upgraded
    } else {
        Provisioned::Made
    })
}

/// Takes the file lock `<dir>.<suffix>` beside `dir`, saying that another build is
/// `doing` while it waits.
pub(crate) fn lock_beside(cargo: Cargo, dir: &Path, suffix: &str, doing: &str) -> Result<LockFile> {
    let lock_path = dir.with_file_name(format!(
        "{}.{suffix}",
        dir.file_name().unwrap_or_default().to_string_lossy()
    ));
    LockFile::acquire(&lock_path, || {
        cargo.warning(&format!(
            "relax-build: another build is {doing}; waiting for {}",
            lock_path.display()
        ))
    })
}

/// `python -m pip <arguments> --require-hashes --no-deps --only-binary=:all: -r <lock>`,
/// quietly, with the lock written to `lock_file` first: `install` into the venv,
/// `install --target DIR` into a folder, `download -d DIR ...`; `what` names it in an
/// error. A package whose file has another sha256 than the lock allows is an
/// [`Error::HashMismatch`] naming it.
pub(crate) fn pip_locked(
    python: &Path,
    arguments: &[&std::ffi::OsStr],
    lock: &Lock,
    lock_file: &Path,
    what: &str,
) -> Result<()> {
    files::write_atomically(lock_file, lock.text.as_bytes())?;
    let mut command = Command::new(python);
    command.args(["-m", "pip"]).args(arguments).args([
        "--disable-pip-version-check",
        "--no-input",
        "--quiet",
        "--require-hashes",
        "--no-deps",
        "--only-binary=:all:",
    ]);
    let output = command
        .arg("-r")
        .arg(lock_file)
        .output()
        .map_err(|error| Error::Toolchain {
            message: format!("{what} could not start: {error}"),
        })?;
    if output.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&output.stderr);
    let mismatches = locks::hash_mismatches(&stderr);
    if mismatches.is_empty() {
        return Err(Error::Toolchain {
            message: format!(
                "{what} from the hash lock {} ({}) failed ({}):\n{}",
                lock.name,
                lock_file.display(),
                output.status,
                crate::text::last_lines(&stderr, 15)
            ),
        });
    }
    let packages: Vec<String> = mismatches.iter().map(|m| m.package.clone()).collect();
    let details: String = mismatches
        .iter()
        .map(|m| {
            format!(
                "  {} from {}: the lock allows sha256 {}, the file served has {}\n",
                m.package,
                m.url,
                m.expected.join(" or "),
                m.got
            )
        })
        .collect();
    Err(Error::HashMismatch {
        lock: lock.name.clone(),
        packages: packages.clone(),
        message: format!(
            "{what} failed: {} did not match the hash lock {} (installed from {}):\n{details}\
             This means the package index (PyPI, or the mirror set by PIP_INDEX_URL or pip.conf) \
             served a different file than the one this relax-build was locked against: a \
             tampered or replaced package. Do not bypass the check (never edit the lock or drop \
             --require-hashes).\nFix: use a trustworthy index (check PIP_INDEX_URL and pip.conf) \
             and try again, and report it to the index's operators; or set RELAX_PYTHON to a \
             Python of your own where you ran `{}`.",
            packages.join(", "),
            lock.name,
            lock_file.display(),
            install_command()
        ),
    })
}

/// Runs a command, turning a failure into an error with the tail of its stderr.
pub fn run(command: &mut Command, what: &str) -> Result<()> {
    let output = command.output().map_err(|error| Error::Toolchain {
        message: format!("{what} could not start: {error}"),
    })?;
    if output.status.success() {
        return Ok(());
    }
    Err(Error::Toolchain {
        message: format!(
            "{what} failed ({}):\n{}",
            output.status,
            crate::text::last_lines(&String::from_utf8_lossy(&output.stderr), 15)
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `python = "python3"` in the manifest is a command looked up on PATH, not a path
    /// (it used to be checked as a file in the package and reported missing).
    #[test]
    fn a_bare_python_name_is_found_on_path() {
        let first = tempfile::tempdir().unwrap();
        let second = tempfile::tempdir().unwrap();
        std::fs::write(second.path().join("python3"), b"#!/bin/sh\n").unwrap();
        let path = std::env::join_paths([first.path(), second.path()]).unwrap();
        assert_eq!(
            search_path(&path, "python3"),
            Some(second.path().join("python3"))
        );
        assert_eq!(search_path(&path, "python4"), None);
    }

    #[test]
    fn a_bare_python_name_not_on_path_says_so() {
        let probes = tempfile::tempdir().unwrap();
        let setting = PythonSetting::Command("no-such-python-relax-test".to_string());
        let error = Lookup {
            manifest_python: Some(&setting),
            probes_dir: probes.path(),
            cargo: Cargo::TOOL,
        }
        .find_or_provision()
        .unwrap_err()
        .to_string();
        // (RELAX_PYTHON, which would be tried first, is not set when the tests run.)
        assert!(
            error.contains("`package.metadata.relax.python` = no-such-python-relax-test cannot be used: `no-such-python-relax-test` is not a program on PATH"),
            "{error}"
        );
    }
}
