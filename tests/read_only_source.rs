//! A build script writes only under OUT_DIR (and the shared cache): the quickstart
//! builds from a read-only copy of its source tree, and no file of the tree is created
//! or changed (checked file by file, since root ignores permission bits).

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use relax_cargo_tests::{assert_success, fixture_target_dir, workspace_root};

/// Every file and folder under `root`, with its size and modification time.
fn snapshot(root: &Path) -> BTreeMap<PathBuf, (u64, std::time::SystemTime)> {
    walkdir(root)
        .into_iter()
        .map(|path| {
            let metadata = std::fs::symlink_metadata(&path).unwrap();
            (path, (metadata.len(), metadata.modified().unwrap()))
        })
        .collect()
}

fn walkdir(root: &Path) -> Vec<PathBuf> {
    let mut paths = vec![root.to_path_buf()];
    if root.is_dir() {
        for entry in std::fs::read_dir(root).unwrap() {
            paths.extend(walkdir(&entry.unwrap().path()));
        }
    }
    paths
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        let target = to.join(path.file_name().unwrap());
        if path.is_dir() {
            copy_tree(&path, &target);
        } else {
            std::fs::copy(&path, &target).unwrap();
        }
    }
}

fn set_read_only(root: &Path, read_only: bool) {
    for path in walkdir(root) {
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        let mode = if read_only {
            mode & !0o222
        } else {
            mode | 0o200
        };
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    }
}

#[test]
fn the_quickstart_builds_from_a_read_only_source_tree() {
    let temp = tempfile::tempdir().unwrap();
    let tree = temp.path().join("tree");
    copy_tree(
        &workspace_root().join("examples/quickstart"),
        &tree.join("quickstart"),
    );
    let manifest = tree.join("quickstart/Cargo.toml");
    let root = workspace_root().display().to_string();
    let text = std::fs::read_to_string(&manifest)
        .unwrap()
        .replace("../../relax-build", &format!("{root}/relax-build"))
        .replace("../../relax-runtime", &format!("{root}/relax-runtime"));
    std::fs::write(&manifest, text).unwrap();
    std::fs::write(
        tree.join("Cargo.toml"),
        "[workspace]\nmembers = [\"quickstart\"]\nresolver = \"2\"\n\
         [workspace.package]\nversion = \"0.1.0\"\nedition = \"2021\"\nlicense = \"Apache-2.0\"\n\
         [workspace.dependencies]\nsafetensors = \"0.4\"\n",
    )
    .unwrap();
    std::fs::copy(workspace_root().join("Cargo.lock"), tree.join("Cargo.lock")).unwrap();
    let cargo = |args: &[&str]| {
        std::process::Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string()))
            .current_dir(&tree)
            .args(args)
            .env("CARGO_TARGET_DIR", fixture_target_dir())
            .env_remove("RUSTFLAGS")
            .env_remove("CARGO_ENCODED_RUSTFLAGS")
            .output()
            .unwrap()
    };
    // Trim the lock file to this workspace while the tree is still writable.
    assert_success(
        &cargo(&["metadata", "--format-version", "1"]),
        "cargo metadata",
    );

    set_read_only(&tree, true);
    let before = snapshot(&tree);
    let output = cargo(&["build", "--locked", "--quiet"]);
    set_read_only(&tree, false);
    assert_success(&output, "building the quickstart from a read-only tree");
    let after = snapshot(&tree);
    let changed: Vec<_> = after
        .iter()
        .filter(|(path, state)| before.get(*path) != Some(state))
        .map(|(path, _)| path.strip_prefix(&tree).unwrap().to_path_buf())
        .collect();
    assert!(
        changed.is_empty() && after.len() == before.len(),
        "the build wrote into the source tree: {changed:?}"
    );
    let binary = fixture_target_dir().join("debug/quickstart");
    let run = std::process::Command::new(binary).output().unwrap();
    assert_success(&run, "the quickstart built from a read-only tree");
    assert!(String::from_utf8_lossy(&run.stdout).starts_with("accuracy: 0.9722"));
}
