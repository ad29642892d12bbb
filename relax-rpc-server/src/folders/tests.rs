use super::*;

#[test]
fn a_session_folder_and_its_lock_file_are_removed_when_dropped() {
    let work = tempfile::tempdir().unwrap();
    let folder = SessionFolder::create(work.path()).unwrap();
    let (path, lock) = (
        folder.path().to_path_buf(),
        folder.lock_path().to_path_buf(),
    );
    assert!(path.is_dir() && lock.is_file());
    assert_eq!(folder_of(&lock).unwrap(), path);
    fs::write(path.join("upload.so"), b"x").unwrap();
    drop(folder);
    assert!(!path.exists() && !lock.exists());
}

/// A session folder and its lock file as a killed server leaves them.
fn left_behind(work: &Path, name: &str) -> (PathBuf, PathBuf) {
    let folder = work.join(format!("{PREFIX}{name}"));
    let lock = work.join(format!("{PREFIX}{name}{LOCK_SUFFIX}"));
    fs::create_dir(&folder).unwrap();
    fs::write(folder.join("upload.so"), b"x").unwrap();
    fs::write(&lock, b"").unwrap();
    (folder, lock)
}

#[test]
fn a_sweep_removes_only_the_folders_nobody_holds() {
    let work = tempfile::tempdir().unwrap();
    let live = SessionFolder::create(work.path()).unwrap();
    // A killed server's session whose child still runs, holding the lock.
    let (orphaned, orphaned_lock) = left_behind(work.path(), "orphaned");
    let held_by_child = hold(&orphaned_lock).unwrap();
    // A killed server's session whose child is gone too.
    let (stale, stale_lock) = left_behind(work.path(), "stale");
    // Someone else's folder, without a lock file.
    let foreign = work.path().join(format!("{PREFIX}foreign"));
    fs::create_dir(&foreign).unwrap();

    let removed = sweep(work.path()).unwrap();
    assert_eq!(removed, std::slice::from_ref(&stale));
    assert!(!stale.exists() && !stale_lock.exists());
    assert!(live.path().is_dir() && orphaned.is_dir() && foreign.is_dir());
    drop(held_by_child);
    assert_eq!(sweep(work.path()).unwrap(), [orphaned]);
    assert!(live.path().is_dir());
}
