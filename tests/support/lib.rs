//! Helpers for the integration tests: build and run the fixture apps as separate cargo
//! projects, and compute references with numpy in the toolchain's Python.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use relax_build::tooling::Toolchain;
use serde_json::Value;

/// The workspace root.
pub fn workspace_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// A fixture folder under `fixtures/`.
pub fn fixture(name: &str) -> PathBuf {
    workspace_root().join("fixtures").join(name)
}

/// The target dir all fixture builds share, so the crates they depend on build once.
pub fn fixture_target_dir() -> PathBuf {
    workspace_root().join("target").join("fixtures")
}

/// `cargo <args>` in `dir` with the shared fixture target dir and `env` added.
pub fn cargo(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string()));
    command
        .current_dir(dir)
        .args(args)
        .env("CARGO_TARGET_DIR", fixture_target_dir())
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS");
    for (name, value) in env {
        command.env(name, value);
    }
    command
        .output()
        .unwrap_or_else(|error| panic!("running cargo in {}: {error}", dir.display()))
}

/// The artifacts folder (`OUT_DIR/relax/<model>`) of the newest build of `package` in
/// the fixture target dir, for `profile` (`debug`, `release`, or `<target>/release`).
pub fn built_model_dir(profile: &str, package: &str, model: &str) -> PathBuf {
    let build = fixture_target_dir().join(profile).join("build");
    std::fs::read_dir(&build)
        .unwrap_or_else(|error| panic!("reading {}: {error}", build.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|dir| {
            dir.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with(&format!("{package}-"))
        })
        .map(|dir| dir.join("out/relax").join(model))
        .filter(|dir| dir.join("library.so").is_file())
        .max_by_key(|dir| {
            std::fs::metadata(dir.join("library.so"))
                .unwrap()
                .modified()
                .unwrap()
        })
        .unwrap_or_else(|| panic!("no built {model} of {package} in {}", build.display()))
}

/// Builds and runs a fixture app with `args`; panics with cargo's output on failure.
pub fn run_fixture(name: &str, args: &[&str]) -> String {
    let mut all = vec!["run", "--quiet", "--"];
    all.extend_from_slice(args);
    let output = cargo(&fixture(name), &all, &[]);
    assert_success(&output, &format!("cargo run of fixture {name}"));
    String::from_utf8(output.stdout).expect("utf-8 output")
}

/// A process's stdout, lossily decoded.
pub fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// A process's stderr, lossily decoded.
pub fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// `cargo run --quiet --release -p <package> -- <args>` in the workspace, which must
/// succeed.
pub fn run_release(package: &str, args: &[&str]) -> Output {
    let mut all = vec!["run", "--quiet", "--release", "-p", package, "--"];
    all.extend_from_slice(args);
    let output = cargo(workspace_root(), &all, &[]);
    assert_success(&output, &format!("cargo run -p {package}"));
    output
}

/// Panics with stdout and stderr when `output` is a failure.
pub fn assert_success(output: &Output, what: &str) {
    assert!(
        output.status.success(),
        "{what} failed ({})\n--- stdout\n{}\n--- stderr\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The toolchain relax-build itself finds (or provisions): TVM and numpy.
fn toolchain() -> &'static Toolchain {
    static TOOLCHAIN: OnceLock<Toolchain> = OnceLock::new();
    TOOLCHAIN.get_or_init(|| {
        relax_build::tooling::toolchain(&relax_build::Config::new().cargo_directives(false))
            .unwrap_or_else(|error| panic!("no TVM toolchain for the tests: {error}"))
    })
}

/// A Python with TVM and numpy: the one relax-build itself finds (or provisions).
pub fn toolchain_python() -> &'static Path {
    &toolchain().python
}

/// Runs a Python script with the toolchain's Python and returns its stdout.
pub fn python(script: &Path, args: &[&str]) -> String {
    run_python(toolchain().command(), script, args)
}

/// Runs a Python script with the toolchain's Python and torch (installed apart from the
/// toolchain, as PyTorch sources get it) and returns its stdout.
pub fn python_with_torch(script: &Path, args: &[&str]) -> String {
    static TOOLCHAIN: OnceLock<Toolchain> = OnceLock::new();
    let toolchain = TOOLCHAIN.get_or_init(|| {
        toolchain()
            .with_torch(relax_build::tooling::Cargo::TOOL, "the tests' reference")
            .unwrap_or_else(|error| panic!("no torch for the tests: {error}"))
    });
    run_python(toolchain.command(), script, args)
}

fn run_python(mut python: Command, script: &Path, args: &[&str]) -> String {
    let output = python
        .arg(script)
        .args(args)
        .output()
        .expect("running python");
    assert_success(&output, &format!("python {}", script.display()));
    String::from_utf8(output.stdout).expect("utf-8 output")
}

/// Asserts that two `{"shape", "data"}` JSON tensors match within `tolerance` (absolute
/// and relative to the reference).
pub fn assert_tensors_close(what: &str, actual: &Value, expected: &Value, tolerance: f64) {
    assert_eq!(actual["shape"], expected["shape"], "{what}: shape");
    let actual = actual["data"].as_array().expect("data array");
    let expected = expected["data"].as_array().expect("data array");
    assert_eq!(actual.len(), expected.len(), "{what}: element count");
    assert!(!actual.is_empty(), "{what}: no elements to compare");
    for (index, (a, e)) in actual.iter().zip(expected).enumerate() {
        let (a, e) = (a.as_f64().unwrap(), e.as_f64().unwrap());
        assert!(
            (a - e).abs() <= tolerance * (1.0 + e.abs()),
            "{what}[{index}]: {a} vs reference {e} (tolerance {tolerance})"
        );
    }
}

/// Writes `value` as JSON into a new temporary file.
pub fn json_file(value: &Value) -> tempfile::NamedTempFile {
    let file = tempfile::Builder::new()
        .suffix(".json")
        .tempfile()
        .expect("temp file");
    std::fs::write(file.path(), value.to_string()).expect("writing JSON");
    file
}

/// Copies a fixture (recursively) to `destination`, pointing its path dependencies at
/// this workspace and appending `-<suffix>` to every package name, so the copy builds
/// in the shared target dir without clashing with the original.
pub fn copy_fixture(name: &str, destination: &Path, suffix: &str) {
    let source = fixture(name);
    for entry in walk(&source) {
        let relative = entry.strip_prefix(&source).unwrap();
        if relative.starts_with("target") || relative.starts_with(".relax") {
            continue;
        }
        let target = destination.join(relative);
        std::fs::create_dir_all(target.parent().unwrap()).unwrap();
        if entry.file_name().unwrap() == "Cargo.toml" {
            let manifest = std::fs::read_to_string(&entry).unwrap();
            std::fs::write(&target, rewrite_manifest(&manifest, suffix)).unwrap();
        } else {
            std::fs::copy(&entry, &target).unwrap();
        }
    }
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(walk(&path));
        } else {
            files.push(path);
        }
    }
    files
}

