//! Generates ResNet-50 and the other image models (their random weights, 5 to 100 MB
//! each, are not committed) into OUT_DIR, ResNet-50 quantized by onnxruntime's static
//! quantizer (in the tests' venv, which has onnxruntime), torch_cnn.py's weights and its ONNX export
//! (with torch, which relax-build installs into its toolchain for PyTorch sources),
//! compiles the models, then writes the ONNX graph of MiniLM for onnxruntime from the
//! weights the `minilm` model fetched.

use std::path::{Path, PathBuf};
use std::process::Command;

use relax_build::tooling::{self, PackageFileSpec};
use relax_build::Config;

/// The models make_models.py generates: from onnx's light architectures (its
/// LIGHT_MODELS), the mobile ones it writes itself (MOBILE_MODELS) and the recurrent ones
/// (RECURRENT_MODELS).
const GENERATED_MODELS: [&str; 12] = [
    "resnet50",
    "densenet121",
    "inception_v1",
    "inception_v2",
    "shufflenet",
    "squeezenet",
    "mobilenet_v2",
    "efficientnet_b0",
    "mobilenet_v3",
    "ocr_det",
    "crnn",
    "gru",
];

fn main() {
    let out_dir =
        PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR is set for build scripts"));
    let here =
        PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR is set"));
    let script = here.join("models/make_models.py");
    println!("cargo::rerun-if-changed={}", script.display());
    let toolchain = tooling::toolchain(&Config::new())
        .unwrap_or_else(|error| panic!("relax-bench needs relax-build's toolchain: {error}"));
    // make_models.py exports torch_cnn with torch before relax-build (which would install
    // it on its own for that model) compiles the models; the other models need no torch.
    let with_torch = toolchain
        .with_torch(tooling::Cargo::BUILD_SCRIPT, "torch_cnn")
        .unwrap_or_else(|error| panic!("relax-bench needs torch for torch_cnn: {error}"));
    let models = out_dir.join("models");
    std::fs::create_dir_all(&models).expect("creating OUT_DIR/models");
    for name in GENERATED_MODELS {
        generate(
            || toolchain.command(),
            &script,
            &[name],
            &models.join(format!("{name}.onnx")),
        );
    }
    // onnxruntime's quantizer runs in the tests' venv, which has onnxruntime.
    let resnet50 = models.join("resnet50.onnx");
    generate(
        || Command::new(relax_cargo_tests::test_python()),
        &script,
        &["resnet50_int8", &resnet50.to_string_lossy()],
        &models.join("resnet50_int8.onnx"),
    );
    println!(
        "cargo::rerun-if-changed={}",
        here.join("models/torch_cnn.py").display()
    );
    generate(
        || with_torch.command(),
        &script,
        &[
            "torch_cnn",
            &models.join("torch_cnn.safetensors").to_string_lossy(),
        ],
        &models.join("torch_cnn.onnx"),
    );
    fetch_silero_vad(&here, &models);
    relax_build::compile_models();
    let weights = out_dir.join("relax/minilm/weights.safetensors");
    generate(
        || toolchain.command(),
        &script,
        &["minilm", &weights.to_string_lossy()],
        &models.join("minilm.onnx"),
    );
}

/// Runs `make_models.py <args> <output>` with the Python `python()` gives, unless `output`
/// was made by this version of the script (and of the model file `script` imports for it,
/// if any) from the same arguments.
fn generate(python: impl Fn() -> Command, script: &Path, args: &[&str], output: &Path) {
    let stamp = output.with_extension("stamp");
    let imported = script.with_file_name(format!("{}.py", args[0]));
    let version = format!(
        "{:?} {} {}",
        args,
        std::fs::read_to_string(script)
            .expect("reading make_models.py")
            .len(),
        std::fs::read_to_string(imported).map_or(0, |text| text.len())
    );
    if output.is_file() && std::fs::read_to_string(&stamp).ok().as_deref() == Some(version.as_str())
    {
        return;
    }
    let status = python()
        .arg(script)
        .args(args)
        .arg(output)
        .status()
        .expect("running make_models.py");
    assert!(status.success(), "make_models.py {args:?} failed");
    std::fs::write(&stamp, version).expect("writing the stamp");
}

/// silero-vad's 16 kHz ONNX export and its export without If (the `vad_chunk` rows;
/// tract loads only the latter), from the pinned wheel, sha256 checked, as a build
/// fetches a manifest's files.
fn fetch_silero_vad(here: &Path, models: &Path) {
    let manifest = here.join("Cargo.toml");
    let files = [
        (
            "silero_vad.onnx",
            "1a153a22f4509e292a94e67d6f9b85e8deb25b4988682b7e174c65279d8788e3",
        ),
        (
            "silero_vad_op18_ifless.onnx",
            "7671cd04b004e9076da0d4a7b1a5aec36adf161c39230c1cb94a4fd5db6bbd28",
        ),
    ];
    for (file, sha256) in files {
        let path = format!("silero_vad/data/{file}");
        let fetched = tooling::fetch_package_file(
            &Config::new(),
            &PackageFileSpec {
                declared_in: &manifest,
                key: "relax-bench's build.rs: silero-vad",
                package: "silero-vad==6.2.3",
                path: &path,
                member: None,
                sha256,
            },
        )
        .unwrap_or_else(|error| panic!("relax-bench needs silero-vad's {file}: {error}"));
        let destination = models.join(file);
        if std::fs::read(&destination).ok() != std::fs::read(&fetched).ok() {
            std::fs::copy(&fetched, &destination).expect("copying silero-vad's model into OUT_DIR");
        }
    }
}
