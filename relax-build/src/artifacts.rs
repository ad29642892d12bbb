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
        files::place_copy(&from.join(file), &to.join(file), link)?;
    }
    Ok(())
}
