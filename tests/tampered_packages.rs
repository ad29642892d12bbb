//! Fetched packages are hash-checked before anything of theirs is used, and no code of
//! theirs runs: against a package index (a local folder here) that serves tampered
//! files, a fetched file's wheel, a source distribution with setup code, and a cross
//! target's TVM runtime wheels are all refused.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use relax_build::tooling;
use relax_build::Config;
use relax_cargo_tests::{workspace_root, HOST};

/// The local index every test of this binary uses: `PIP_NO_INDEX` and `PIP_FIND_LINKS`
/// for every pip that relax-build starts (this binary's tests all want it, so changing
/// the environment is safe). Holds the tampered packages; returns the folder where a
/// source distribution's setup code would leave its mark.
fn tampered_index() -> &'static Path {
    static INDEX: OnceLock<(tempfile::TempDir, PathBuf)> = OnceLock::new();
    let (_, marks) = INDEX.get_or_init(|| {
        let index = tempfile::tempdir().unwrap();
        let marks = index.path().join("marks");
        std::fs::create_dir(&marks).unwrap();
        // six 1.16.0's wheel, with another six.py.
        wheel(
            &index.path().join("six-1.16.0-py2.py3-none-any.whl"),
            &[
                ("six.py", b"print('tampered')\n"),
                (
                    "six-1.16.0.dist-info/METADATA",
                    b"Metadata-Version: 2.1\nName: six\nVersion: 1.16.0\n",
                ),
                (
                    "six-1.16.0.dist-info/WHEEL",
                    b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py2-none-any\nTag: py3-none-any\n",
                ),
                ("six-1.16.0.dist-info/RECORD", b""),
            ],
        );
        // A source distribution whose build code (an in-tree build backend, which pip
        // runs without installing anything) leaves a mark when it runs.
        sdist(
            &index.path().join("relaxtestsdist-1.0.tar.gz"),
            "relaxtestsdist-1.0",
            &format!(
                "open({:?}, 'w').write('the build backend ran')\n",
                marks.join("setup-ran").display().to_string()
            ),
        );
        // The TVM runtime wheels for aarch64, replaced.
        for name in [
            "apache_tvm-0.27.0.post1-py3-none-manylinux_2_28_aarch64.whl",
            "apache_tvm_ffi-0.1.14.post1-py3-none-manylinux_2_28_aarch64.whl",
        ] {
            wheel(
                &index.path().join(name),
                &[("tvm/lib/libtvm_runtime.so", b"not TVM")],
            );
        }
        std::env::set_var("PIP_NO_INDEX", "1");
        std::env::set_var("PIP_FIND_LINKS", index.path());
        (index, marks)
    });
    marks
}

/// A zip archive of `entries` (a wheel, as far as pip's download is concerned).
fn wheel(path: &Path, entries: &[(&str, &[u8])]) {
    let script = "import sys, zipfile\nwith zipfile.ZipFile(sys.argv[1], 'w') as z:\n    for i in range(2, len(sys.argv), 2):\n        z.writestr(sys.argv[i], open(sys.argv[i + 1], 'rb').read())\n";
    let files = tempfile::tempdir().unwrap();
    let mut args = vec![path.to_path_buf()];
    for (index, (name, bytes)) in entries.iter().enumerate() {
        let file = files.path().join(index.to_string());
        std::fs::write(&file, bytes).unwrap();
        args.push(PathBuf::from(name));
        args.push(file);
    }
    let status = std::process::Command::new("python3")
        .arg("-c")
        .arg(script)
        .args(&args)
        .status()
        .unwrap();
    assert!(status.success());
}

