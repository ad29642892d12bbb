//! A folder of a model's artifacts, as the cache, the prepared folder and `OUT_DIR`
//! hold them: the file names, `manifest.json`, and its verification.
//!
//! ```text
//! library.so              the exported model library
//! signature.json          functions, arguments, outputs (written by the driver)
//! weights.safetensors     weights bound at load time, when the model has any
//! manifest.json           the model's keys and labeled key inputs, and every file's sha256
//! ```

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::files;
use crate::key::KeyInputs;

pub const LIBRARY: &str = "library.so";
pub const SIGNATURE: &str = "signature.json";
pub const WEIGHTS: &str = "weights.safetensors";
pub const MANIFEST: &str = "manifest.json";

/// Every artifact file a folder may hold besides its manifest: `manifest.json` names no
/// other file, so a tampered one cannot make a build read or copy `../../escape.txt`.
pub const ARTIFACTS: [&str; 3] = [LIBRARY, SIGNATURE, WEIGHTS];

/// Whether `name` can be one component of a path (a model or Cargo target name that
/// names a folder): not empty, no `/`, not `.` or `..`, no NUL.
pub fn is_path_component(name: &str) -> bool {
    !name.is_empty() && name != "." && name != ".." && !name.contains(['/', '\\', '\0'])
}

/// What a folder of artifacts holds and what made it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArtifactManifest {
    /// The model's name.
    pub model: String,
    /// The Cargo target triple.
    pub target: String,
    /// The key over the model's inputs (see `key`).
    pub input_key: String,
    /// The input key and the toolchain's build hash.
    pub cache_key: String,
    /// The labeled inputs, so a stale artifact can say what changed.
    pub inputs: KeyInputs,
    /// The apache-tvm version that compiled it.
    pub tvm_version: String,
    /// The build hash of that toolchain.
    pub toolchain_hash: String,
    /// File name -> sha256 of every artifact.
    pub artifacts: BTreeMap<String, String>,
}

impl ArtifactManifest {
    /// Whether the folder holds a weights file.
    pub fn has_weights(&self) -> bool {
        self.artifacts.contains_key(WEIGHTS)
    }

    /// The recorded sha256 of the library.
    pub fn library_sha256(&self) -> &str {
        self.artifacts.get(LIBRARY).map_or("", String::as_str)
    }

    /// The manifest as pretty JSON with a final newline.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("manifests serialize") + "\n"
    }
}

/// Reads `dir/manifest.json` and checks every artifact against its sha256.
/// The error says what is wrong, for a message.
pub fn verify(dir: &Path) -> std::result::Result<ArtifactManifest, String> {
    let text = std::fs::read(dir.join(MANIFEST))
        .map_err(|error| format!("{MANIFEST} is unreadable ({error})"))?;
    let manifest: ArtifactManifest = serde_json::from_slice(&text)
        .map_err(|error| format!("{MANIFEST} is not valid ({error})"))?;
    for required in [LIBRARY, SIGNATURE] {
        if !manifest.artifacts.contains_key(required) {
            return Err(format!("{MANIFEST} lists no {required}"));
        }
    }
    if let Some(file) = manifest
        .artifacts
        .keys()
        .find(|file| !ARTIFACTS.contains(&file.as_str()))
    {
        return Err(format!(
            "{MANIFEST} lists the file {file:?}, but an artifact folder holds only {}",
            ARTIFACTS.join(", ")
        ));
    }
    for (field, name) in [("model", &manifest.model), ("target", &manifest.target)] {
        if !is_path_component(name) {
            return Err(format!(
                "{MANIFEST} names the {field} {name:?}, which is not a folder name"
            ));
        }
    }
    for (file, expected) in &manifest.artifacts {
        let actual =
            files::sha256_file(&dir.join(file)).map_err(|_| format!("{file} is missing"))?;
        if &actual != expected {
            return Err(format!("{file} does not match its recorded sha256"));
        }
    }
    Ok(manifest)
}

