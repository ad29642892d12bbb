//! Finding (or provisioning) a Python with the pinned TVM.
//!
//! Candidates, in order:
//!
//! 1. `RELAX_PYTHON`: an explicit choice; if it is unusable, that is the error;
//! 2. `python = "..."` in `[package.metadata.relax]`: likewise;
//! 3. the active virtualenv (`VIRTUAL_ENV`);
//! 4. the managed toolchain, if it is complete;
//! 5. `python3` on `PATH`;
//! 6. otherwise the managed toolchain is provisioned: a venv under `RELAX_TOOLCHAIN_DIR`
//!    with `apache-tvm==0.27.0.post1`, `apache-tvm-ffi==0.1.14.post1`, `onnx==1.23.2` and
//!    what meta-schedule tuning needs (`psutil`, `xgboost-cpu`, `cloudpickle`),
//!    made behind a file lock and marked complete only when the install succeeded (a
//!    half-made venv is removed and made again; one complete for an older requirement
//!    list is completed with pip).
//!
//! A candidate is probed without importing TVM (which costs over a second): the probe
//! reads the installed package versions and where their libraries and `RECORD` files
//! are. Probes are cached by interpreter path and modification time, so a build whose
//! models are all cached starts no Python at all. The toolchain's build hash is the
//! sha256 of the two wheels' `RECORD` files (which list the sha256 of every installed
//! file), computed in Rust on every build.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::UNIX_EPOCH;

use serde::{Deserialize, Serialize};

use crate::cache::Cache;
use crate::cargo;
use crate::env;
use crate::error::{io, Error, Result};
use crate::key::sha256_bytes;

/// The apache-tvm version relax-build supports.
pub const TVM_VERSION: &str = "0.27.0.post1";
/// The apache-tvm-ffi version installed with it (0.1.15 breaks meta-schedule's database).
pub const TVM_FFI_VERSION: &str = "0.1.14.post1";
/// The onnx version installed with it, for `.onnx` sources.
pub const ONNX_VERSION: &str = "1.23.2";

/// What the managed toolchain installs; its completion marker records this list, and a
/// toolchain made with another list is completed with pip before use.
pub fn requirements() -> Vec<String> {
    vec![
        format!("apache-tvm=={TVM_VERSION}"),
        format!("apache-tvm-ffi=={TVM_FFI_VERSION}"),
        format!("onnx=={ONNX_VERSION}"),
        // Meta-schedule tuning (`cargo relax tune`).
        "psutil==7.2.2".to_string(),
        "xgboost-cpu==3.2.0".to_string(),
        "cloudpickle==3.1.3".to_string(),
    ]
}

fn marker_text() -> String {
    requirements().join("\n") + "\n"
}

fn is_complete(dir: &Path) -> bool {
    std::fs::read_to_string(dir.join(COMPLETE_MARKER)).is_ok_and(|text| text == marker_text())
}