/// A source distribution whose build backend (`<root>/backend.py`, in the tree) is
/// `backend`.
fn sdist(path: &Path, root: &str, backend: &str) {
    let dir = tempfile::tempdir().unwrap();
    let folder = dir.path().join(root);
    std::fs::create_dir(&folder).unwrap();
    std::fs::File::create(folder.join("backend.py"))
        .unwrap()
        .write_all(backend.as_bytes())
        .unwrap();
    std::fs::write(
        folder.join("pyproject.toml"),
        "[build-system]\nrequires = []\nbuild-backend = \"backend\"\nbackend-path = [\".\"]\n",
    )
    .unwrap();
    std::fs::write(
        folder.join("PKG-INFO"),
        "Metadata-Version: 2.1\nName: relaxtestsdist\nVersion: 1.0\n",
    )
    .unwrap();
    let status = std::process::Command::new("tar")
        .arg("-czf")
        .arg(path)
        .arg("-C")
        .arg(dir.path())
        .arg(root)
        .status()
        .unwrap();
    assert!(status.success());
}

/// A package declaring one fetched file, built with an empty cache; returns the error.
fn fetch_error(package: &str, path: &str) -> String {
    let temp = tempfile::tempdir().unwrap();
    let models = temp.path().join("models");
    std::fs::create_dir(&models).unwrap();
    std::fs::copy(
        workspace_root().join("fixtures/tvmscript-pair/models/pair.py"),
        models.join("pair.py"),
    )
    .unwrap();
    std::fs::write(
        temp.path().join("Cargo.toml"),
        format!(
            "[package]\nname = \"fetch\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n\
             [package.metadata.relax.models.pair]\nsource = \"models/pair.py\"\nentry = \"Pair\"\n\
             [package.metadata.relax.models.pair.files.data]\npackage = \"{package}\"\npath = \"{path}\"\n\
             sha256 = \"{}\"\n",
            "0".repeat(64)
        ),
    )
    .unwrap();
    let result = Config::new()
        .cargo_directives(false)
        .manifest_dir(temp.path())
        .cache_dir(temp.path().join("cache"))
        .prepared_dir(temp.path().join("prepared"))
        .out_dir(temp.path())
        .target(HOST)
        .host(HOST)
        .try_compile();
    match result {
        Ok(_) => panic!("fetching {path} of {package} succeeded, but it must fail"),
        Err(error) => error.to_string(),
    }
}

fn assert_contains(message: &str, expected: &[&str]) {
    for part in expected {
        assert!(message.contains(part), "expected {part:?} in:\n{message}");
    }
}

#[test]
fn a_tampered_wheel_of_a_fetched_file_is_not_used() {
    tampered_index();
    assert_contains(
        &fetch_error("six==1.16.0", "six.py"),
        &[
            "`package.metadata.relax.models.pair.files.data`",
            "`six.py` of six==1.16.0 has sha256",
            "the file was not used",
        ],
    );
}

#[test]
fn a_source_distribution_is_never_downloaded_so_its_setup_code_never_runs() {
    let marks = tampered_index();
    assert_contains(
        &fetch_error("relaxtestsdist==1.0", "relaxtestsdist/data.bin"),
        &[
            "`package.metadata.relax.models.pair.files.data`",
            "pip could not download a wheel of relaxtestsdist==1.0",
            "relax-build fetches wheels only",
        ],
    );
    assert!(
        !marks.join("setup-ran").exists(),
        "the source distribution's build code ran"
    );
}

#[test]
fn tampered_runtime_wheels_of_a_cross_target_are_refused_before_they_are_unzipped() {
    tampered_index();
    let toolchain = tooling::toolchain(&Config::new().cargo_directives(false))
        .unwrap_or_else(|error| panic!("{error}"));
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().join("aarch64-unknown-linux-gnu").join("lib");
    let error = tooling::fetch_runtime_libraries(&toolchain, "aarch64-unknown-linux-gnu", &dir)
        .unwrap_err();
    assert!(
        matches!(error, relax_build::Error::HashMismatch { .. }),
        "{error}"
    );
    assert_contains(
        &error.to_string(),
        &[
            "apache-tvm",
            "did not match the hash lock relax-build/locks/linux-aarch64/",
            "toolchain.txt (its TVM wheels)",
            "a tampered or replaced package",
        ],
    );
    assert!(!dir.exists(), "nothing was extracted");
}
