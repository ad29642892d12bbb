//! The shared artifact cache: one entry per cache key, written atomically, verified on use.
//!
//! ```text
//! $RELAX_CACHE_DIR/                  (default: $XDG_CACHE_HOME/relax-cargo/cache, else ~/.cache/relax-cargo/cache)
//!   entries/<cache key>/             library.so, signature.json, weights.safetensors?, manifest.json
//!   entries/<cache key>.lock         held while the entry is being made
//!   tmp/                             entries being written; renamed into entries/ when complete
//!   probes/                          cached toolchain probes (by interpreter path)
//!   drivers/<sha256>.py              the compile driver, as run
//! ```
//!
//! `manifest.json` records the key, its labeled inputs and the sha256 of every artifact;
//! an entry whose files do not match it (truncated, edited) is reported and rebuilt.
//! The same manifest format describes prepared artifacts (see [`crate::prepared`]).

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::cargo;
use crate::env;
use crate::error::{io, Error, Result};
use crate::key::{sha256_bytes, sha256_file, KeyInputs};

pub const LIBRARY: &str = "library.so";
pub const SIGNATURE: &str = "signature.json";
pub const WEIGHTS: &str = "weights.safetensors";
pub const MANIFEST: &str = "manifest.json";

/// What a folder of artifacts holds and what made it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArtifactManifest {
    pub model: String,
    /// The Cargo target triple.
    pub target: String,
    pub input_key: String,
    pub cache_key: String,
    pub inputs: KeyInputs,
    pub tvm_version: String,
    pub toolchain_hash: String,
    /// File name -> sha256 of every artifact.
    pub artifacts: BTreeMap<String, String>,
}

impl ArtifactManifest {
    pub fn has_weights(&self) -> bool {
        self.artifacts.contains_key(WEIGHTS)
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
        let actual = sha256_file(&dir.join(file)).map_err(|_| format!("{file} is missing"))?;
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
            artifacts.insert(file.to_string(), sha256_file(&path)?);
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
    std::fs::create_dir_all(to).map_err(io(format!("creating {}", to.display())))?;
    for file in manifest.artifacts.keys() {
        let source = from.join(file);
        let destination = to.join(file);
        let temporary = to.join(format!("{file}.tmp"));
        let _ = std::fs::remove_file(&temporary);
        if !link || std::fs::hard_link(&source, &temporary).is_err() {
            std::fs::copy(&source, &temporary).map_err(io(format!(
                "copying {} to {}",
                source.display(),
                temporary.display()
            )))?;
        }
        std::fs::rename(&temporary, &destination)
            .map_err(io(format!("renaming {} into place", destination.display())))?;
    }
    Ok(())
}

/// The cache folder shared by all apps and profiles.
#[derive(Debug, Clone)]
pub struct Cache {
    root: PathBuf,
}

impl Cache {
    pub fn new(root: impl Into<PathBuf>) -> Cache {
        Cache { root: root.into() }
    }

