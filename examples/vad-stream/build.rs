//! Fetches silero-vad's ONNX graph from its pinned wheel into `OUT_DIR/models/` (where
//! the manifest's `source = "$OUT_DIR/models/silero_vad.onnx"` names it), then compiles
//! the models.

use std::path::{Path, PathBuf};

use relax_build::tooling::{self, PackageFileSpec};
use relax_build::Config;

/// The wheel that ships the model.
const MODEL_PACKAGE: &str = "silero-vad==6.2.3";
/// The model's path inside that wheel.
const MODEL_PATH: &str = "silero_vad/data/silero_vad.onnx";
/// The model file's sha256 (of the file, not of the wheel).
const MODEL_SHA256: &str = "1a153a22f4509e292a94e67d6f9b85e8deb25b4988682b7e174c65279d8788e3";

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    let out_dir =
        PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR is set for build scripts"));
    let manifest_dir =
        PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR is set"));
    let manifest = manifest_dir.join("Cargo.toml");
    // Fetched through relax-build's cache exactly as a manifest's fetched `files` are
    // (wheel only, sha256 checked before use; offline, a prepared or cached copy).
    let fetched = tooling::fetch_package_file(
        &Config::new(),
        &PackageFileSpec {
            declared_in: &manifest,
            key: "package.metadata.relax.models.silero_vad.source",
            package: MODEL_PACKAGE,
            path: MODEL_PATH,
            member: None,
            sha256: MODEL_SHA256,
        },
    )
    .unwrap_or_else(|error| fail(&format!("fetching silero-vad's model: {error}")));
    let destination = out_dir.join("models/silero_vad.onnx");
    copy_if_changed(&fetched, &destination).unwrap_or_else(|error| {
        fail(&format!(
            "copying {} to {}: {error}",
            fetched.display(),
            destination.display()
        ))
    });
    relax_build::compile_models();
}

/// Copies `source` to `destination` unless it holds the same bytes already: rewriting an
/// unchanged model would only change its modification time. Written beside it and
/// renamed, so a build stopped halfway leaves no truncated model.
fn copy_if_changed(source: &Path, destination: &Path) -> std::io::Result<()> {
    let bytes = std::fs::read(source)?;
    if std::fs::read(destination).is_ok_and(|existing| existing == bytes) {
        return Ok(());
    }
    let folder = destination
        .parent()
        .expect("the destination is a file in a folder");
    std::fs::create_dir_all(folder)?;
    let partial = destination.with_extension("onnx.partial");
    std::fs::write(&partial, &bytes)?;
    std::fs::rename(&partial, destination)
}

/// Stops the build with `message`, as relax-build reports its own errors.
fn fail(message: &str) -> ! {
    eprintln!("error: vad-stream's build script: {message}");
    std::process::exit(1);
}
