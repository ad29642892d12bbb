//! Prepared artifacts: a committed folder (`.relax/` next to Cargo.toml) from which a
//! build needs neither Python, TVM nor the network.
//!
//! ```text
//! .relax/<model>/<cargo target>/   library.so, signature.json, weights.safetensors?, manifest.json
//! .relax/files/<sha256>            fetched files the models expose (see crate::fetched)
//! .relax/runtime/<cargo target>/   libtvm_ffi.so, libtvm_runtime.so for the target
//! .relax/tuning/<model>/<target>/  tuning records (see crate::tuning)
//! ```
//!
//! `cargo relax prepare` writes it. A build checks an artifact's recorded input key
//! against the current sources and settings (stale: it names what changed) and every
//! file against its recorded sha256 (tampered: refused).

use std::path::{Path, PathBuf};

use crate::artifacts::{self, ArtifactManifest, MANIFEST};
use crate::error::{io, Result};
use crate::key::KeyInputs;

/// The default prepared folder of a package.
pub fn default_root(manifest_dir: &Path) -> PathBuf {
    manifest_dir.join(".relax")
}

/// Where fetched files are kept for offline builds: `.relax/files/<sha256>`.
pub fn files_dir(root: &Path) -> PathBuf {
    root.join("files")
}

/// The folder of one model for one Cargo target.
pub fn dir(root: &Path, model: &str, target: &str) -> PathBuf {
    root.join(model).join(target)
}

/// Every Cargo target some model has prepared artifacts for, sorted.
pub fn targets(root: &Path) -> Vec<String> {
    let mut targets = Vec::new();
    let Ok(models) = std::fs::read_dir(root) else {
        return targets;
    };
    for model in models.flatten() {
        let name = model.file_name().to_string_lossy().into_owned();
        if ["files", "runtime", "tuning"].contains(&name.as_str()) {
            continue;
        }
        for target in std::fs::read_dir(model.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            if target.path().join(MANIFEST).is_file() {
                targets.push(target.file_name().to_string_lossy().into_owned());
            }
        }
    }
    targets.sort();
    targets.dedup();
    targets
}

/// The state of a prepared artifact against the current inputs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Prepared {
    /// Up to date; its verified manifest.
    Fresh(ArtifactManifest),
    /// Not prepared.
    Missing,
    /// What changed since it was prepared.
    Stale(Vec<String>),
    /// Why its files cannot be trusted.
    Tampered(String),
}

/// Checks the prepared artifact of `model` for `target`.
pub fn check(root: &Path, model: &str, target: &str, inputs: &KeyInputs) -> Prepared {
    let dir = dir(root, model, target);
    if !dir.join(MANIFEST).exists() {
        return Prepared::Missing;
    }
    match artifacts::verify(&dir) {
        Err(reason) => Prepared::Tampered(reason),
        Ok(manifest) if manifest.input_key != inputs.input_key() => {
            let mut changes = inputs.differences(&manifest.inputs);
            if changes.is_empty() {
                changes.push("its recorded key does not match its inputs".to_string());
            }
            Prepared::Stale(changes)
        }
        Ok(manifest) => Prepared::Fresh(manifest),
    }
}

/// Replaces the prepared artifact of a model with a verified cache entry's files.
pub fn write(root: &Path, entry_dir: &Path, manifest: &ArtifactManifest) -> Result<PathBuf> {
    let destination = dir(root, &manifest.model, &manifest.target);
    let parent = destination.parent().expect("prepared dirs have a parent");
    let temporary = parent.join(format!("{}.tmp", manifest.target));
    let _ = std::fs::remove_dir_all(&temporary);
    artifacts::copy_artifacts(entry_dir, manifest, &temporary, false)?;
    std::fs::write(temporary.join(MANIFEST), manifest.to_json())
        .map_err(io(format!("writing {}", temporary.display())))?;
    if destination.exists() {
        std::fs::remove_dir_all(&destination)
            .map_err(io(format!("removing {}", destination.display())))?;
    }
    std::fs::rename(&temporary, &destination)
        .map_err(io(format!("renaming into {}", destination.display())))?;
    Ok(destination)
}
