//! File utilities every other module needs: atomic writes, sha256, and lock files.

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::error::{io, Result};

/// Writes a file under a unique temporary name in the same folder, then renames it
/// into place, so a reader never sees a half-written file.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    let temporary = temporary_sibling(path);
    let written = File::create(&temporary)
        .and_then(|mut file| file.write_all(bytes).and_then(|()| file.sync_data()));
    if let Err(error) = written {
        let _ = std::fs::remove_file(&temporary);
        return Err(io(format!("writing {}", temporary.display()))(error));
    }
    std::fs::rename(&temporary, path).map_err(|error| {
        let _ = std::fs::remove_file(&temporary);
        io(format!("renaming {} into place", path.display()))(error)
    })
}

/// A name next to `path` that no other process uses: `<name>.<pid>.<nanos>.tmp`.
pub fn temporary_sibling(path: &Path) -> PathBuf {
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    path.with_file_name(format!("{name}.{}.tmp", unique_suffix()))
}

/// `<pid>.<nanoseconds>.<count>`: unique among the processes of this machine, and
/// among the calls of this process (the count) even when the clock is coarse.
pub fn unique_suffix() -> String {
    static COUNT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_nanos());
    let count = COUNT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("{}.{nanos}.{count}", std::process::id())
}

/// Copies (or hard-links, with `link`) `source` to `destination` through a temporary
/// name. When `destination` already is `source` (the same inode), nothing is done.
pub fn place_copy(source: &Path, destination: &Path, link: bool) -> Result<()> {
    if same_file(source, destination) {
        return Ok(());
    }
    let temporary = temporary_sibling(destination);
    if !link || std::fs::hard_link(source, &temporary).is_err() {
        std::fs::copy(source, &temporary).map_err(|error| {
            let _ = std::fs::remove_file(&temporary);
            io(format!(
                "copying {} to {}",
                source.display(),
                destination.display()
            ))(error)
        })?;
    }
    std::fs::rename(&temporary, destination).map_err(|error| {
        let _ = std::fs::remove_file(&temporary);
        io(format!("renaming {} into place", destination.display()))(error)
    })
}

/// Whether two paths name the same inode (false when either is missing).
pub fn same_file(a: &Path, b: &Path) -> bool {
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

/// The sha256 of a file's content, as hex.
pub fn sha256_file(path: &Path) -> Result<String> {
    let mut file = File::open(path).map_err(io(format!("reading {}", path.display())))?;
    let mut hasher = Sha256::new();
    std::io::copy(&mut file, &mut hasher).map_err(io(format!("reading {}", path.display())))?;
    Ok(hex(&hasher.finalize()))
}

/// The sha256 of bytes, as hex.
pub fn sha256_bytes(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// Lowercase hex of bytes.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// An exclusive lock held through a lock file, which is removed when the lock is
/// released (so failed or finished work leaves no `.lock` behind).
///
/// Removing a lock file that another process has open is safe here: after locking,
/// each process checks that the path still names the file it locked, and starts over
/// if it does not.
pub struct LockFile {
    path: PathBuf,
    file: File,
}

impl LockFile {
    /// Waits for the lock on `path`, creating the file if needed. `on_wait` runs once if
    /// another process holds it.
    pub fn acquire(path: &Path, on_wait: impl FnOnce()) -> Result<LockFile> {
        let mut on_wait = Some(on_wait);
        loop {
            let file = File::create(path).map_err(io(format!("creating {}", path.display())))?;
            if file.try_lock().is_err() {
                if let Some(on_wait) = on_wait.take() {
                    on_wait();
                }
                file.lock()
                    .map_err(io(format!("locking {}", path.display())))?;
            }
            let locked = file
                .metadata()
                .map_err(io(format!("reading {}", path.display())))?;
            let current = std::fs::metadata(path);
            if current
                .is_ok_and(|current| current.dev() == locked.dev() && current.ino() == locked.ino())
            {
                return Ok(LockFile {
                    path: path.to_path_buf(),
                    file,
                });
            }
            // The holder removed the file after we opened it: lock the new one.
        }
    }

    /// The lock on an existing lock file, if nobody holds it: its holder finished or
    /// was killed (the kernel releases a killed process's locks, whatever PID namespace
    /// it ran in). None when the file is missing or held.
    pub fn try_acquire_existing(path: &Path) -> Option<LockFile> {
        let file = File::options().write(true).open(path).ok()?;
        file.try_lock().ok()?;
        let locked = file.metadata().ok()?;
        let current = std::fs::metadata(path).ok()?;
        // Another process took and removed it meanwhile: not this file any more.
        (current.dev() == locked.dev() && current.ino() == locked.ino()).then(|| LockFile {
            path: path.to_path_buf(),
            file,
        })
    }
}

impl Drop for LockFile {
    fn drop(&mut self) {
        // Removed while still locked, so nobody can lock this inode through the path again.
        let _ = std::fs::remove_file(&self.path);
        let _ = self.file.unlock();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_writes_leave_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.json");
        write_atomically(&path, b"one").unwrap();
        write_atomically(&path, b"two").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn placing_a_link_onto_itself_leaves_nothing_behind() {
        let dir = tempfile::tempdir().unwrap();
        let source = dir.path().join("library.so");
        let destination = dir.path().join("copy.so");
        std::fs::write(&source, b"code").unwrap();
        place_copy(&source, &destination, true).unwrap();
        // The second placement is a link onto the same inode: rename(2) would keep both names.
        place_copy(&source, &destination, true).unwrap();
        let mut names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|entry| entry.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(names, ["copy.so", "library.so"]);
    }

    #[test]
    fn lock_files_are_removed_when_released() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("entry.lock");
        let lock = LockFile::acquire(&path, || panic!("nobody else holds it")).unwrap();
        assert!(path.exists());
        drop(lock);
        assert!(!path.exists());
    }

    #[test]
    fn a_waiting_process_gets_the_lock_after_the_holder_removes_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("entry.lock");
        let held = LockFile::acquire(&path, || {}).unwrap();
        let waiter = {
            let path = path.clone();
            std::thread::spawn(move || {
                let lock = LockFile::acquire(&path, || {}).unwrap();
                assert!(path.exists(), "the waiter locks a file that is still named");
                drop(lock);
            })
        };
        std::thread::sleep(std::time::Duration::from_millis(50));
        drop(held);
        waiter.join().unwrap();
        assert!(!path.exists());
    }

    #[test]
    fn only_a_lock_nobody_holds_can_be_taken_over() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("writer.lock");
        assert!(LockFile::try_acquire_existing(&path).is_none(), "no file");
        let held = LockFile::acquire(&path, || {}).unwrap();
        // Another open file description, as another process has: the lock is held.
        let other = {
            let path = path.clone();
            std::thread::spawn(move || LockFile::try_acquire_existing(&path).is_some())
        };
        assert!(!other.join().unwrap());
        drop(held);
        // A killed holder leaves the file, unlocked.
        File::create(&path).unwrap();
        let taken = LockFile::try_acquire_existing(&path).expect("the file is free");
        drop(taken);
        assert!(!path.exists());
    }

    #[test]
    fn hashes_are_lowercase_hex() {
        assert_eq!(
            sha256_bytes(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
