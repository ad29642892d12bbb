//! Finding (or provisioning) a Python with the pinned TVM.
//!
//! Candidates, in order: `RELAX_PYTHON` (an explicit choice: if it is unusable, that
//! is the error), the active virtualenv (`VIRTUAL_ENV`), then the managed toolchain,
//! which is created on first use: a venv under `RELAX_TOOLCHAIN_DIR` with
//! `apache-tvm==0.27.0.post1` and `apache-tvm-ffi==0.1.14.post1`, made behind a file
//! lock and marked complete only when the install succeeded (a half-made venv is
//! removed and made again).
//!
//! A candidate is probed without importing TVM (which costs over a second): the probe
//! reads the installed package versions and where their libraries are.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde::Deserialize;

use crate::cargo;
use crate::env;
use crate::error::{io, Error, Result};

/// The apache-tvm version relax-build supports.
pub const TVM_VERSION: &str = "0.27.0.post1";
/// The apache-tvm-ffi version installed with it (0.1.15 breaks meta-schedule's database).
pub const TVM_FFI_VERSION: &str = "0.1.14.post1";

/// A usable Python with TVM.
#[derive(Debug, Clone)]
pub struct Toolchain {
    pub python: PathBuf,
    pub tvm_version: String,
    /// Folders holding `libtvm_ffi.so` and `libtvm_runtime.so`.
    pub runtime_library_dirs: Vec<PathBuf>,
}

