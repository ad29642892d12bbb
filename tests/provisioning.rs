//! With no RELAX_PYTHON and no virtualenv, relax-build provisions the pinned TVM itself:
//! once, behind a lock (two builds at once get the same toolchain), replacing a
//! half-made toolchain left by an interrupted install.

use std::path::PathBuf;

use relax_build::tooling::{self, TVM_VERSION};
use relax_build::Config;

#[test]
fn provisions_once_behind_a_lock_and_replaces_a_half_made_toolchain() {
    let temp = tempfile::tempdir().unwrap();
    // This test binary has this one test, so changing the environment is safe.
    std::env::set_var("RELAX_TOOLCHAIN_DIR", temp.path().join("toolchains"));
    std::env::set_var("RELAX_CACHE_DIR", temp.path().join("cache"));
    std::env::remove_var("RELAX_PYTHON");
    std::env::remove_var("VIRTUAL_ENV");

    let managed = temp
        .path()
        .join("toolchains")
        .join(format!("tvm-{TVM_VERSION}"));
    let config = Config::new()
        .cargo_directives(false)
        .cache_dir(temp.path().join("cache"));
    std::fs::create_dir_all(managed.join("bin")).unwrap();
    std::fs::write(managed.join("bin/python"), "left by an interrupted install").unwrap();

    let builds: Vec<_> = (0..2)
        .map(|_| {
            let config = config.clone();
            std::thread::spawn(move || tooling::toolchain(&config).map(|found| found.python))
        })
        .collect();
    let pythons: Vec<PathBuf> = builds
        .into_iter()
        .map(|build| {
            build
                .join()
                .unwrap()
                .unwrap_or_else(|error| panic!("{error}"))
        })
        .collect();

    assert_eq!(pythons[0], managed.join("bin/python"));
    assert_eq!(pythons[0], pythons[1]);
    assert!(managed.join("relax-toolchain-complete").is_file());
    let found = tooling::toolchain(&config).unwrap();
    assert_eq!(found.tvm_version, TVM_VERSION);
    for dir in &found.runtime_library_dirs {
        assert!(
            dir.starts_with(&managed),
            "{} is inside the toolchain",
            dir.display()
        );
    }
    assert!(found
        .runtime_library_dirs
        .iter()
        .any(|dir| dir.join("libtvm_runtime.so").is_file()));
    assert!(found
        .runtime_library_dirs
        .iter()
        .any(|dir| dir.join("libtvm_ffi.so").is_file()));
}
