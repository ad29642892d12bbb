//! The managed toolchain is installed hash-locked (`pip install --require-hashes`): a
//! tampered lock entry fails the install with an error naming the package; the same
//! lock again reuses the venv without running pip; a changed lock upgrades it in place.
//! The lock is six from PyPI (one small wheel), so pip really downloads and checks it.

use std::path::Path;
use std::process::Command;

use relax_build::tooling::{provision_from_lock, Provisioned};
use relax_build::Error;

const SIX_1_16_0: &str = "8abb2f1d86890a2dfb989f9a77cfcfd3e47c2a354b01111771326f8aa26e0254";
const SIX_1_17_0: &str = "4721f391ed90541fddacab5acf947aa0d3dc7d27b2e1e8eda2be8970586c3274";
const MARKER: &str = "relax-toolchain-complete";

fn six_version(dir: &Path) -> String {
    let output = Command::new(dir.join("bin/python"))
        .args(["-c", "import six; print(six.__version__)"])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap().trim().to_string()
}

#[test]
fn a_tampered_lock_fails_naming_the_package_and_the_same_lock_reuses_the_venv() {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().join("toolchain");

    // A lock entry whose hash is not six's: pip downloads six and refuses it.
    let wrong = "0".repeat(64);
    let tampered = format!("six==1.16.0 --hash=sha256:{wrong}\n");
    let error = provision_from_lock(&dir, "test/tampered.txt", &tampered).unwrap_err();
    let message = error.to_string();
    match &error {
        Error::HashMismatch { lock, packages, .. } => {
            assert_eq!(lock, "test/tampered.txt");
            assert_eq!(packages, &["six==1.16.0".to_string()]);
        }
        other => panic!("expected a hash mismatch, got: {other}"),
    }
    for part in [
        "six==1.16.0 did not match the hash lock test/tampered.txt",
        &format!("the lock allows sha256 {wrong}, the file served has {SIX_1_16_0}"),
        "six-1.16.0-py2.py3-none-any.whl",
        &dir.join("relax-toolchain.txt").display().to_string(),
        "Do not bypass the check",
        "Fix: use a trustworthy index",
        "RELAX_PYTHON",
    ] {
        assert!(message.contains(part), "{part:?} in: {message}");
    }
    assert!(
        !dir.join(MARKER).exists(),
        "a failed install is not complete"
    );

    // The right hash: the half-made venv is replaced and six is installed.
    let lock = format!("six==1.16.0 --hash=sha256:{SIX_1_16_0}\n");
    let made = provision_from_lock(&dir, "test/six.txt", &lock).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(made, Provisioned::Made);
    assert_eq!(six_version(&dir), "1.16.0");
    let marker = std::fs::read_to_string(dir.join(MARKER)).unwrap();
    assert!(marker.starts_with("lock test/six.txt sha256 "), "{marker}");
    let modified = std::fs::metadata(dir.join(MARKER))
        .unwrap()
        .modified()
        .unwrap();

    // The same lock again: reused, without running the venv's Python (so no pip). To
    // make that observable, its python is a script that records being run and fails.
    let python = dir.join("bin/python");
    let real = dir.join("bin/python.real");
    let ran = temp.path().join("python-was-run");
    std::fs::rename(&python, &real).unwrap();
    std::fs::write(
        &python,
        format!("#!/bin/sh\ntouch '{}'\nexit 1\n", ran.display()),
    )
    .unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&python, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let again = provision_from_lock(&dir, "test/six.txt", &lock).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(again, Provisioned::Reused);
    assert!(
        !ran.exists(),
        "the second provisioning ran the venv's Python"
    );
    assert_eq!(
        std::fs::read_to_string(dir.join(MARKER)).unwrap(),
        marker,
        "the marker is unchanged"
    );
    assert_eq!(
        std::fs::metadata(dir.join(MARKER))
            .unwrap()
            .modified()
            .unwrap(),
        modified
    );
    std::fs::rename(&real, &python).unwrap();

    // A changed lock (a new pin): the venv is upgraded in place from it.
    let bumped = format!("six==1.17.0 --hash=sha256:{SIX_1_17_0}\n");
    let upgraded =
        provision_from_lock(&dir, "test/six.txt", &bumped).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(upgraded, Provisioned::Upgraded);
    assert_eq!(six_version(&dir), "1.17.0");
    assert_ne!(std::fs::read_to_string(dir.join(MARKER)).unwrap(), marker);
    assert_eq!(
        provision_from_lock(&dir, "test/six.txt", &bumped).unwrap(),
        Provisioned::Reused
    );
}
