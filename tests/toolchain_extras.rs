//! torch, which PyTorch sources need, is installed apart from the base toolchain: on a
//! fresh toolchain, a PyTorch model's build installs it while other models build, every
//! build passes, and a build without a PyTorch source never imports torch.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use relax_build::tooling::{self, TVM_VERSION};
use relax_build::Config;
use relax_cargo_tests::{fixture, HOST};

fn config(manifest_dir: &Path, cache: &Path, out: &Path) -> Config {
    Config::new()
        .cargo_directives(false)
        .manifest_dir(manifest_dir)
        .cache_dir(cache)
        .out_dir(out)
        .target(HOST)
        .host(HOST)
}

/// Whether `import tvm` in `python` (run as `command` sets it up) imports torch too.
fn tvm_imports_torch(mut command: std::process::Command) -> bool {
    let output = command
        .args(["-c", "import sys, tvm; print('torch' in sys.modules)"])
        .output()
        .expect("running the toolchain's Python");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    match String::from_utf8_lossy(&output.stdout).trim() {
        "True" => true,
        "False" => false,
        other => panic!("unexpected answer {other:?}"),
    }
}

#[test]
fn torch_installs_apart_while_other_models_build() {
    let temp = tempfile::tempdir().unwrap();
    // This test binary has this one test, so changing the environment is safe.
    std::env::set_var("RELAX_TOOLCHAIN_DIR", temp.path().join("toolchains"));
    std::env::remove_var("RELAX_PYTHON");
    std::env::remove_var("VIRTUAL_ENV");
    let managed = temp
        .path()
        .join("toolchains")
        .join(format!("tvm-{TVM_VERSION}"));

    // The base toolchain first: the builds below overlap on torch's install.
    let mlp = fixture("nn-mlp");
    let base = tooling::toolchain(&config(&mlp, &temp.path().join("cache"), temp.path()))
        .unwrap_or_else(|error| panic!("{error}"));
    assert!(
        base.python.starts_with(&managed),
        "{}",
        base.python.display()
    );

    let torch_done = AtomicBool::new(false);
    let (torch_build, other_builds) = std::thread::scope(|scope| {
        let torch = scope.spawn(|| {
            let out = temp.path().join("torch-out");
            let result = config(
                &fixture("torch-models"),
                &temp.path().join("torch-cache"),
                &out,
            )
            .try_compile();
            torch_done.store(true, Ordering::SeqCst);
            result
        });
        // Other models build, each with an empty cache so that each starts the driver
        // and imports tvm, for as long as torch is being installed.
        let others = scope.spawn(|| {
            let mut builds = Vec::new();
            while !torch_done.load(Ordering::SeqCst) {
                let round = builds.len();
                let started = Instant::now();
                let result = config(
                    &mlp,
                    &temp.path().join(format!("mlp-cache-{round}")),
                    &temp.path().join(format!("mlp-out-{round}")),
                )
                .try_compile()
                .map(drop)
                .map_err(|error| error.to_string());
                builds.push((started, result));
            }
            builds
        });
        (torch.join().unwrap(), others.join().unwrap())
    });

    let compiled = torch_build.unwrap_or_else(|error| panic!("the PyTorch models: {error}"));
    assert_eq!(compiled.len(), 3, "cnn, encoder and program were compiled");
    assert!(
        !other_builds.is_empty(),
        "no other build ran while torch was installed"
    );
    for (round, (_, result)) in other_builds.iter().enumerate() {
        if let Err(error) = result {
            panic!("build {round} of nn-mlp, while torch was installed, failed: {error}");
        }
    }

    // torch is in a folder of its own, complete, and nothing partial is left.
    let extras = managed.join("extras");
    let folders: Vec<String> = std::fs::read_dir(&extras)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        folders
            .iter()
            .any(|name| name.starts_with("torch-") && !name.ends_with(".partial")),
        "{folders:?}"
    );
    assert!(
        !folders.iter().any(|name| name.ends_with(".partial")),
        "{folders:?}"
    );
    // The base toolchain has no torch: a build without a PyTorch source never imports
    // it, and the toolchain's build hash (part of every model's cache key) is unchanged.
    let after = tooling::toolchain(&config(&mlp, &temp.path().join("cache"), temp.path()))
        .unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(after.build_hash, base.build_hash);
    assert!(!tvm_imports_torch(after.command()));
    let with_torch = after
        .with_torch(tooling::Cargo::TOOL, "cnn")
        .unwrap_or_else(|error| panic!("{error}"));
    assert!(tvm_imports_torch(with_torch.command()));
}
