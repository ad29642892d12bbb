//! A release binary holds no absolute path of the build machine's toolchain or
//! workspace (relax-runtime finds TVM's runtime at run time, not from baked-in paths),
//! and still runs with no environment variable set.

use relax_cargo_tests::{
    assert_success, cargo, fixture_target_dir, stdout, toolchain_python, workspace_root,
};

/// Whether `needle` occurs in `haystack`.
fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack
        .windows(needle.len())
        .any(|window| window == needle)
}

#[test]
fn a_release_build_holds_no_toolchain_or_workspace_path() {
    let build = cargo(
        workspace_root(),
        &["build", "--quiet", "--release", "-p", "quickstart"],
        &[],
    );
    assert_success(&build, "release build of the quickstart");
    let binary_path = fixture_target_dir().join("release/quickstart");
    let binary = std::fs::read(&binary_path).unwrap();
    // The toolchain's root: .../relax-cargo/toolchains/tvm-<version>.
    let toolchain = toolchain_python().parent().unwrap().parent().unwrap();
    let target_dir = fixture_target_dir();
    for path in [workspace_root(), toolchain, target_dir.as_path()] {
        let text = path.to_str().unwrap();
        assert!(
            !contains(&binary, text.as_bytes()),
            "{} contains {text}",
            binary_path.display()
        );
    }
    assert!(
        !contains(&binary, b"relax-cargo/toolchains"),
        "the toolchain folder's name is baked in"
    );

    let run = std::process::Command::new(&binary_path)
        .env_remove("RELAX_RUNTIME_DIR")
        .current_dir(std::env::temp_dir())
        .output()
        .unwrap();
    assert_success(&run, "the release quickstart, run from another folder");
    assert!(stdout(&run).starts_with("accuracy: "), "{}", stdout(&run));
}