fn rewrite_manifest(manifest: &str, suffix: &str) -> String {
    let root = workspace_root().display().to_string();
    let mut in_package = false;
    manifest
        .lines()
        .map(|line| {
            if line.starts_with('[') {
                in_package = line.trim() == "[package]";
            }
            let mut line = line.to_string();
            for crate_name in ["relax-build", "relax-runtime"] {
                if let Some(start) = line.find("path = \"") {
                    let end = line
                        .find(&format!("{crate_name}\""))
                        .map(|index| index + crate_name.len());
                    if let Some(end) = end {
                        line = format!(
                            "{}path = \"{root}/{crate_name}{}",
                            &line[..start],
                            &line[end..]
                        );
                    }
                }
            }
            if in_package && line.starts_with("name = \"") {
                line = line.trim_end_matches('"').to_string() + &format!("-{suffix}\"");
            }
            line
        })
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

/// A `RELAX_PYTHON` wrapper that records each start of Python (`probe`, or
/// `driver <model>`) before running the toolchain's Python.
pub struct PythonLog {
    pub wrapper: PathBuf,
    log: PathBuf,
}

impl PythonLog {
    pub fn new(dir: &Path) -> PythonLog {
        use std::os::unix::fs::PermissionsExt;
        let wrapper = dir.join("python-wrapper");
        let log = dir.join("python-starts.log");
        let script = format!(
            "#!/bin/sh\n\
             case \"$1\" in\n\
             \x20 -c) echo probe >> '{log}' ;;\n\
             \x20 *driver*) echo \"driver $(grep -o '\"model\": *\"[^\"]*\"' \"$2\" | sed 's/.*\"\\([^\"]*\\)\"$/\\1/')\" >> '{log}' ;;\n\
             \x20 *) echo \"other $1\" >> '{log}' ;;\n\
             esac\n\
             exec '{python}' \"$@\"\n",
            log = log.display(),
            python = toolchain_python().display()
        );
        std::fs::write(&wrapper, script).unwrap();
        std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
        PythonLog { wrapper, log }
    }

    /// Every start recorded so far.
    pub fn starts(&self) -> Vec<String> {
        std::fs::read_to_string(&self.log)
            .map(|text| text.lines().map(str::to_string).collect())
            .unwrap_or_default()
    }
}

/// A `PATH` with cargo, rustc and the C toolchain but no Python, in a new folder under `dir`.
pub fn path_without_python(dir: &Path) -> String {
    let bin = dir.join("bin-without-python");
    std::fs::create_dir_all(&bin).unwrap();
    let original = std::env::var_os("PATH").unwrap();
    for tool in [
        "cargo",
        "rustc",
        "cc",
        "gcc",
        "ld",
        "as",
        "ar",
        "aarch64-linux-gnu-gcc",
    ] {
        let link = bin.join(tool);
        let found = std::env::split_paths(&original)
            .map(|dir| dir.join(tool))
            .find(|path| path.is_file());
        if let (Some(found), false) = (found, link.exists()) {
            std::os::unix::fs::symlink(found, link).unwrap();
        }
    }
    bin.display().to_string()
}

/// Runs `cargo relax <args>` (the workspace's cargo-relax) with `env` added.
pub fn cargo_relax(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut all = vec!["run", "--quiet", "-p", "cargo-relax", "--", "relax"];
    all.extend_from_slice(args);
    cargo(workspace_root(), &all, env)
}

/// Packages the tests' (and relax-bench's) own Python needs for references: onnxruntime,
/// numpy (with its OpenBLAS), onnx, threadpoolctl to pin BLAS threads, and OpenVINO
/// (relax-bench's second reference).
const TEST_REQUIREMENTS: &[&str] = &[
    "numpy",
    "onnx==1.23.2",
    "onnxruntime==1.23.2",
    "openvino==2026.4.1",
    "threadpoolctl",
];

/// `cargo run --release -p relax-conformance -- <args>`.
pub fn conformance(args: &[&str]) -> Output {
    let mut all = vec![
        "run",
        "--quiet",
        "--release",
        "-p",
        "relax-conformance",
        "--",
    ];
    all.extend_from_slice(args);
    cargo(workspace_root(), &all, &[])
}

/// A Python with onnxruntime for reference outputs: `RELAX_TEST_PYTHON`, else a venv
/// made (once, behind a lock) under `target/test-python`.
pub fn test_python() -> &'static Path {
    static PYTHON: OnceLock<PathBuf> = OnceLock::new();
    PYTHON.get_or_init(|| {
        if let Some(python) = std::env::var_os("RELAX_TEST_PYTHON") {
            return PathBuf::from(python);
        }
        let dir = workspace_root().join("target").join("test-python");
        let marker = dir.join("complete");
        let python = dir.join("bin").join("python");
        std::fs::create_dir_all(workspace_root().join("target")).unwrap();
        let lock = std::fs::File::create(workspace_root().join("target").join("test-python.lock"))
            .unwrap();
        lock.lock().unwrap();
        if std::fs::read_to_string(&marker).ok().as_deref() != Some(&TEST_REQUIREMENTS.join(" ")) {
            let _ = std::fs::remove_dir_all(&dir);
            let venv = Command::new("python3")
                .arg("-m")
                .arg("venv")
                .arg(&dir)
                .output()
                .expect("python3 -m venv");
            assert_success(&venv, "creating the tests' Python venv");
            let pip = Command::new(&python)
                .args([
                    "-m",
                    "pip",
                    "install",
                    "--quiet",
                    "--disable-pip-version-check",
                ])
                .args(TEST_REQUIREMENTS)
                .output()
                .expect("pip");
            assert_success(&pip, "installing the tests' Python packages");
            std::fs::write(&marker, TEST_REQUIREMENTS.join(" ")).unwrap();
        }
        python
    })
}

