//! Optional Python packages (torch for PyTorch sources, tornado for TVM's RPC tracker),
//! kept apart from the base toolchain.
//!
//! Each is installed from its hash lock (`torch.txt`, `tracker.txt`, see [`crate::locks`])
//! into a folder of its own, `<managed toolchain>/extras/<kind>-<lock sha256 prefix>/`,
//! with `pip install --target`, and put on `PYTHONPATH` only for the builds that need it
//! ([`Toolchain::python_path`]). So:
//!
//! - a build whose models are not PyTorch sources never imports torch: `tvm_ffi` tries
//!   `import torch` when it is importable, which costs seconds and hundreds of MB;
//! - no build ever sees a half-installed package: pip installs into a temporary folder
//!   beside the final one, renamed into place only once pip succeeded, so the final
//!   folder exists only complete (its name changes with the lock, so a relax-build with
//!   other pins gets a folder of its own);
//! - the toolchain's build hash (the TVM wheels' `RECORD` files) does not change.
//!
//! A Python that is not the managed toolchain's (`RELAX_PYTHON`, the manifest's `python`,
//! a virtualenv) must have the package itself: relax-build never installs into it.

use std::path::{Path, PathBuf};

use crate::cargo::Cargo;
use crate::error::{io, Error, Result};
use crate::files;
use crate::locks::{self, Kind, Lock};
use crate::toolchain::{self, Toolchain};
use crate::versions::{TORCH_VERSION, TORNADO_VERSION};

/// An optional package and why a build needs it.
struct Extra {
    /// Its Python module.
    module: &'static str,
    kind: Kind,
    /// `name==version`.
    pin: String,
    /// Why it is needed, for messages.
    needed_by: String,
    /// Its size and install time, for the notice.
    notice: &'static str,
}

impl Toolchain {
    /// This toolchain with torch importable, for PyTorch sources (`model` names the
    /// first one, for messages): the managed toolchain gets the pinned torch installed
    /// apart once, with a notice; another Python must have it already.
    pub fn with_torch(&self, cargo: Cargo, model: &str) -> Result<Toolchain> {
        self.with_extra(
            cargo,
            Extra {
                module: "torch",
                kind: Kind::Torch,
                pin: format!("torch=={TORCH_VERSION}"),
                needed_by: format!("model `{model}` is a PyTorch source"),
                notice: "about 6 GB with its CUDA libraries, a minute or two",
            },
        )
    }

    /// This toolchain with tornado importable, which TVM's RPC tracker needs
    /// (`cargo relax tracker`): installed apart once, as torch is.
    pub fn with_tornado(&self, cargo: Cargo) -> Result<Toolchain> {
        self.with_extra(
            cargo,
            Extra {
                module: "tornado",
                kind: Kind::Tracker,
                pin: format!("tornado=={TORNADO_VERSION}"),
                needed_by: "TVM's RPC tracker needs tornado".to_string(),
                notice: "under 1 MB",
            },
        )
    }

    fn with_extra(&self, cargo: Cargo, extra: Extra) -> Result<Toolchain> {
        let managed = toolchain::managed_dir(cargo)?;
        if !self.python.starts_with(&managed) {
            return self.check_has(&extra).map(|()| self.clone());
        }
        let tag = toolchain::python_tag(self.python.as_os_str())?;
        let lock = locks::shipped(extra.kind, &tag)
            .map_err(|reason| toolchain::no_lock(reason, self.python.as_os_str()))?;
        let folder = install(cargo, &self.python, &managed.join(EXTRAS), &lock, &extra)?;
        let mut with = self.clone();
        if !with.python_path.contains(&folder) {
            with.python_path.insert(0, folder);
        }
        Ok(with)
    }

    /// That a Python of the user's can import the package, or the fix.
    fn check_has(&self, extra: &Extra) -> Result<()> {
        let probe = self
            .command()
            .args([
                "-c",
                &format!(
                    "import importlib.util as u; print(u.find_spec('{}') is not None)",
                    extra.module
                ),
            ])
            .output();
        if probe.is_ok_and(|output| output.stdout.starts_with(b"True")) {
            return Ok(());
        }
        let Extra {
            module,
            pin,
            needed_by,
            ..
        } = extra;
        Err(Error::Toolchain {
            message: format!(
                "{needed_by}, but the Python relax-build uses ({}, from {}) has no {module}.\n\
                 Fix: `{} -m pip install {pin}`, or let relax-build use its managed toolchain \
                 (unset RELAX_PYTHON / package.metadata.relax.python), which installs {module} itself.",
                self.python.display(),
                self.origin,
                self.python.display()
            ),
        })
    }
}

/// The folder of the managed toolchain that holds the extras.
const EXTRAS: &str = "extras";

