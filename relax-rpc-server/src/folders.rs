//! Session folders: `relax-rpc-session-XXXX/` in the work dir, one per session, and
//! beside each a lock file `relax-rpc-session-XXXX.lock` that marks it as a
//! relax-rpc-server's and says whether it is in use.
//!
//! The server takes a shared `flock` on the lock file before it makes the folder, and
//! the session's child process takes one too, so the folder counts as live while either
//! runs (a child orphaned by a killed server included). The server removes the folder
//! and its lock file when the session's child has exited, however it exited. At start
//! it sweeps the stale ones: the folders whose lock file, owned by the same user, nobody
//! holds (an exclusive `flock` succeeds), left by a server that was killed. Folders
//! without a lock file are never touched: they are not a relax-rpc-server's of this kind,
//! and another server's live sessions hold their locks.

use std::fs::{self, File};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The prefix of session folders (and of their lock files).
pub const PREFIX: &str = "relax-rpc-session-";
const LOCK_SUFFIX: &str = ".lock";

/// A session's folder, removed with its lock file when dropped.
pub struct SessionFolder {
    path: PathBuf,
    lock_path: PathBuf,
    _lock: File,
}

impl SessionFolder {
    /// Makes a new session folder in `work_dir`, marked live by its lock file.
    pub fn create(work_dir: &Path) -> io::Result<SessionFolder> {
        loop {
            let lock = tempfile::Builder::new()
                .prefix(PREFIX)
                .suffix(LOCK_SUFFIX)
                .tempfile_in(work_dir)?;
            let (file, lock_path) = lock.keep().map_err(|error| error.error)?;
            flock(&file, libc::LOCK_SH)?;
            let path = folder_of(&lock_path).expect("a lock file's name ends with .lock");
            match fs::create_dir(&path) {
                Ok(()) => {
                    return Ok(SessionFolder {
                        path,
                        lock_path,
                        _lock: file,
                    })
                }
                // A folder of that name without a lock file (not ours): another name.
                Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {
                    let _ = fs::remove_file(&lock_path);
                }
                Err(error) => {
                    let _ = fs::remove_file(&lock_path);
                    return Err(error);
                }
            }
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn lock_path(&self) -> &Path {
        &self.lock_path
    }
}

impl Drop for SessionFolder {
    fn drop(&mut self) {
        match fs::remove_dir_all(&self.path) {
            Err(error) if error.kind() != io::ErrorKind::NotFound => {
                // The lock file stays: the next server's sweep removes the folder.
                eprintln!(
                    "relax-rpc-server: removing the session folder {}: {error} (the next start \
                     of the server sweeps it)",
                    self.path.display()
                );
            }
            _ => {
                let _ = fs::remove_file(&self.lock_path);
            }
        }
    }
}

/// Marks the session folder of `lock_path` live for as long as the returned file is
/// open (the session's child process holds it).
pub fn hold(lock_path: &Path) -> io::Result<File> {
    let file = File::open(lock_path)?;
    flock(&file, libc::LOCK_SH)?;
    Ok(file)
}

/// Removes the stale session folders of `work_dir` (see the module docs) and returns them.
pub fn sweep(work_dir: &Path) -> io::Result<Vec<PathBuf>> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let user = unsafe { libc::geteuid() };
    let mut removed = Vec::new();
    for entry in fs::read_dir(work_dir)? {
        let lock_path = entry?.path();
        let Some(folder) = folder_of(&lock_path) else {
            continue;
        };
        let Ok(metadata) = fs::symlink_metadata(&lock_path) else {
            continue;
        };
        if !metadata.is_file() || metadata.uid() != user {
            continue;
        }
        let Ok(file) = File::open(&lock_path) else {
            continue;
        };
        if flock(&file, libc::LOCK_EX | libc::LOCK_NB).is_err() {
            continue; // live: a server or a session holds it
        }
        if folder.is_dir() {
            fs::remove_dir_all(&folder)?;
            removed.push(folder);
        }
        fs::remove_file(&lock_path)?;
    }
    Ok(removed)
}

/// The folder a lock file marks (`None`: not a session lock file's name).
fn folder_of(lock_path: &Path) -> Option<PathBuf> {
    let name = lock_path.file_name()?.to_str()?;
    let stem = name.strip_suffix(LOCK_SUFFIX)?;
    (stem.len() > PREFIX.len() && stem.starts_with(PREFIX)).then(|| lock_path.with_file_name(stem))
}

fn flock(file: &File, operation: i32) -> io::Result<()> {
    // SAFETY: the descriptor is open for as long as `file` lives; flock reads nothing else.
    if unsafe { libc::flock(file.as_raw_fd(), operation) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests;