/// A usable Python with TVM.
#[derive(Debug, Clone)]
pub struct Toolchain {
    pub python: PathBuf,
    pub tvm_version: String,
    /// Folders holding `libtvm_ffi.so` and `libtvm_runtime.so`.
    pub runtime_library_dirs: Vec<PathBuf>,
    /// sha256 over the installed wheels' RECORD files: changes with any TVM rebuild.
    pub build_hash: String,
    /// Which candidate it was (`RELAX_PYTHON`, `the managed toolchain`, ...).
    pub origin: String,
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

/// Finds a Python with the pinned TVM, provisioning the managed toolchain when none is found.
///
/// `manifest_python` is `python` from `[package.metadata.relax]`; probes are cached in `cache`.
pub fn find_or_provision(manifest_python: Option<&Path>, cache: &Cache) -> Result<Toolchain> {
    let allow_other_version = env::flag(env::ALLOW_TVM_VERSION);
    let probe = |python: &Path, origin: &str| {
        probe_cached(python, cache, allow_other_version).map(|mut toolchain| {
            toolchain.origin = origin.to_string();
            toolchain
        })
    };
    let install = format!(
        "python -m pip install apache-tvm=={TVM_VERSION} apache-tvm-ffi=={TVM_FFI_VERSION}"
    );
    if let Some(python) = env::var(env::PYTHON) {
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
    if let Some(python) = manifest_python {
        return probe(python, "package.metadata.relax.python").map_err(|reason| Error::Toolchain {
            message: format!(
                "`package.metadata.relax.python` = {} cannot be used: {reason}\n\
                 Fix: point it at a Python with TVM (`{install}`), or remove the key.",
                python.display()
            ),
        });
    }
    let mut tried = Vec::new();
    if let Some(venv) = env::var(env::VIRTUAL_ENV) {
        let python = Path::new(&venv).join("bin").join("python");
        match probe(&python, "the active virtualenv") {
            Ok(toolchain) => return Ok(toolchain),
            Err(reason) => tried.push(format!("active virtualenv {}: {reason}", python.display())),
        }
    }
    let managed = managed_dir()?;
    if is_complete(&managed) {
        match probe(&managed_python(&managed), "the managed toolchain") {
            Ok(toolchain) => return Ok(toolchain),
            Err(reason) => tried.push(format!("managed toolchain {}: {reason}", managed.display())),
        }
    }
    if let Some(python) = find_on_path("python3") {
        match probe(&python, "python3 on PATH") {
            Ok(toolchain) => return Ok(toolchain),
            Err(reason) => tried.push(format!("python3 on PATH ({}): {reason}", python.display())),
        }
    } else {
        tried.push("python3 on PATH: not found".to_string());
    }
    let failure = |message: String| {
        Error::Toolchain {
        message: format!(
            "no usable Python with apache-tvm {TVM_VERSION} was found, and provisioning one failed.\n\
             Tried:\n{}  provisioning the managed toolchain in {}: {message}\n\
             Fix: make sure `python3 -m venv` works and pip can reach PyPI (or a mirror through \
             PIP_INDEX_URL), or set RELAX_PYTHON to a Python where you ran `{install}`.",
            tried.iter().map(|line| format!("  {line}\n")).collect::<String>(),
            managed.display()
        ),
    }
    };
    provision(&managed).map_err(|error| failure(error.to_string()))?;
    probe(
        &managed_python(&managed),
        "the managed toolchain (just provisioned)",
    )
    .map_err(failure)
}

/// The folder of the managed toolchain for the pinned TVM version.
pub fn managed_dir() -> Result<PathBuf> {
    let root = match env::var(env::TOOLCHAIN_DIR) {
        Some(dir) => PathBuf::from(dir),
        None => env::user_cache_dir()?
            .join("relax-cargo")
            .join("toolchains"),
    };
    Ok(root.join(format!("tvm-{TVM_VERSION}")))
}

fn managed_python(dir: &Path) -> PathBuf {
    dir.join("bin").join("python")
}

fn find_on_path(program: &str) -> Option<PathBuf> {
    let path = env::var(env::PATH)?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file())
}

fn modified_ns(path: &Path) -> Option<u128> {
    let modified = std::fs::metadata(path).ok()?.modified().ok()?;
    Some(modified.duration_since(UNIX_EPOCH).ok()?.as_nanos())
}

/// Probes an interpreter, reusing a cached probe when the interpreter is unchanged.
fn probe_cached(
    python: &Path,
    cache: &Cache,
    allow_other_version: bool,
) -> std::result::Result<Toolchain, String> {
    let modified =
        modified_ns(python).ok_or_else(|| format!("{} does not exist", python.display()))?;
    let cache_path = cache.probe_path(python);
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
    if let Some(parent) = cache_path.parent() {
        let _ = std::fs::create_dir_all(parent);
        let _ = crate::compile::write_atomically(
            &cache_path,
            &serde_json::to_vec(&entry).expect("probes serialize"),
        );
    }
    Ok(toolchain)
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
        build_hash: sha256_bytes(&records),
        origin: String::new(),
    })
}

