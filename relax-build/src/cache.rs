//! The shared artifact cache: one entry per cache key, written atomically, verified on use.
//!
//! ```text
//! $RELAX_CACHE_DIR/                  (default: $XDG_CACHE_HOME/relax-cargo/cache, else ~/.cache/relax-cargo/cache)
//!   entries/<cache key>/             library.so, signature.json, weights.safetensors?, manifest.json
//!   entries/<cache key>.lock         held while the entry is being made (removed after)
//!   tmp/<cache key>.<unique>/        entries being written; renamed into entries/ when complete
//!   tmp/<cache key>.<unique>.lock    locked by the process writing that folder
//!   files/<sha256>                   fetched files (see crate::fetched), verified on every use
//!   probes/                          cached toolchain probes (by interpreter path)
//!   drivers/<fingerprint>/           the compile driver, as run
//! ```
//!
//! `manifest.json` records the key, its labeled inputs and the sha256 of every artifact
//! (see [`crate::artifacts`]); an entry whose files do not match it (truncated, edited)
//! is reported and rebuilt. A temporary folder left by a killed build is removed by the
//! next build that can take its lock file: the writer holds an exclusive `flock` on it
//! from before it makes the folder until the folder is gone, and the kernel releases it
//! when the writer dies. Unlike a PID, that holds across PID namespaces (containers
//! sharing a cache).
//!
//! The entries are kept under a size limit (`RELAX_CACHE_SIZE`, default 10 GiB): after a
//! new entry is made, the least recently used ones are removed until the entries fit.
//! Using an entry refreshes its `manifest.json`'s modification time, which is what
//! "recently used" reads. An entry made or used in the last ten minutes is never
//! removed, so a build running beside the one that trims keeps what it has just found;
//! the cache may exceed its limit for that long.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use crate::artifacts::{self, ArtifactManifest, MANIFEST};
use crate::cargo::Cargo;
use crate::env;
use crate::error::{io, Error, Result};
use crate::files::{self, LockFile};

/// The entries' size limit when `RELAX_CACHE_SIZE` is not set, in bytes.
pub const DEFAULT_SIZE_LIMIT: u64 = 10 << 30;

/// Entries used more recently than this are never removed to fit the limit.
const RECENTLY_USED: Duration = Duration::from_secs(600);

/// The cache folder shared by all apps and profiles.
#[derive(Debug, Clone)]
pub struct Cache {
    root: PathBuf,
    cargo: Cargo,
    size_limit: u64,
}

impl Cache {
    /// The cache in `root`, with the default size limit; `cargo` reports corrupted entries.
    pub fn new(root: impl Into<PathBuf>, cargo: Cargo) -> Cache {
        Cache {
            root: root.into(),
            cargo,
            size_limit: DEFAULT_SIZE_LIMIT,
        }
    }

    /// The same cache, whose entries are trimmed to `bytes`.
    pub fn with_size_limit(self, bytes: u64) -> Cache {
        Cache {
            size_limit: bytes,
            ..self
        }
    }

    /// The size the entries are trimmed to, in bytes.
    pub fn size_limit(&self) -> u64 {
        self.size_limit
    }

