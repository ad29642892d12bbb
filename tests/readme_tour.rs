//! The README's tour app, built from the README's own text: its files (each code block
//! after a `<!-- file: PATH -->` line), run, print the README's output, natively and,
//! following the README's cross section outside this repository (whose own
//! `.cargo/config.toml` would otherwise hide a missing step), as an aarch64 bundle under
//! qemu; and the sample manifest error is the one the build prints for a misspelled key.
//! The README cannot drift from what the crates do.

use std::path::Path;

use relax_cargo_tests::{
    assert_success, cargo, cargo_relax, run_under_qemu, stderr, stdout, workspace_root,
};

/// The code block that follows `marker` (a line of its own) in `text`, and the rest.
fn block_after<'a>(text: &'a str, marker: &str) -> Option<(&'a str, &'a str)> {
    let start = text.find(marker)? + marker.len();
    let after = &text[start..];
    let open = after.find("```")?;
    let body_start = open + after[open..].find('\n')? + 1;
    let body_end = body_start + after[body_start..].find("\n```")? + 1;
    Some((&after[body_start..body_end], &after[body_end..]))
}

/// Every `<!-- file: PATH -->` block of the README, in order.
fn tour_files(readme: &str) -> Vec<(String, String)> {
    let mut files = Vec::new();
    let mut rest = readme;
    while let Some(position) = rest.find("<!-- file: ") {
        let line_end = position + rest[position..].find("-->").expect("a closed marker");
        let path = rest[position + "<!-- file: ".len()..line_end]
            .trim()
            .to_string();
        let (body, after) =
            block_after(&rest[position..], "-->").expect("a code block after the marker");
        files.push((path, body.to_string()));
        rest = after;
    }
    files
}

/// The registry dependencies of the tour, pointed at this workspace's crates.
fn with_path_dependencies(manifest: &str) -> String {
    let root = workspace_root();
    let replaced = manifest
        .replace(
            r#"relax-build = "0.1""#,
            &format!("relax-build = {{ path = {:?} }}", root.join("relax-build")),
        )
        .replace(
            r#"relax-runtime = "0.1""#,
            &format!(
                "relax-runtime = {{ path = {:?} }}",
                root.join("relax-runtime")
            ),
        );
    assert_ne!(
        replaced, manifest,
        "the tour's Cargo.toml names relax-build and relax-runtime as \"0.1\""
    );
    format!("{replaced}\n[workspace]\n")
}

fn write_app(dir: &Path, files: &[(String, String)]) {
    for (path, body) in files {
        let path = dir.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let body = if path.ends_with("Cargo.toml") {
            with_path_dependencies(body)
        } else {
            body.clone()
        };
        std::fs::write(path, body).unwrap();
    }
}

#[test]
fn the_readme_tour_app_builds_and_prints_what_the_readme_says() {
    let readme = std::fs::read_to_string(workspace_root().join("README.md")).unwrap();
    let files = tour_files(&readme);
    let paths: Vec<&str> = files.iter().map(|(path, _)| path.as_str()).collect();
    assert_eq!(
        paths,
        ["Cargo.toml", "models/softmax.py", "build.rs", "src/main.rs"]
    );
    let (expected, _) = block_after(&readme, "<!-- output -->").expect("the tour's output block");

    let temp = tempfile::tempdir().unwrap();
    let app = temp.path().join("tour");
    write_app(&app, &files);
    let run = cargo(&app, &["run", "--quiet"], &[]);
    assert_success(&run, "cargo run of the README's tour app");
    assert_eq!(stdout(&run), expected);

    // The cross section, followed for this app: its .cargo/config.toml, the release
    // build, `cargo relax bundle`, and the bundle run under qemu.
    let (config, _) =
        block_after(&readme, "<!-- cross: .cargo/config.toml -->").expect("the cross config block");
    std::fs::create_dir_all(app.join(".cargo")).unwrap();
    std::fs::write(app.join(".cargo/config.toml"), config).unwrap();
    let target = "aarch64-unknown-linux-gnu";
    let build = cargo(
        &app,
        &["build", "--quiet", "--release", "--target", target],
        &[],
    );
    assert_success(&build, "the README's cross build of the tour app");
    let manifest = app.join("Cargo.toml");
    let bundle = cargo_relax(
        &[
            "bundle",
            "--release",
            "--target",
            target,
            "--manifest-path",
            manifest.to_str().unwrap(),
        ],
        &[],
    );
    assert_success(&bundle, "cargo relax bundle of the tour app");
    let bundled = app.join("dist").join(format!("tour-{target}"));
    let emulated = run_under_qemu(&bundled.join("tour"), &[], &bundled);
    assert_success(&emulated, "the bundled aarch64 tour app under qemu");
    assert_eq!(stdout(&emulated), expected);

    // The sample manifest error, for the key misspelled as the README shows.
    let text = std::fs::read_to_string(&manifest).unwrap();
    std::fs::write(
        &manifest,
        text.replace("inputs.forward =", "input.forward ="),
    )
    .unwrap();
    let build = cargo(&app, &["build", "--quiet"], &[]);
    assert!(!build.status.success(), "a misspelled key fails the build");
    let sample = readme
        .lines()
        .find(|line| line.starts_with("error: relax-build: .../tour/Cargo.toml: "))
        .expect("the README's sample manifest error");
    let message = sample.trim_start_matches("error: relax-build: .../tour/Cargo.toml: ");
    assert!(
        stderr(&build).contains(message),
        "the build says:\n{}\nthe README says:\n{message}",
        stderr(&build)
    );
}