const COMPLETE_MARKER: &str = "relax-toolchain-complete";
/// Creates (or completes) the managed toolchain unless it is complete; safe to run
/// from several builds at once.
fn provision(dir: &Path) -> Result<()> {
    if is_complete(dir) {
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
    if is_complete(dir) {
        return Ok(());
    }
    let marker = dir.join(COMPLETE_MARKER);
    let upgrade = marker.is_file() && managed_python(dir).is_file();
    if dir.exists() && !upgrade {
        cargo::warning(
            "relax-build: removing a half-made toolchain left by an interrupted install",
        );
        std::fs::remove_dir_all(dir).map_err(io(format!("removing {}", dir.display())))?;
    }
    if upgrade {
        // Made by an earlier relax-build with other requirements: complete it in place.
        std::fs::remove_file(&marker).map_err(io(format!("removing {}", marker.display())))?;
    } else {
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
    }
    let requirements = requirements();
    cargo::warning(&format!(
        "relax-build: installing {} with pip",
        requirements.join(" ")
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
            .args(&requirements),
        "pip install of the pinned TVM",
    )?;
    std::fs::write(&marker, marker_text()).map_err(io(format!("writing {}", marker.display())))?;
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

/// Runtime library folders known without starting Python: those of a cached probe of
/// `RELAX_PYTHON`, the manifest's `python`, or the managed toolchain, if they exist.
pub fn known_runtime_library_dirs(manifest_python: Option<&Path>, cache: &Cache) -> Vec<PathBuf> {
    let mut candidates: Vec<PathBuf> = env::var(env::PYTHON)
        .map(PathBuf::from)
        .into_iter()
        .collect();
    candidates.extend(manifest_python.map(Path::to_path_buf));
    if let Ok(managed) = managed_dir() {
        candidates.push(managed_python(&managed));
    }
    candidates
        .iter()
        .filter_map(|python| {
            let bytes = std::fs::read(cache.probe_path(python)).ok()?;
            let cached: CachedProbe = serde_json::from_slice(&bytes).ok()?;
            let dirs = [cached.probe.tvm_ffi_lib?, cached.probe.tvm_lib?];
            dirs.iter().all(|dir| dir.is_dir()).then(|| dirs.to_vec())
        })
        .next()
        .unwrap_or_default()
}

/// The variable naming a folder of TVM runtime libraries built for a Cargo target:
/// `RELAX_RUNTIME_DIR_<TARGET>` (upper case, `-` as `_`).
pub fn target_runtime_dir_variable(cargo_target: &str) -> String {
    format!(
        "RELAX_RUNTIME_DIR_{}",
        cargo_target.replace('-', "_").to_ascii_uppercase()
    )
}

/// Where the managed toolchain keeps the runtime libraries of a (cross) Cargo target.
pub fn managed_target_runtime_dir(cargo_target: &str) -> Result<PathBuf> {
    Ok(managed_dir()?
        .join("targets")
        .join(cargo_target)
        .join("lib"))
}

const RUNTIME_LIBRARIES: [&str; 2] = ["libtvm_ffi.so", "libtvm_runtime.so"];

fn holds_runtime_libraries(dir: &Path) -> bool {
    RUNTIME_LIBRARIES
        .iter()
        .all(|library| dir.join(library).is_file())
}

/// Downloads the pinned wheels for `cargo_target`'s platform with the toolchain's pip and
/// extracts `libtvm_ffi.so` and `libtvm_runtime.so` into `dir` (atomically, under a lock).
pub fn fetch_target_runtime(toolchain: &Toolchain, cargo_target: &str, dir: &Path) -> Result<()> {
    let arch = cargo_target.split('-').next().unwrap_or_default();
    let parent = dir.parent().expect("the runtime dir has a parent");
    std::fs::create_dir_all(parent).map_err(io(format!("creating {}", parent.display())))?;
    let lock_path = parent.join("fetch.lock");
    let lock = File::create(&lock_path).map_err(io(format!("creating {}", lock_path.display())))?;
    lock.lock()
        .map_err(io(format!("locking {}", lock_path.display())))?;
    if holds_runtime_libraries(dir) {
        return Ok(());
    }
    cargo::warning(&format!(
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
    run(
        Command::new(&toolchain.python).arg("-c").arg(script),
        &format!("fetching the {arch} TVM runtime wheels with pip"),
    )?;
    if !holds_runtime_libraries(dir) {
        return Err(Error::Toolchain {
            message: format!(
                "the {arch} wheels had no libtvm_ffi.so / libtvm_runtime.so (looked in {})",
                dir.display()
            ),
        });
    }
    Ok(())
}

/// How to find the runtime libraries of a Cargo target (see [`runtime_library_dirs`]).
pub struct RuntimeLookup<'a> {
    pub cargo_target: &'a str,
    pub host: &'a str,
    /// The toolchain, if this build already found one (host builds use its libraries).
    pub toolchain: Option<&'a Toolchain>,
    /// Finds a toolchain; asked only when a cross target's libraries must be fetched.
    pub find_toolchain: &'a dyn Fn() -> Option<&'a Toolchain>,
    pub manifest_python: Option<&'a Path>,
    pub cache: &'a Cache,
    /// Whether a missing cross-target runtime may be fetched (with `toolchain`).
    pub fetch: bool,
}

/// Folders holding `libtvm_ffi.so` and `libtvm_runtime.so` built for a Cargo target:
/// `RELAX_RUNTIME_DIR_<TARGET>`; for the host, the toolchain's (or a cached probe's,
/// possibly none); for a cross target, `<managed toolchain>/targets/<target>/lib`,
/// fetched with pip when missing and allowed.
pub fn runtime_library_dirs(lookup: &RuntimeLookup<'_>) -> Result<Vec<PathBuf>> {
    let variable = target_runtime_dir_variable(lookup.cargo_target);
    if let Some(dir) = env::var(&variable) {
        let dir = PathBuf::from(dir);
        if !holds_runtime_libraries(&dir) {
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
    if lookup.cargo_target == lookup.host {
        return Ok(match lookup.toolchain {
            Some(toolchain) => toolchain.runtime_library_dirs.clone(),
            None => known_runtime_library_dirs(lookup.manifest_python, lookup.cache),
        });
    }
    let dir = managed_target_runtime_dir(lookup.cargo_target)?;
    if holds_runtime_libraries(&dir) {
        return Ok(vec![dir]);
    }
    let toolchain = match lookup.fetch {
        true => lookup.toolchain.or_else(lookup.find_toolchain),
        false => None,
    };
    match toolchain {
        Some(toolchain) => {
            fetch_target_runtime(toolchain, lookup.cargo_target, &dir)?;
            Ok(vec![dir])
        }
        _ => Err(Error::Toolchain {
            message: format!(
                "the TVM runtime libraries for {target} are not in {dir}, and this build cannot fetch them \
                 (offline, or no TVM toolchain).\nFix: run `cargo relax prepare --target {target}` (it fetches them \
                 with pip), or set {variable} to a folder holding libtvm_ffi.so and libtvm_runtime.so built for {target}.",
                target = lookup.cargo_target,
                dir = dir.display()
            ),
        }),
    }
}
