//! The hash locks the managed toolchain is installed from, shipped inside relax-build.
//!
//! `locks/<platform>/cp<XY>/toolchain.txt` holds every package of
//! `versions::requirements()` with its dependencies, and `torch.txt` what torch
//! adds on top (`tracker.txt` likewise tornado, for TVM's RPC tracker), each line `name==version --hash=sha256:...`. pip installs them with
//! `--require-hashes --no-deps`, so a mirror (or anyone between it and the build) that
//! serves another file for a pinned version fails the build instead of running it.
//! Wheels are per CPython version, so there is a lock per CPython minor version: the
//! one of the interpreter that makes the venv (`RELAX_BOOTSTRAP_PYTHON`). The locks are
//! made by `python3 relax-build/locks/generate.py` (see its docstring).

use std::borrow::Cow;

use crate::files;

/// Every shipped lock: (path under `locks/`, text).
macro_rules! shipped {
    ($($path:literal),* $(,)?) => {
        &[$(($path, include_str!(concat!("../locks/", $path)))),*]
    };
}

const SHIPPED: &[(&str, &str)] = shipped![
    "linux-aarch64/cp311/toolchain.txt",
    "linux-aarch64/cp311/torch.txt",
    "linux-aarch64/cp311/tracker.txt",
    "linux-aarch64/cp312/toolchain.txt",
    "linux-aarch64/cp312/torch.txt",
    "linux-aarch64/cp312/tracker.txt",
    "linux-aarch64/cp313/toolchain.txt",
    "linux-aarch64/cp313/torch.txt",
    "linux-aarch64/cp313/tracker.txt",
    "linux-aarch64/cp314/toolchain.txt",
    "linux-aarch64/cp314/torch.txt",
    "linux-aarch64/cp314/tracker.txt",
    "linux-x86_64/cp311/toolchain.txt",
    "linux-x86_64/cp311/torch.txt",
    "linux-x86_64/cp311/tracker.txt",
    "linux-x86_64/cp312/toolchain.txt",
    "linux-x86_64/cp312/torch.txt",
    "linux-x86_64/cp312/tracker.txt",
    "linux-x86_64/cp313/toolchain.txt",
    "linux-x86_64/cp313/torch.txt",
    "linux-x86_64/cp313/tracker.txt",
    "linux-x86_64/cp314/toolchain.txt",
    "linux-x86_64/cp314/torch.txt",
    "linux-x86_64/cp314/tracker.txt",
];

/// Which set of packages a lock installs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// TVM and the rest of the toolchain's requirements.
    Toolchain,
    /// torch and what it adds to the toolchain.
    Torch,
    /// tornado, for TVM's RPC tracker.
    Tracker,
}

impl Kind {
    /// Its file name in a lock folder.
    pub fn file_name(self) -> &'static str {
        match self {
            Kind::Toolchain => "toolchain.txt",
            Kind::Torch => "torch.txt",
            Kind::Tracker => "tracker.txt",
        }
    }
}

/// A requirements file of hash-pinned packages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lock {
    /// Where it comes from: `relax-build/locks/linux-x86_64/cp311/toolchain.txt`.
    pub name: String,
    /// Its lines.
    pub text: Cow<'static, str>,
}

impl Lock {
    /// The sha256 of its text: the managed toolchain's marker records it.
    pub fn sha256(&self) -> String {
        files::sha256_bytes(self.text.as_bytes())
    }

    /// The `name==version` of each package line (comments and blank lines skipped).
    pub fn pins(&self) -> Vec<&str> {
        self.text
            .lines()
            .map(str::trim)
            .filter(|line| !line.is_empty() && !line.starts_with('#'))
            .map(|line| line.split_whitespace().next().unwrap_or(line))
            .collect()
    }
}

/// This machine's platform as the locks name it (`linux-x86_64`), when relax-build
/// ships locks for it.
pub fn platform() -> String {
    format!("{}-{}", std::env::consts::OS, std::env::consts::ARCH)
}

/// The shipped lock of `kind` for this platform and a CPython tag (`cp311`), or an
/// error message saying what is supported.
pub fn shipped(kind: Kind, python_tag: &str) -> Result<Lock, String> {
    shipped_for(&platform(), kind, python_tag)
}