#[derive(Debug, Deserialize)]
struct Probe {
    tvm: Option<String>,
    tvm_lib: Option<PathBuf>,
    tvm_ffi_lib: Option<PathBuf>,
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
print(json.dumps({"tvm": version("apache-tvm"), "tvm_lib": lib_dir("tvm"), "tvm_ffi_lib": lib_dir("tvm_ffi")}))
"#;

/// Finds a Python with the pinned TVM, provisioning the managed toolchain when none is found.
pub fn find_or_provision() -> Result<Toolchain> {
    let allow_other_version = env::var(env::ALLOW_TVM_VERSION).is_some_and(|value| value == "1");
    if let Some(python) = env::var(env::PYTHON) {
        let python = PathBuf::from(python);
        return probe(&python, allow_other_version).map_err(|reason| Error::Toolchain {
            message: format!(
                "RELAX_PYTHON={} cannot be used: {reason}\n\
                 Fix: point RELAX_PYTHON at a Python with TVM \
                 (`python -m pip install apache-tvm=={TVM_VERSION} apache-tvm-ffi=={TVM_FFI_VERSION}`), \
                 or unset it to let relax-build provision its own toolchain.",
                python.display()
            ),
        });
    }
    let mut tried = Vec::new();
    if let Some(venv) = env::var(env::VIRTUAL_ENV) {
        let python = Path::new(&venv).join("bin").join("python");
        match probe(&python, allow_other_version) {
            Ok(toolchain) => return Ok(toolchain),
            Err(reason) => tried.push(format!("active virtualenv {}: {reason}", python.display())),
        }
    }
    let managed = managed_dir()?;
    provision(&managed).map_err(|error| Error::Toolchain {
        message: format!(
            "no usable Python with apache-tvm {TVM_VERSION} was found, and provisioning one failed.\n\
             Tried:\n{}  managed toolchain {}: {error}\n\
             Fix: make sure `python3 -m venv` and `pip` can reach PyPI (or a mirror via PIP_INDEX_URL), \
             or set RELAX_PYTHON to a Python where you ran \
             `python -m pip install apache-tvm=={TVM_VERSION} apache-tvm-ffi=={TVM_FFI_VERSION}`.",
            tried.iter().map(|line| format!("  {line}\n")).collect::<String>(),
            managed.display()
        ),
    })?;
    probe(&managed_python(&managed), allow_other_version).map_err(|reason| Error::Toolchain {
        message: format!(
            "the managed toolchain at {} is not usable: {reason}\nFix: delete that folder and build again.",
            managed.display()
        ),
    })
}

/// The folder of the managed toolchain for the pinned TVM version.
pub fn managed_dir() -> Result<PathBuf> {
    let root = match env::var(env::TOOLCHAIN_DIR) {
        Some(dir) => PathBuf::from(dir),
        None => {
            let cache = env::var(env::XDG_CACHE_HOME)
                .map(PathBuf::from)
                .or_else(|| env::var(env::HOME).map(|home| Path::new(&home).join(".cache")))
                .ok_or_else(|| Error::Toolchain {
                    message: "cannot place the managed toolchain: neither XDG_CACHE_HOME nor HOME is set; \
                              set RELAX_TOOLCHAIN_DIR to a writable folder"
                        .to_string(),
                })?;
            cache.join("relax-cargo").join("toolchains")
        }
    };
    Ok(root.join(format!("tvm-{TVM_VERSION}")))
}

fn managed_python(dir: &Path) -> PathBuf {
    dir.join("bin").join("python")
}

/// Checks one interpreter; the error says why it cannot be used.
fn probe(python: &Path, allow_other_version: bool) -> std::result::Result<Toolchain, String> {
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
    let probe: Probe = serde_json::from_slice(&output.stdout)
        .map_err(|error| format!("its version probe printed something unexpected ({error})"))?;
    let tvm_version = probe.tvm.ok_or("apache-tvm is not installed there")?;
    if tvm_version != TVM_VERSION && !allow_other_version {
        return Err(format!(
            "it has apache-tvm {tvm_version}, but relax-build supports {TVM_VERSION} \
             (set RELAX_ALLOW_TVM_VERSION=1 to try it anyway)"
        ));
    }
    let runtime_library_dirs = [probe.tvm_ffi_lib, probe.tvm_lib]
        .into_iter()
        .collect::<Option<Vec<_>>>()
        .ok_or("the tvm or tvm_ffi package has no lib folder")?;
    Ok(Toolchain {
        python: python.to_path_buf(),
        tvm_version,
        runtime_library_dirs,
    })
}

const COMPLETE_MARKER: &str = "relax-toolchain-complete";

/// Creates the managed toolchain unless it is complete; safe to run from several builds at once.
fn provision(dir: &Path) -> Result<()> {
    if dir.join(COMPLETE_MARKER).is_file() {
        return Ok(());
    }
    let parent = dir.parent().expect("the toolchain dir has a parent");
    std::fs::create_dir_all(parent).map_err(io(format!("creating {}", parent.display())))?;
    let lock_path = parent.join(format!(
        "{}.lock",
        dir.file_name().unwrap_or_default().to_string_lossy()
    ));
    let lock = File::create(&lock_path).map_err(io(format!("creating {}", lock_path.display())))?;
    if lock.try_lock().is_err() {
        cargo::warning(&format!(
            "relax-build: another build is provisioning the TVM toolchain; waiting for {}",
            lock_path.display()
        ));
        lock.lock()
            .map_err(io(format!("locking {}", lock_path.display())))?;
    }
    if dir.join(COMPLETE_MARKER).is_file() {
        return Ok(());
    }
    if dir.exists() {
        cargo::warning(
            "relax-build: removing a half-made toolchain left by an interrupted install",
        );
        std::fs::remove_dir_all(dir).map_err(io(format!("removing {}", dir.display())))?;
    }
    let bootstrap = env::var(env::BOOTSTRAP_PYTHON).unwrap_or_else(|| "python3".into());
    cargo::warning(&format!(
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
    cargo::warning(&format!(
        "relax-build: installing apache-tvm=={TVM_VERSION} apache-tvm-ffi=={TVM_FFI_VERSION} with pip"
    ));
    run(
        Command::new(managed_python(dir))
            .args([
                "-m",
                "pip",
                "install",
                "--disable-pip-version-check",
                "--no-input",
                "--quiet",
            ])
            .arg(format!("apache-tvm=={TVM_VERSION}"))
            .arg(format!("apache-tvm-ffi=={TVM_FFI_VERSION}")),
        "pip install of the pinned TVM",
    )?;
    let marker = dir.join(COMPLETE_MARKER);
    std::fs::write(
        &marker,
        format!("apache-tvm=={TVM_VERSION}\napache-tvm-ffi=={TVM_FFI_VERSION}\n"),
    )
    .map_err(io(format!("writing {}", marker.display())))?;
    cargo::warning("relax-build: the managed TVM toolchain is ready");
    Ok(())
}

fn run(command: &mut Command, what: &str) -> Result<()> {
    let output = command.output().map_err(|error| Error::Toolchain {
        message: format!("{what} could not start: {error}"),
    })?;
    if output.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&output.stderr);
    let tail: Vec<&str> = stderr.lines().rev().take(15).collect();
    Err(Error::Toolchain {
        message: format!(
            "{what} failed ({}):\n{}",
            output.status,
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        ),
    })
}