/// The Cargo target of this machine (the tests run on x86_64 Linux).
pub const HOST: &str = "x86_64-unknown-linux-gnu";

/// The Cargo target the cross tests build for.
pub const CROSS_TARGET: &str = "aarch64-unknown-linux-gnu";

/// Environment for cross builds of fixture copies outside this repository (which do not
/// see its `.cargo/config.toml`).
pub const CROSS_LINKER: (&str, &str) = (
    "CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER",
    "aarch64-linux-gnu-gcc",
);

/// Runs an aarch64 executable under qemu with Debian's aarch64 sysroot.
pub fn run_under_qemu(executable: &Path, args: &[&str], current_dir: &Path) -> Output {
    Command::new("qemu-aarch64")
        .args(["-L", "/usr/aarch64-linux-gnu"])
        .arg(executable)
        .args(args)
        .current_dir(current_dir)
        .env_remove("RELAX_RUNTIME_DIR")
        .output()
        .expect("running qemu-aarch64 (scripts/test.sh installs qemu-user)")
}

/// A fixture copied to a temporary folder, built with a [`PythonLog`] as `RELAX_PYTHON`
/// and a cache of its own, so that what its builds start can be counted.
pub struct IsolatedApp {
    temp: tempfile::TempDir,
    pub dir: PathBuf,
    pub python: PythonLog,
    pub cache_dir: PathBuf,
}