/// The shipped lock of `kind` for a platform (`linux-aarch64`) and a CPython tag, or an
/// error message saying what is supported.
pub fn shipped_for(platform: &str, kind: Kind, python_tag: &str) -> Result<Lock, String> {
    let path = format!("{platform}/{python_tag}/{}", kind.file_name());
    if let Some(lock) = shipped_named(&format!("relax-build/locks/{path}")) {
        return Ok(lock);
    }
    let supported: Vec<String> = SHIPPED
        .iter()
        .filter(|(path, _)| path.ends_with(kind.file_name()))
        .map(|(path, _)| {
            let mut parts = path.split('/');
            format!(
                "{} with {}",
                parts.next().unwrap_or_default(),
                python_name(parts.next().unwrap_or_default())
            )
        })
        .collect();
    Err(format!(
        "relax-build ships no hash lock for {platform} with {} (it has locks for: {})",
        python_name(python_tag),
        supported.join(", ")
    ))
}

/// A shipped lock by its name (`relax-build/locks/<platform>/cp<XY>/<kind>.txt`).
pub fn shipped_named(name: &str) -> Option<Lock> {
    let path = name.strip_prefix("relax-build/locks/")?;
    SHIPPED
        .iter()
        .find(|(shipped, _)| *shipped == path)
        .map(|(_, text)| Lock {
            name: name.to_string(),
            text: Cow::Borrowed(text),
        })
}

/// `cp311` -> `CPython 3.11`.
fn python_name(tag: &str) -> String {
    match tag.strip_prefix("cp3") {
        Some(minor) => format!("CPython 3.{minor}"),
        None => tag.to_string(),
    }
}

/// A package pip refused because its file's sha256 is not one the lock allows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HashMismatch {
    /// `name==version`, as pip names it.
    pub package: String,
    /// The file pip downloaded.
    pub url: String,
    /// The sha256 values the lock allows.
    pub expected: Vec<String>,
    /// The sha256 of the file pip got.
    pub got: String,
}

