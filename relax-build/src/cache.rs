//! The shared artifact cache: one entry per cache key, written atomically, verified on use.
//!
//! ```text
//! $RELAX_CACHE_DIR/                  (default: $XDG_CACHE_HOME/relax-cargo/cache, else ~/.cache/relax-cargo/cache)
//!   entries/<cache key>/             library.so, signature.json, weights.safetensors?, manifest.json
//!   entries/<cache key>.lock         held while the entry is being made (removed after)
//!   tmp/<cache key>.<pid>.<ns>/      entries being written; renamed into entries/ when complete
//!   files/<sha256>                   fetched files (see crate::fetched), verified on every use
//!   probes/                          cached toolchain probes (by interpreter path)
//!   drivers/<fingerprint>/           the compile driver, as run
//! ```
//!
//! `manifest.json` records the key, its labeled inputs and the sha256 of every artifact
//! (see [`crate::artifacts`]); an entry whose files do not match it (truncated, edited)
//! is reported and rebuilt. A temporary folder left by a killed build is removed by the
//! next build that finds its process gone.

use std::path::{Path, PathBuf};

use crate::artifacts::{self, ArtifactManifest, MANIFEST};
use crate::cargo::Cargo;
use crate::env;
use crate::error::{io, Error, Result};
use crate::files::{self, LockFile};

/// The cache folder shared by all apps and profiles.
#[derive(Debug, Clone)]
pub struct Cache {
    root: PathBuf,
    cargo: Cargo,
}

impl Cache {
    /// The cache in `root`; `cargo` reports corrupted entries.
    pub fn new(root: impl Into<PathBuf>, cargo: Cargo) -> Cache {
        Cache {
            root: root.into(),
            cargo,
        }
    }

    /// `RELAX_CACHE_DIR`, else `$XDG_CACHE_HOME/relax-cargo/cache`, else `~/.cache/relax-cargo/cache`.
    pub fn default_root(cargo: Cargo) -> Result<PathBuf> {
        if let Some(dir) = env::var(cargo, env::CACHE_DIR) {
            return Ok(PathBuf::from(dir));
        }
        Ok(env::user_cache_dir(cargo)?
            .join("relax-cargo")
            .join("cache"))
    }

    /// The cache's folder.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The folder of the entry of `cache_key` (which may not exist).
    pub fn entry_dir(&self, cache_key: &str) -> PathBuf {
        self.root.join("entries").join(cache_key)
    }

    /// A verified entry, or None. A corrupted entry is reported, removed, and None.
    pub fn get(&self, cache_key: &str) -> Result<Option<ArtifactManifest>> {
        let dir = self.entry_dir(cache_key);
        if !dir.exists() {
            return Ok(None);
        }
        match artifacts::verify(&dir) {
            Ok(manifest) if manifest.cache_key == cache_key => Ok(Some(manifest)),
            Ok(_) => Ok(self.discard(&dir, "its manifest names another key")),
            Err(reason) => Ok(self.discard(&dir, &reason)),
        }
    }

    fn discard(&self, dir: &Path, reason: &str) -> Option<ArtifactManifest> {
        self.cargo.warning(&format!(
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
        let _lock = LockFile::acquire(&entries.join(format!("{cache_key}.lock")), || {})?;
        if let Some(manifest) = self.get(cache_key)? {
            return Ok(manifest);
        }
        self.remove_abandoned_temporaries();
        let temporary = self.temporary_dir(cache_key)?;
        let result = build(&temporary).and_then(|manifest| {
            std::fs::write(temporary.join(MANIFEST), manifest.to_json())
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
        let dir = parent.join(format!("{cache_key}.{}", files::unique_suffix()));
        std::fs::create_dir_all(&dir).map_err(io(format!("creating {}", dir.display())))?;
        Ok(dir)
    }

    /// Removes `tmp/<key>.<pid>.<ns>` folders whose process no longer runs (a killed
    /// build); folders of running processes are left alone.
    pub fn remove_abandoned_temporaries(&self) {
        let Ok(entries) = std::fs::read_dir(self.root.join("tmp")) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let pid = name
                .split('.')
                .nth(1)
                .and_then(|pid| pid.parse::<u32>().ok());
            if let Some(pid) = pid {
                if pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
                    let _ = std::fs::remove_dir_all(entry.path());
                }
            }
        }
    }

    /// Where the compile driver is installed (see [`crate::driver::install`]).
    pub fn drivers_dir(&self) -> PathBuf {
        self.root.join("drivers")
    }

    /// Where toolchain probes are cached (see [`crate::toolchain`]).
    pub fn probes_dir(&self) -> PathBuf {
        self.root.join("probes")
    }

    /// Where fetched files are kept, by sha256 (see [`crate::fetched`]).
    pub fn files_dir(&self) -> PathBuf {
        self.root.join("files")
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_build_leaves_no_lock_and_no_temporary_folder() {
        let root = tempfile::tempdir().unwrap();
        let cache = Cache::new(root.path(), Cargo::TOOL);
        let result = cache.get_or_insert("k", |dir| {
            std::fs::write(dir.join("library.so"), b"half").unwrap();
            Err(Error::Toolchain {
                message: "the compile failed".to_string(),
            })
        });
        assert!(result.is_err());
        let left: Vec<_> = walkdir::WalkDir::new(root.path())
            .into_iter()
            .map(|entry| entry.unwrap().path().to_path_buf())
            .filter(|path| path.is_file())
            .collect();
        assert!(left.is_empty(), "left behind: {left:?}");
    }

    #[test]
    fn folders_of_killed_builds_are_removed_and_running_ones_kept() {
        let root = tempfile::tempdir().unwrap();
        let cache = Cache::new(root.path(), Cargo::TOOL);
        let tmp = root.path().join("tmp");
        // PID 0 never names a user process; our own parent is alive.
        let dead = tmp.join("key.0.123");
        let alive = tmp.join(format!("key.{}.456", std::os::unix::process::parent_id()));
        std::fs::create_dir_all(&dead).unwrap();
        std::fs::create_dir_all(&alive).unwrap();
        cache.remove_abandoned_temporaries();
        assert!(!dead.exists());
        assert!(alive.exists());
    }
}