impl IsolatedApp {
    /// Copies fixture `name` (packages renamed with `-<suffix>`).
    pub fn new(name: &str, suffix: &str) -> IsolatedApp {
        let temp = tempfile::tempdir().expect("temp dir");
        let dir = temp.path().join("app");
        copy_fixture(name, &dir, suffix);
        let python = PythonLog::new(temp.path());
        let cache_dir = temp.path().join("cache");
        IsolatedApp {
            temp,
            dir,
            python,
            cache_dir,
        }
    }

    /// The temporary folder holding the app, the log and the cache.
    pub fn temp(&self) -> &Path {
        self.temp.path()
    }

    /// `cargo <args>` in the app with its Python log and cache.
    pub fn cargo(&self, args: &[&str]) -> Output {
        let env = [
            ("RELAX_PYTHON", self.python.wrapper.to_str().unwrap()),
            ("RELAX_CACHE_DIR", self.cache_dir.to_str().unwrap()),
        ];
        cargo(&self.dir, args, &env)
    }

    /// `cargo build --quiet`, which must succeed.
    pub fn build(&self, what: &str) {
        assert_success(&self.cargo(&["build", "--quiet"]), what);
    }

    /// The app's `Cargo.toml`.
    pub fn manifest(&self) -> PathBuf {
        self.dir.join("Cargo.toml")
    }

    /// `cargo relax <args> --manifest-path <app>` with the app's Python log and cache.
    pub fn cargo_relax(&self, args: &[&str]) -> Output {
        let manifest = self.manifest();
        let mut all = args.to_vec();
        all.extend(["--manifest-path", manifest.to_str().unwrap()]);
        cargo_relax(
            &all,
            &[
                ("RELAX_PYTHON", self.python.wrapper.to_str().unwrap()),
                ("RELAX_CACHE_DIR", self.cache_dir.to_str().unwrap()),
            ],
        )
    }

    /// `cargo <args>` with no Python anywhere: RELAX_PYTHON unset, PATH without one, an
    /// empty cache, and a managed toolchain folder that is empty and cannot be made.
    pub fn cargo_without_python(&self, args: &[&str], extra: &[(&str, &str)]) -> Output {
        let mut command =
            Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string()));
        command
            .current_dir(&self.dir)
            .args(args)
            .env("CARGO_TARGET_DIR", fixture_target_dir())
            .env("PATH", path_without_python(self.temp()))
            .env("RELAX_TOOLCHAIN_DIR", self.temp().join("no-toolchain"))
            .env("RELAX_BOOTSTRAP_PYTHON", "/nonexistent/python3")
            .env("RELAX_CACHE_DIR", self.temp().join("empty-cache"))
            .env_remove("VIRTUAL_ENV")
            .env_remove("RELAX_PYTHON")
            .env_remove("RUSTFLAGS")
            .env_remove("CARGO_ENCODED_RUSTFLAGS")
            .envs(extra.iter().copied());
        command.output().unwrap()
    }

    /// Appends `text` to a file of the app (a change of content, so of its key).
    pub fn append(&self, relative: &str, text: &str) {
        let path = self.dir.join(relative);
        let old = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, format!("{old}{text}")).unwrap();
    }
}

/// The rest of the first line of `output` that starts with `prefix`.
pub fn line_after<'a>(output: &'a str, prefix: &str) -> &'a str {
    output
        .lines()
        .find_map(|line| line.strip_prefix(prefix))
        .unwrap_or_else(|| panic!("no `{prefix}` line in:\n{output}"))
}

/// Compiles a fixture of `fixtures/errors/` as its build script would (in-process), and
/// returns the error.
pub fn compile_error(case: &str) -> String {
    let out = tempfile::tempdir().unwrap();
    let result = relax_build::Config::new()
        .cargo_directives(false)
        .manifest_dir(fixture("errors").join(case))
        .out_dir(out.path())
        .target(HOST)
        .host(HOST)
        .try_compile();
    match result {
        Ok(models) => panic!(
            "the {case} fixture compiled ({} models), but it must fail",
            models.len()
        ),
        Err(error) => error.to_string(),
    }
}

/// Asserts that a build error contains each of `expected`.
pub fn assert_contains(message: &str, expected: &[&str]) {
    for part in expected {
        assert!(
            message.contains(part),
            "expected {part:?} in the build error:\n{message}"
        );
    }
}