/// The packages of pip's "THESE PACKAGES DO NOT MATCH THE HASHES FROM THE REQUIREMENTS
/// FILE" report in its stderr; empty when there is none.
///
/// The report reads:
///
/// ```text
///     six==1.16.0 from https://files.pythonhosted.org/.../six-1.16.0-py2.py3-none-any.whl (from -r lock.txt (line 1)):
///         Expected sha256 0000...
///                  or     1111...
///              Got        8abb...
/// ```
pub fn hash_mismatches(stderr: &str) -> Vec<HashMismatch> {
    let Some(start) = stderr.find("DO NOT MATCH THE HASHES") else {
        return Vec::new();
    };
    let mut mismatches: Vec<HashMismatch> = Vec::new();
    for line in stderr[start..].lines().skip(1) {
        let trimmed = line.trim();
        let mut words = trimmed.split_whitespace();
        match words.next() {
            Some("Expected") => {
                if let (Some(current), Some(hash)) = (mismatches.last_mut(), words.nth(1)) {
                    current.expected.push(hash.to_string());
                }
            }
            Some("or") => {
                if let (Some(current), Some(hash)) = (mismatches.last_mut(), words.next()) {
                    current.expected.push(hash.to_string());
                }
            }
            Some("Got") => {
                if let (Some(current), Some(hash)) = (mismatches.last_mut(), words.next()) {
                    current.got = hash.to_string();
                }
            }
            Some(package) if package.contains("==") && trimmed.contains(" from ") => {
                let url = trimmed
                    .split(" from ")
                    .nth(1)
                    .and_then(|rest| rest.split_whitespace().next())
                    .unwrap_or_default()
                    .trim_end_matches(':');
                mismatches.push(HashMismatch {
                    package: package.to_string(),
                    url: url.to_string(),
                    expected: Vec::new(),
                    got: String::new(),
                });
            }
            _ if trimmed.is_empty() => {}
            // Another message of pip's: the report is over.
            _ => break,
        }
    }
    mismatches
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::versions::{
        requirements, TORCH_VERSION, TORNADO_VERSION, TVM_FFI_VERSION, TVM_VERSION,
    };

    /// Every shipped lock line pins one version with at least one sha256, and every
    /// toolchain lock holds every pin of `requirements()` (torch locks: the torch pin,
    /// tracker locks: the tornado pin),
    /// so a pin bumped without regenerating the locks fails here.
    #[test]
    fn every_shipped_lock_is_complete_and_matches_the_pins() {
        let fix = "Fix: run `python3 relax-build/locks/generate.py`";
        assert!(SHIPPED.len() >= 4);
        for (path, text) in SHIPPED {
            let mut packages = 0;
            for line in text.lines().filter(|line| !line.starts_with('#')) {
                let mut words = line.split_whitespace();
                let pin = words.next().unwrap_or_default();
                let (name, version) = pin
                    .split_once("==")
                    .unwrap_or_else(|| panic!("{path}: `{line}` pins no version. {fix}"));
                assert!(!name.is_empty() && !version.is_empty(), "{path}: `{line}`");
                let hashes: Vec<&str> = words.collect();
                assert!(!hashes.is_empty(), "{path}: `{line}` has no hash. {fix}");
                for hash in hashes {
                    let hex = hash.strip_prefix("--hash=sha256:").unwrap_or_else(|| {
                        panic!("{path}: `{hash}` is not --hash=sha256:<hex>. {fix}")
                    });
                    assert!(
                        hex.len() == 64 && hex.bytes().all(|byte| byte.is_ascii_hexdigit()),
                        "{path}: `{hash}` is not a sha256. {fix}"
                    );
                }
                packages += 1;
            }
            let lock = shipped_named(&format!("relax-build/locks/{path}")).unwrap();
            let pins = lock.pins();
            assert_eq!(pins.len(), packages);
            let expected = if path.ends_with("toolchain.txt") {
                requirements()
            } else if path.ends_with("tracker.txt") {
                vec![format!("tornado=={TORNADO_VERSION}")]
            } else {
                vec![format!("torch=={TORCH_VERSION}")]
            };
            for requirement in expected {
                assert!(
                    pins.contains(&requirement.as_str()),
                    "{path} does not pin {requirement} (versions.rs does). {fix}"
                );
            }
        }
        for tvm in [
            format!("apache-tvm=={TVM_VERSION}"),
            format!("apache-tvm-ffi=={TVM_FFI_VERSION}"),
        ] {
            assert!(requirements().contains(&tvm), "{tvm}");
        }
        // The platforms the issue asks for have locks.
        for platform in ["linux-x86_64", "linux-aarch64"] {
            assert!(
                SHIPPED
                    .iter()
                    .any(|(path, _)| path.starts_with(&format!("{platform}/cp311/"))),
                "{platform}"
            );
        }
    }

    #[test]
    fn a_missing_lock_names_the_platform_and_what_is_supported() {
        let error = shipped(Kind::Toolchain, "cp39").unwrap_err();
        assert!(
            error.contains(&format!("no hash lock for {} with CPython 3.9", platform())),
            "{error}"
        );
        assert!(error.contains("linux-x86_64 with CPython 3.11"), "{error}");
        assert!(!error.contains("torch"), "{error}");
    }

    #[test]
    fn pips_hash_report_is_parsed() {
        let stderr = "\
Collecting six==1.16.0 (from -r lock.txt (line 1))
ERROR: THESE PACKAGES DO NOT MATCH THE HASHES FROM THE REQUIREMENTS FILE. If you have updated the package versions, please update the hashes. Otherwise, examine the package contents carefully; someone may have tampered with them.
    six==1.16.0 from https://files.pythonhosted.org/packages/d9/5a/six-1.16.0-py2.py3-none-any.whl (from -r lock.txt (line 1)):
        Expected sha256 0000
                     or 1111
             Got        8abb
    onnx==1.23.2 from https://example.org/onnx.whl:
        Expected sha256 2222
             Got        3333

";
        let mismatches = hash_mismatches(stderr);
        assert_eq!(
            mismatches,
            vec![
                HashMismatch {
                    package: "six==1.16.0".into(),
                    url: "https://files.pythonhosted.org/packages/d9/5a/six-1.16.0-py2.py3-none-any.whl".into(),
                    expected: vec!["0000".into(), "1111".into()],
                    got: "8abb".into(),
                },
                HashMismatch {
                    package: "onnx==1.23.2".into(),
                    url: "https://example.org/onnx.whl".into(),
                    expected: vec!["2222".into()],
                    got: "3333".into(),
                },
            ]
        );
        assert!(hash_mismatches("ERROR: No matching distribution found for six").is_empty());
    }
}
