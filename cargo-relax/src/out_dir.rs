//! The `OUT_DIR` of a package's build script, as Cargo reports it: `cargo relax tune`
//! reads a model whose source the build script generates (`$OUT_DIR/...`) from there.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Runs the build script of the package `package_id` (of the manifest `manifest_path`)
/// with `cargo check --message-format=json`, Cargo's progress shown on stderr, and
/// returns the `OUT_DIR` that Cargo reports for it (`build-script-executed`).
pub fn build_script_out_dir(manifest_path: &Path, package_id: &str) -> Result<PathBuf, String> {
    let arguments = [
        "check",
        "--message-format=json-render-diagnostics",
        "--manifest-path",
        &manifest_path.to_string_lossy(),
    ]
    .map(str::to_string);
    let shown = format!("cargo {}", arguments.join(" "));
    let mut command = crate::cargo::command();
    command.args(&arguments);
    out_dir_reported(command, &shown, package_id)
}

/// Runs `command` (a `cargo check` with JSON messages, shown as `shown` in errors), its
/// stderr shown, and returns the `OUT_DIR` it reports for the build script of
/// `package_id`.
fn out_dir_reported(
    mut command: Command,
    shown: &str,
    package_id: &str,
) -> Result<PathBuf, String> {
    let mut child = command
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|error| format!("running `{shown}`: {error}"))?;
    let stdout = child.stdout.take().expect("stdout is piped");
    let mut out_dir = None;
    for line in BufReader::new(stdout).lines() {
        let line = line.map_err(|error| format!("reading the output of `{shown}`: {error}"))?;
        if let Some(found) = out_dir_in_message(&line, package_id) {
            out_dir = Some(found);
        }
    }
    let status = child
        .wait()
        .map_err(|error| format!("waiting for `{shown}`: {error}"))?;
    match out_dir {
        Some(out_dir) if status.success() => Ok(out_dir),
        _ if !status.success() => Err(format!(
            "`{shown}` failed ({status}; its errors are above): the package's build script must \
             run to write the models it generates; fix the build, then tune again"
        )),
        _ => Err(format!(
            "`{shown}` did not run a build script of package `{package_id}`: a `$OUT_DIR/...` \
             source needs a build.rs that writes the file before calling relax-build"
        )),
    }
}

/// The `out_dir` of a `build-script-executed` message of Cargo's for `package_id`.
fn out_dir_in_message(line: &str, package_id: &str) -> Option<PathBuf> {
    let message: serde_json::Value = serde_json::from_str(line).ok()?;
    if message["reason"] != "build-script-executed" || message["package_id"] != package_id {
        return None;
    }
    message["out_dir"].as_str().map(PathBuf::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "path+file:///work/app#0.1.0";

    #[test]
    fn the_out_dir_of_the_package_s_build_script_is_taken() {
        let line = format!(
            r#"{{"reason":"build-script-executed","package_id":"{ID}","linked_libs":[],"out_dir":"/t/debug/build/app-1/out"}}"#
        );
        assert_eq!(
            out_dir_in_message(&line, ID),
            Some(PathBuf::from("/t/debug/build/app-1/out"))
        );
    }

    #[test]
    fn other_packages_other_messages_and_other_lines_are_not() {
        let dependency = r#"{"reason":"build-script-executed","package_id":"registry+https://github.com/rust-lang/crates.io-index#libc@0.2.1","out_dir":"/t/libc/out"}"#;
        let artifact = format!(r#"{{"reason":"compiler-artifact","package_id":"{ID}"}}"#);
        for line in [dependency, &artifact, "warning: not JSON", ""] {
            assert_eq!(out_dir_in_message(line, ID), None, "{line}");
        }
    }

    /// A shell that prints `lines` on stdout, then exits with `status`: a stand-in for
    /// Cargo.
    fn cargo_printing(lines: &[&str], status: i32) -> Command {
        let mut script = String::new();
        for line in lines {
            script.push_str(&format!("printf '%s\\n' '{line}'\n"));
        }
        script.push_str(&format!("exit {status}\n"));
        let mut command = Command::new("sh");
        command.args(["-c", &script]);
        command
    }

    #[test]
    fn the_reported_out_dir_is_returned_and_a_failed_or_missing_build_script_explained() {
        let ours = format!(
            r#"{{"reason":"build-script-executed","package_id":"{ID}","out_dir":"/t/app/out"}}"#
        );
        let theirs = r#"{"reason":"build-script-executed","package_id":"registry+x#libc@0.2.1","out_dir":"/t/libc/out"}"#;
        let shown = "cargo check --manifest-path app/Cargo.toml";
        assert_eq!(
            out_dir_reported(cargo_printing(&[theirs, &ours], 0), shown, ID),
            Ok(PathBuf::from("/t/app/out"))
        );
        // The check failed: even with the script's message, the build is what to fix.
        let failed = out_dir_reported(cargo_printing(&[&ours], 101), shown, ID).unwrap_err();
        assert!(
            failed.starts_with(&format!("`{shown}` failed (exit status: 101"))
                && failed.contains("fix the build, then tune again"),
            "{failed}"
        );
        // It passed, but no build script of the package ran.
        let missing = out_dir_reported(cargo_printing(&[theirs], 0), shown, ID).unwrap_err();
        assert!(
            missing.contains(&format!("did not run a build script of package `{ID}`"))
                && missing.contains("needs a build.rs that writes the file"),
            "{missing}"
        );
    }
}