/// The sha256 of each artifact present in `dir`.
pub fn hash_artifacts(dir: &Path) -> Result<BTreeMap<String, String>> {
    let mut artifacts = BTreeMap::new();
    for file in [LIBRARY, SIGNATURE, WEIGHTS] {
        let path = dir.join(file);
        if path.is_file() {
            artifacts.insert(file.to_string(), files::sha256_file(&path)?);
        }
    }
    Ok(artifacts)
}

/// Copies the artifacts listed in `manifest` from `from` into `to`; with `link`, hard
/// links where the file system allows (for OUT_DIR, which nothing edits in place).
pub fn copy_artifacts(
    from: &Path,
    manifest: &ArtifactManifest,
    to: &Path,
    link: bool,
) -> Result<()> {
    std::fs::create_dir_all(to).map_err(crate::error::io(format!("creating {}", to.display())))?;
    for file in manifest.artifacts.keys() {
        if !ARTIFACTS.contains(&file.as_str()) {
            return Err(crate::error::Error::Io {
                context: format!("copying the artifacts of {}", from.display()),
                source: std::io::Error::other(format!(
                    "{MANIFEST} lists the file {file:?}, which is not an artifact"
                )),
            });
        }
        files::place_copy(&from.join(file), &to.join(file), link)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A verified-looking folder whose manifest lists `extra` besides its artifacts.
    fn folder(model: &str, extra: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(LIBRARY), b"library").unwrap();
        std::fs::write(dir.path().join(SIGNATURE), b"{}").unwrap();
        let mut artifacts = hash_artifacts(dir.path()).unwrap();
        for (name, sha256) in extra {
            artifacts.insert(name.to_string(), sha256.to_string());
        }
        let manifest = ArtifactManifest {
            model: model.to_string(),
            target: "x86_64-unknown-linux-gnu".to_string(),
            input_key: "k".to_string(),
            cache_key: "c".to_string(),
            inputs: KeyInputs::default(),
            tvm_version: "0.27.0.post1".to_string(),
            toolchain_hash: "t".to_string(),
            artifacts,
        };
        std::fs::write(dir.path().join(MANIFEST), manifest.to_json()).unwrap();
        dir
    }

    #[test]
    fn a_folder_of_known_artifacts_verifies() {
        let dir = folder("m", &[]);
        assert_eq!(verify(dir.path()).unwrap().model, "m");
    }

    #[test]
    fn a_manifest_naming_a_file_outside_its_folder_is_refused() {
        let root = tempfile::tempdir().unwrap();
        let escape = root.path().join("escape.txt");
        std::fs::write(&escape, b"secret").unwrap();
        let nested = root.path().join("a/b");
        std::fs::create_dir_all(&nested).unwrap();
        let dir = folder(
            "m",
            &[("../../escape.txt", &files::sha256_bytes(b"secret"))],
        );
        for file in [LIBRARY, SIGNATURE, MANIFEST] {
            std::fs::copy(dir.path().join(file), nested.join(file)).unwrap();
        }
        // The sha256 matches the file the path reaches: only its name can refuse it.
        assert_eq!(
            verify(&nested).unwrap_err(),
            "manifest.json lists the file \"../../escape.txt\", but an artifact folder holds only \
             library.so, signature.json, weights.safetensors"
        );
        let manifest: ArtifactManifest =
            serde_json::from_slice(&std::fs::read(nested.join(MANIFEST)).unwrap()).unwrap();
        let copy = root.path().join("copy");
        let error = copy_artifacts(&nested, &manifest, &copy, false).unwrap_err();
        assert!(
            error
                .to_string()
                .contains("\"../../escape.txt\", which is not an artifact"),
            "{error}"
        );
    }

    #[test]
    fn a_manifest_naming_its_model_with_a_path_is_refused() {
        let dir = folder("../m", &[]);
        assert_eq!(
            verify(dir.path()).unwrap_err(),
            "manifest.json names the model \"../m\", which is not a folder name"
        );
        assert!(!is_path_component(".."));
        assert!(!is_path_component(""));
        assert!(is_path_component("x86_64-unknown-linux-gnu"));
    }
}