    /// `RELAX_CACHE_DIR`, else `$XDG_CACHE_HOME/relax-cargo/cache`, else `~/.cache/relax-cargo/cache`.
    pub fn default_root() -> Result<PathBuf> {
        if let Some(dir) = env::var(env::CACHE_DIR) {
            return Ok(PathBuf::from(dir));
        }
        Ok(env::user_cache_dir()?.join("relax-cargo").join("cache"))
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn entry_dir(&self, cache_key: &str) -> PathBuf {
        self.root.join("entries").join(cache_key)
    }

    /// A verified entry, or None. A corrupted entry is reported, removed, and None.
    pub fn get(&self, cache_key: &str) -> Result<Option<ArtifactManifest>> {
        let dir = self.entry_dir(cache_key);
        if !dir.exists() {
            return Ok(None);
        }
        match verify(&dir) {
            Ok(manifest) if manifest.cache_key == cache_key => Ok(Some(manifest)),
            Ok(_) => Ok(self.discard(&dir, "its manifest names another key")),
            Err(reason) => Ok(self.discard(&dir, &reason)),
        }
    }

    fn discard(&self, dir: &Path, reason: &str) -> Option<ArtifactManifest> {
        cargo::warning(&format!(
            "relax-build: cache entry {} is corrupted ({reason}); removing it and compiling again",
            dir.display()
        ));
        let _ = std::fs::remove_dir_all(dir);
        None
    }

    /// The entry for `cache_key`, made by `build` unless a valid one exists.
    ///
    /// `build` fills a fresh temporary folder and returns its manifest; the folder is
    /// renamed into place only when complete. A per-entry file lock makes concurrent
    /// builds of the same model wait for one another instead of racing.
    pub fn get_or_insert(
        &self,
        cache_key: &str,
        build: impl FnOnce(&Path) -> Result<ArtifactManifest>,
    ) -> Result<ArtifactManifest> {
        if let Some(manifest) = self.get(cache_key)? {
            return Ok(manifest);
        }
        let entries = self.root.join("entries");
        std::fs::create_dir_all(&entries).map_err(io(format!("creating {}", entries.display())))?;
        let lock_path = entries.join(format!("{cache_key}.lock"));
        let lock =
            File::create(&lock_path).map_err(io(format!("creating {}", lock_path.display())))?;
        lock.lock()
            .map_err(io(format!("locking {}", lock_path.display())))?;
        if let Some(manifest) = self.get(cache_key)? {
            return Ok(manifest);
        }
        let temporary = self.temporary_dir(cache_key)?;
        let result = build(&temporary).and_then(|manifest| {
            let text = serde_json::to_string_pretty(&manifest).expect("manifests serialize");
            std::fs::write(temporary.join(MANIFEST), text)
                .map_err(io("writing a cache manifest"))?;
            let dir = self.entry_dir(cache_key);
            std::fs::rename(&temporary, &dir).map_err(io(format!(
                "renaming a new cache entry to {}",
                dir.display()
            )))?;
            Ok(manifest)
        });
        if result.is_err() {
            let _ = std::fs::remove_dir_all(&temporary);
        }
        result
    }

    fn temporary_dir(&self, cache_key: &str) -> Result<PathBuf> {
        let parent = self.root.join("tmp");
        std::fs::create_dir_all(&parent).map_err(io(format!("creating {}", parent.display())))?;
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.subsec_nanos());
        let dir = parent.join(format!("{cache_key}.{}.{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(io(format!("creating {}", dir.display())))?;
        Ok(dir)
    }

    /// The compile driver written into the cache (once per driver version).
    pub fn driver(&self) -> Result<PathBuf> {
        let source = crate::compile::DRIVER_SOURCE;
        let dir = self.root.join("drivers");
        let path = dir.join(format!("{}.py", &sha256_bytes(source.as_bytes())[..16]));
        if !path.is_file() {
            std::fs::create_dir_all(&dir).map_err(io(format!("creating {}", dir.display())))?;
            crate::compile::write_atomically(&path, source.as_bytes())?;
        }
        Ok(path)
    }

    /// Where the probe of an interpreter is cached.
    pub fn probe_path(&self, python: &Path) -> PathBuf {
        let name = sha256_bytes(python.as_os_str().as_encoded_bytes());
        self.root
            .join("probes")
            .join(format!("{}.json", &name[..16]))
    }

    /// Total size of the cache in bytes.
    pub fn size(&self) -> u64 {
        walkdir::WalkDir::new(&self.root)
            .into_iter()
            .filter_map(|entry| entry.ok())
            .filter_map(|entry| entry.metadata().ok())
            .filter(|metadata| metadata.is_file())
            .map(|metadata| metadata.len())
            .sum()
    }

    /// Removes the whole cache.
    pub fn clean(&self) -> Result<()> {
        match std::fs::remove_dir_all(&self.root) {
            Err(error) if error.kind() != std::io::ErrorKind::NotFound => Err(Error::Io {
                context: format!("removing {}", self.root.display()),
                source: error,
            }),
            _ => Ok(()),
        }
    }
}
