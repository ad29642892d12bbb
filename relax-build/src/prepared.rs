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
use crate::error::{io, Error, Result};
use crate::files::{self, LockFile};
use crate::key::KeyInputs;

/// How a temporary folder beside a prepared artifact's ends: `<target>.<unique>.tmp`.
const TEMPORARY: &str = ".tmp";

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
            let being_written = target.file_name().to_string_lossy().ends_with(TEMPORARY);
            if !being_written && target.path().join(MANIFEST).is_file() {
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
///
/// Writers of one artifact take turns on `<model>/<target>.lock`, and each fills a
/// temporary folder of its own before renaming it into place, so two `cargo relax
/// prepare` at once leave one whole artifact, never a mix. Temporary folders found
/// while holding the lock are a killed writer's and are removed.
pub fn write(root: &Path, entry_dir: &Path, manifest: &ArtifactManifest) -> Result<PathBuf> {
    for (field, name) in [("model", &manifest.model), ("target", &manifest.target)] {
        if !artifacts::is_path_component(name) {
            return Err(Error::Model {
                model: manifest.model.clone(),
                key: None,
                message: format!(
                    "the cache entry {} names the {field} {name:?}, which is not a folder name; \
                     remove the entry and build again",
                    entry_dir.display()
                ),
                detail: String::new(),
            });
        }
    }
    let destination = dir(root, &manifest.model, &manifest.target);
    let parent = destination.parent().expect("prepared dirs have a parent");
    std::fs::create_dir_all(parent).map_err(io(format!("creating {}", parent.display())))?;
    let _writing = LockFile::acquire(&parent.join(format!("{}.lock", manifest.target)), || {})?;
    remove_temporaries(parent, &manifest.target);
    let temporary = temporary_path(parent, &manifest.target);
    let written =
        artifacts::copy_artifacts(entry_dir, manifest, &temporary, false).and_then(|()| {
            files::write_atomically(&temporary.join(MANIFEST), manifest.to_json().as_bytes())
        });
    if let Err(error) = written {
        let _ = std::fs::remove_dir_all(&temporary);
        return Err(error);
    }
    // The old artifact moves aside first, so the path never names a half-removed folder.
    let old = temporary_path(parent, &manifest.target);
    if destination.exists() {
        std::fs::rename(&destination, &old)
            .map_err(io(format!("moving {} aside", destination.display())))?;
    }
    let placed = std::fs::rename(&temporary, &destination)
        .map_err(io(format!("renaming into {}", destination.display())));
    if placed.is_err() {
        let _ = std::fs::rename(&old, &destination);
        let _ = std::fs::remove_dir_all(&temporary);
    }
    let _ = std::fs::remove_dir_all(&old);
    placed.map(|()| destination)
}

/// A fresh `<target>.<unique>.tmp` path in `parent`.
fn temporary_path(parent: &Path, target: &str) -> PathBuf {
    parent.join(format!("{target}.{}{TEMPORARY}", files::unique_suffix()))
}

/// Removes `<target>.*.tmp` folders in `parent` (call with the target's lock held).
fn remove_temporaries(parent: &Path, target: &str) {
    let prefix = format!("{target}.");
    for entry in std::fs::read_dir(parent).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with(&prefix) && name.ends_with(TEMPORARY) {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::artifacts::{LIBRARY, SIGNATURE};

    /// A cache entry holding a library of `content`, and its manifest.
    fn entry(content: &[u8]) -> (tempfile::TempDir, ArtifactManifest) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(LIBRARY), content).unwrap();
        std::fs::write(dir.path().join(SIGNATURE), b"{}").unwrap();
        let manifest = ArtifactManifest {
            model: "m".to_string(),
            target: "x86_64-unknown-linux-gnu".to_string(),
            input_key: KeyInputs::default().input_key(),
            cache_key: "c".to_string(),
            inputs: KeyInputs::default(),
            tvm_version: "0.27.0.post1".to_string(),
            toolchain_hash: "t".to_string(),
            artifacts: artifacts::hash_artifacts(dir.path()).unwrap(),
        };
        (dir, manifest)
    }

    #[test]
    fn concurrent_writers_leave_one_whole_artifact() {
        let root = tempfile::tempdir().unwrap();
        let writers: Vec<_> = [vec![1u8; 200_000], vec![2u8; 300_000]]
            .into_iter()
            .map(|content| {
                let root = root.path().to_path_buf();
                std::thread::spawn(move || {
                    let (entry_dir, manifest) = entry(&content);
                    for _ in 0..20 {
                        write(&root, entry_dir.path(), &manifest).unwrap();
                    }
                })
            })
            .collect();
        for writer in writers {
            writer.join().unwrap();
        }
        let written = dir(root.path(), "m", "x86_64-unknown-linux-gnu");
        let manifest = artifacts::verify(&written).expect("a whole artifact");
        let library = std::fs::read(written.join(LIBRARY)).unwrap();
        assert_eq!(manifest.library_sha256(), files::sha256_bytes(&library));
        let mut left: Vec<_> = std::fs::read_dir(written.parent().unwrap())
            .unwrap()
            .map(|entry| entry.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(
            left,
            ["x86_64-unknown-linux-gnu"],
            "temporaries or locks left"
        );
        assert_eq!(targets(root.path()), ["x86_64-unknown-linux-gnu"]);
    }

    #[test]
    fn a_killed_writers_folder_is_removed_and_not_listed() {
        let root = tempfile::tempdir().unwrap();
        let parent = root.path().join("m");
        let abandoned = parent.join("x86_64-unknown-linux-gnu.1.2.tmp");
        std::fs::create_dir_all(&abandoned).unwrap();
        std::fs::write(abandoned.join(MANIFEST), b"{}").unwrap();
        assert!(targets(root.path()).is_empty());
        let (entry_dir, manifest) = entry(b"library");
        write(root.path(), entry_dir.path(), &manifest).unwrap();
        assert!(!abandoned.exists());
    }

    #[test]
    fn a_prepared_manifest_naming_a_file_outside_its_folder_is_tampered() {
        let root = tempfile::tempdir().unwrap();
        std::fs::write(root.path().join("escape.txt"), b"secret").unwrap();
        let (entry_dir, mut manifest) = entry(b"library");
        let written = write(root.path(), entry_dir.path(), &manifest).unwrap();
        manifest.artifacts.insert(
            "../../escape.txt".to_string(),
            files::sha256_bytes(b"secret"),
        );
        std::fs::write(written.join(MANIFEST), manifest.to_json()).unwrap();
        let state = check(
            root.path(),
            "m",
            "x86_64-unknown-linux-gnu",
            &KeyInputs::default(),
        );
        assert_eq!(
            state,
            Prepared::Tampered(
                "manifest.json lists the file \"../../escape.txt\", but an artifact folder \
                 holds only library.so, signature.json, weights.safetensors"
                    .to_string()
            )
        );
    }

    #[test]
    fn an_entry_naming_its_target_with_a_path_is_refused() {
        let root = tempfile::tempdir().unwrap();
        let (entry_dir, mut manifest) = entry(b"library");
        manifest.target = "../../escape".to_string();
        let error = write(root.path(), entry_dir.path(), &manifest).unwrap_err();
        assert!(
            error
                .to_string()
                .contains("names the target \"../../escape\", which is not a folder name"),
            "{error}"
        );
        assert_eq!(std::fs::read_dir(root.path()).unwrap().count(), 0);
    }
}