/// Where an extra installed from `lock` lives under `extras_dir`.
fn folder(extras_dir: &Path, kind: Kind, lock: &Lock) -> PathBuf {
    let name = kind.file_name().trim_end_matches(".txt");
    extras_dir.join(format!("{name}-{}", &lock.sha256()[..16]))
}

/// Installs `lock` into its folder under `extras_dir` unless it is there (complete, as
/// only a complete install is renamed into place), with `python`'s pip; safe to run
/// from several builds at once. Returns the folder.
fn install(
    cargo: Cargo,
    python: &Path,
    extras_dir: &Path,
    lock: &Lock,
    extra: &Extra,
) -> Result<PathBuf> {
    let destination = folder(extras_dir, extra.kind, lock);
    if destination.is_dir() {
        return Ok(destination);
    }
    std::fs::create_dir_all(extras_dir)
        .map_err(io(format!("creating {}", extras_dir.display())))?;
    let _lock = toolchain::lock_beside(
        cargo,
        &destination,
        "lock",
        &format!("installing {}", extra.module),
    )?;
    if destination.is_dir() {
        return Ok(destination);
    }
    let file_name = destination
        .file_name()
        .expect("an extra's folder has a name")
        .to_string_lossy()
        .into_owned();
    // What an interrupted install left (the lock is ours: no other build is using it).
    for entry in std::fs::read_dir(extras_dir)
        .map_err(io(format!("reading {}", extras_dir.display())))?
        .flatten()
    {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with(&format!(".{file_name}.")) && name.ends_with(".partial") {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
    let partial = extras_dir.join(format!(".{file_name}.{}.partial", files::unique_suffix()));
    cargo.warning(&format!(
        "relax-build: {}: installing {} apart from the managed toolchain, into {} (one time; {})",
        extra.needed_by,
        extra.pin,
        destination.display(),
        extra.notice
    ));
    let installed = toolchain::pip_locked(
        python,
        &["install".as_ref(), "--target".as_ref(), partial.as_os_str()],
        lock,
        &extras_dir.join(format!("relax-{}", extra.kind.file_name())),
        &format!("pip install of {}", extra.module),
    )
    .and_then(|()| {
        std::fs::rename(&partial, &destination).map_err(io(format!(
            "renaming {} to {}",
            partial.display(),
            destination.display()
        )))
    });
    if installed.is_err() {
        let _ = std::fs::remove_dir_all(&partial);
    }
    installed?;
    cargo.warning(&format!("relax-build: {} is installed", extra.module));
    Ok(destination)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Python of the user's (not the managed toolchain) without torch is an error with
    /// the pip command, never an install into it.
    #[test]
    fn a_users_python_without_torch_names_the_fix() {
        use std::os::unix::fs::PermissionsExt;

        let dir = tempfile::tempdir().unwrap();
        let python = dir.path().join("python");
        std::fs::write(&python, "#!/bin/sh\necho False\n").unwrap();
        std::fs::set_permissions(&python, std::fs::Permissions::from_mode(0o755)).unwrap();
        let toolchain = Toolchain {
            python: python.clone(),
            tvm_version: crate::versions::TVM_VERSION.to_string(),
            runtime_library_dirs: Vec::new(),
            build_hash: String::new(),
            origin: "RELAX_PYTHON".to_string(),
            allow_other_version: false,
            python_path: Vec::new(),
        };
        let error = toolchain
            .with_torch(Cargo::TOOL, "net")
            .unwrap_err()
            .to_string();
        for part in [
            "model `net` is a PyTorch source",
            &format!("({}, from RELAX_PYTHON) has no torch", python.display()),
            &format!("-m pip install torch=={TORCH_VERSION}"),
            "unset RELAX_PYTHON",
        ] {
            assert!(error.contains(part), "{part:?} in: {error}");
        }
    }

    /// The folder is named by the lock's sha256, so other pins get another folder.
    #[test]
    fn an_extras_folder_is_named_by_its_lock() {
        let lock = |text: &'static str| Lock {
            name: "relax-build/locks/linux-x86_64/cp311/torch.txt".to_string(),
            text: text.into(),
        };
        let root = Path::new("/cache/extras");
        let first = folder(root, Kind::Torch, &lock("torch==1 --hash=sha256:00\n"));
        let second = folder(root, Kind::Torch, &lock("torch==2 --hash=sha256:00\n"));
        assert!(first.starts_with(root), "{}", first.display());
        assert!(
            first
                .file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("torch-"),
            "{}",
            first.display()
        );
        assert_ne!(first, second);
        assert_eq!(
            folder(root, Kind::Tracker, &lock("x"))
                .file_name()
                .unwrap()
                .to_string_lossy()
                .split('-')
                .next(),
            Some("tracker")
        );
    }
}