    /// `RELAX_CACHE_SIZE` in bytes, else [`DEFAULT_SIZE_LIMIT`].
    pub fn size_limit_from_env(cargo: Cargo) -> Result<u64> {
        let Some(value) = env::var(cargo, env::CACHE_SIZE) else {
            return Ok(DEFAULT_SIZE_LIMIT);
        };
        parse_size_limit(&value.to_string_lossy())
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
        mark_used(&dir);
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
        // Declared first, dropped last: the lock outlives the folder.
        let (temporary, _writing) = self.temporary_dir(cache_key)?;
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
            return result;
        }
        if let Err(error) = self.trim(cache_key) {
            self.cargo.warning(&format!(
                "relax-build: could not trim the cache to its size limit: {error}"
            ));
        }
        result
    }

    /// Removes the least recently used entries until the entries fit the size limit,
    /// keeping `keep` (the entry just made) and entries used in the last ten minutes.
    /// Returns the bytes removed.
    pub fn trim(&self, keep: &str) -> Result<u64> {
        let entries = self.root.join("entries");
        let listing = match std::fs::read_dir(&entries) {
            Ok(listing) => listing,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(0),
            Err(error) => return Err(io(format!("listing {}", entries.display()))(error)),
        };
        let mut found: Vec<(SystemTime, u64, PathBuf)> = listing
            .flatten()
            .map(|entry| entry.path())
            .filter(|path| path.is_dir())
            .map(|path| (last_used(&path), folder_size(&path), path))
            .collect();
        let mut total: u64 = found.iter().map(|(_, size, _)| size).sum();
        found.sort();
        let now = SystemTime::now();
        let mut removed = 0;
        for (used, size, path) in found {
            if total <= self.size_limit {
                break;
            }
            let recent = now.duration_since(used).unwrap_or_default() < RECENTLY_USED;
            if recent || path.file_name().is_some_and(|name| name == keep) {
                continue;
            }
            // Renamed out of entries/ first, so that no build finds it half removed; a
            // process killed while removing it leaves a folder that
            // `remove_abandoned_temporaries` clears.
            let name = path.file_name().unwrap_or_default().to_string_lossy();
            let (doomed, _removing) = self.temporary_path(&name)?;
            match std::fs::rename(&path, &doomed) {
                Ok(()) => {}
                // Another build trimmed it first.
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => continue,
                Err(error) => {
                    return Err(io(format!("moving {} out of the cache", path.display()))(
                        error,
                    ))
                }
            }
            std::fs::remove_dir_all(&doomed)
                .map_err(io(format!("removing {}", doomed.display())))?;
            total -= size;
            removed += size;
        }
        Ok(removed)
    }

    /// A fresh temporary folder and the lock that keeps it while held.
    fn temporary_dir(&self, cache_key: &str) -> Result<(PathBuf, LockFile)> {
        let (dir, lock) = self.temporary_path(cache_key)?;
        std::fs::create_dir_all(&dir).map_err(io(format!("creating {}", dir.display())))?;
        Ok((dir, lock))
    }

    /// A fresh `tmp/<key>.<unique>` path (not created; its parent is), with its
    /// lock file `tmp/<key>.<unique>.lock` held: hold it until the folder is gone.
    fn temporary_path(&self, cache_key: &str) -> Result<(PathBuf, LockFile)> {
        let parent = self.root.join("tmp");
        std::fs::create_dir_all(&parent).map_err(io(format!("creating {}", parent.display())))?;
        let path = parent.join(format!("{cache_key}.{}", files::unique_suffix()));
        let lock = LockFile::acquire(&lock_path(&path), || {})?;
        Ok((path, lock))
    }

    /// Removes the temporary folders (and lock files) of builds that were killed: those
    /// whose lock file nobody holds. A folder without a lock file (made by a relax-build
    /// from before the locks) is removed once it is a day old.
    pub fn remove_abandoned_temporaries(&self) {
        let Ok(entries) = std::fs::read_dir(self.root.join("tmp")) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let is_lock = path
                .extension()
                .is_some_and(|extension| extension == "lock");
            let (folder, lock) = if is_lock {
                (path.with_extension(""), path.clone())
            } else {
                (path.clone(), lock_path(&path))
            };
            if is_lock && folder.exists() {
                // Judged with its folder.
                continue;
            }
            if let Some(_abandoned) = LockFile::try_acquire_existing(&lock) {
                // Removed while locked, then the lock file (dropped): never a folder
                // without its lock while someone may still write it.
                let _ = std::fs::remove_dir_all(&folder);
            } else if !is_lock && !lock.exists() && older_than(&folder, LOCKLESS_AGE) {
                let _ = std::fs::remove_dir_all(&folder);
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
        folder_size(&self.root)
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

/// A `RELAX_CACHE_SIZE` value in bytes, or the error naming the variable and the fix.
fn parse_size_limit(value: &str) -> Result<u64> {
    parse_size(value).ok_or_else(|| Error::ManifestKey {
        path: PathBuf::from("environment"),
        key: env::CACHE_SIZE.to_string(),
        message: format!(
            "`{value}` is not a size; give bytes, or a number with K, M, G or T \
             (powers of 1024), e.g. `{}=20G`",
            env::CACHE_SIZE
        ),
    })
}

/// How old a temporary folder without a lock file must be to be removed.
const LOCKLESS_AGE: Duration = Duration::from_secs(24 * 3600);

/// The lock file of a temporary folder: `<folder>.lock`.
fn lock_path(folder: &Path) -> PathBuf {
    let mut name = folder.as_os_str().to_os_string();
    name.push(".lock");
    PathBuf::from(name)
}

/// Whether `path` was last modified more than `age` ago.
fn older_than(path: &Path, age: Duration) -> bool {
    std::fs::metadata(path)
        .and_then(|metadata| metadata.modified())
        .is_ok_and(|modified| {
            SystemTime::now()
                .duration_since(modified)
                .is_ok_and(|elapsed| elapsed > age)
        })
}

/// Records that the entry in `dir` was used now (its manifest's modification time).
/// A cache on a read-only file system cannot record it; its entries are then
/// trimmed by age of creation, which is only a worse guess, so the error is ignored.
fn mark_used(dir: &Path) {
    let _ = std::fs::File::options()
        .write(true)
        .open(dir.join(MANIFEST))
        .and_then(|manifest| manifest.set_modified(SystemTime::now()));
}

/// When the entry in `dir` was last used: its manifest's modification time, else the
/// folder's (an entry without a manifest is corrupted and goes first).
fn last_used(dir: &Path) -> SystemTime {
    std::fs::metadata(dir.join(MANIFEST))
        .or_else(|_| std::fs::metadata(dir))
        .and_then(|metadata| metadata.modified())
        .unwrap_or(SystemTime::UNIX_EPOCH)
}

/// The bytes of the files under `dir`.
fn folder_size(dir: &Path) -> u64 {
    walkdir::WalkDir::new(dir)
        .into_iter()
        .filter_map(|entry| entry.ok())
        .filter_map(|entry| entry.metadata().ok())
        .filter(|metadata| metadata.is_file())
        .map(|metadata| metadata.len())
        .sum()
}

/// `10G`, `512M`, `1.5G`, `4096`: bytes, with an optional `K`, `M`, `G` or `T` (powers
/// of 1024, `B` or `iB` after it accepted), in any case.
fn parse_size(text: &str) -> Option<u64> {
    let text = text.trim().to_ascii_uppercase();
    let text = text
        .strip_suffix("IB")
        .or_else(|| text.strip_suffix('B'))
        .unwrap_or(&text);
    let (number, shift) = match text.chars().last()? {
        'K' => (&text[..text.len() - 1], 10),
        'M' => (&text[..text.len() - 1], 20),
        'G' => (&text[..text.len() - 1], 30),
        'T' => (&text[..text.len() - 1], 40),
        _ => (text, 0),
    };
    let number: f64 = number.trim().parse().ok()?;
    let bytes = number * (1u64 << shift) as f64;
    (number.is_finite() && number >= 0.0 && bytes < u64::MAX as f64).then_some(bytes as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Makes the entry `key` holding a library of `bytes`, then dates its last use `age` ago.
    fn make_entry(cache: &Cache, key: &str, bytes: usize, age: Duration) {
        cache
            .get_or_insert(key, |dir| {
                std::fs::write(dir.join(artifacts::LIBRARY), vec![7u8; bytes]).unwrap();
                std::fs::write(dir.join(artifacts::SIGNATURE), b"{}").unwrap();
                Ok(ArtifactManifest {
                    model: "m".to_string(),
                    target: "t".to_string(),
                    input_key: key.to_string(),
                    cache_key: key.to_string(),
                    inputs: crate::key::KeyInputs::default(),
                    tvm_version: String::new(),
                    toolchain_hash: String::new(),
                    artifacts: artifacts::hash_artifacts(dir)?,
                })
            })
            .unwrap();
        std::fs::File::options()
            .write(true)
            .open(cache.entry_dir(key).join(MANIFEST))
            .unwrap()
            .set_modified(SystemTime::now() - age)
            .unwrap();
    }

    #[test]
    fn the_least_recently_used_entries_go_when_the_limit_is_passed() {
        const HOUR: Duration = Duration::from_secs(3600);
        let root = tempfile::tempdir().unwrap();
        // Room for three entries of 10 kB and their manifests, not four.
        let cache = Cache::new(root.path(), Cargo::TOOL).with_size_limit(35_000);
        make_entry(&cache, "a", 10_000, 3 * HOUR);
        make_entry(&cache, "b", 10_000, HOUR);
        make_entry(&cache, "c", 10_000, 2 * HOUR);
        make_entry(&cache, "d", 10_000, Duration::ZERO);
        let present = |key: &str| root.path().join("entries").join(key).exists();
        assert!(!present("a"), "the oldest entry was kept");
        assert!(present("b") && present("c") && present("d"));
        assert!(cache.size() <= 35_000, "{} bytes", cache.size());

        // Using `c` makes it recent: with room for one entry, `b` goes, but `c` and `d`
        // (used in the last ten minutes) stay beside the new `e`, over the limit.
        assert!(cache.get("c").unwrap().is_some());
        let cache = cache.with_size_limit(15_000);
        make_entry(&cache, "e", 10_000, Duration::ZERO);
        assert!(!present("b"));
        assert!(present("c") && present("d") && present("e"));
        let left: Vec<_> = std::fs::read_dir(root.path().join("tmp"))
            .unwrap()
            .collect();
        assert!(left.is_empty(), "removed entries left {left:?}");
    }

    #[test]
    fn sizes_are_bytes_or_binary_units() {
        assert_eq!(parse_size_limit("10G").unwrap(), 10 << 30);
        assert_eq!(parse_size_limit(" 512m ").unwrap(), 512 << 20);
        assert_eq!(parse_size_limit("1.5GiB").unwrap(), 3 << 29);
        assert_eq!(parse_size_limit("20 GB").unwrap(), 20 << 30);
        assert_eq!(parse_size_limit("4096").unwrap(), 4096);
        assert_eq!(parse_size_limit("2T").unwrap(), 2 << 40);
        for wrong in ["", "G", "ten", "-1G", "10X", "inf", "1e30T"] {
            let message = parse_size_limit(wrong).unwrap_err().to_string();
            assert!(
                message.contains("RELAX_CACHE_SIZE")
                    && message.contains(&format!("`{wrong}` is not a size"))
                    && message.contains("=20G"),
                "{message}"
            );
        }
    }

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

    /// Two "processes" (threads with their own open file descriptions, which is what
    /// flock tells apart): a writer, whose PID means nothing in this namespace, holds
    /// its folder's lock while a cleaner runs; a killed writer left its folder and an
    /// unlocked lock file.
    #[test]
    fn folders_of_killed_builds_are_removed_and_locked_ones_kept() {
        let root = tempfile::tempdir().unwrap();
        let cache = Cache::new(root.path(), Cargo::TOOL);
        let tmp = root.path().join("tmp");
        std::fs::create_dir_all(&tmp).unwrap();
        // Above any pid_max: no /proc entry here, as for a writer in another container.
        let running = tmp.join("key.4194305.1");
        let killed = tmp.join("key.0.2");
        let (locked, release) = (std::sync::mpsc::channel(), std::sync::mpsc::channel::<()>());
        let writer = {
            let running = running.clone();
            std::thread::spawn(move || {
                let lock = LockFile::acquire(&lock_path(&running), || {}).unwrap();
                std::fs::create_dir_all(running.join("half")).unwrap();
                locked.0.send(()).unwrap();
                release.1.recv().unwrap();
                std::fs::remove_dir_all(&running).unwrap();
                drop(lock);
            })
        };
        locked.1.recv().unwrap();
        std::fs::create_dir_all(killed.join("half")).unwrap();
        std::fs::File::create(lock_path(&killed)).unwrap();
        let orphan_lock = tmp.join("key.0.3.lock");
        std::fs::File::create(&orphan_lock).unwrap();

        let cleaner = {
            let cache = cache.clone();
            std::thread::spawn(move || cache.remove_abandoned_temporaries())
        };
        cleaner.join().unwrap();
        assert!(
            running.join("half").exists(),
            "a running writer's folder was removed"
        );
        assert!(lock_path(&running).exists());
        assert!(!killed.exists() && !lock_path(&killed).exists());
        assert!(!orphan_lock.exists());

        release.0.send(()).unwrap();
        writer.join().unwrap();
        assert_eq!(std::fs::read_dir(&tmp).unwrap().count(), 0);
    }

    #[test]
    fn folders_without_a_lock_file_are_removed_once_a_day_old() {
        let root = tempfile::tempdir().unwrap();
        let cache = Cache::new(root.path(), Cargo::TOOL);
        let tmp = root.path().join("tmp");
        let (old, new) = (tmp.join("key.1.1"), tmp.join("key.1.2"));
        std::fs::create_dir_all(&old).unwrap();
        std::fs::create_dir_all(&new).unwrap();
        std::fs::File::open(&old)
            .unwrap()
            .set_modified(SystemTime::now() - 2 * LOCKLESS_AGE)
            .unwrap();
        cache.remove_abandoned_temporaries();
        assert!(!old.exists());
        assert!(new.exists());
    }
}
