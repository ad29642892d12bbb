use super::*;

#[test]
fn identifiers_are_snake_case() {
    assert_eq!(identifier("forward"), "forward");
    assert_eq!(identifier("splitSum"), "split_sum");
    assert_eq!(identifier("fc1.weight"), "fc1_weight");
    assert_eq!(identifier("Input-0"), "input_0");
    assert_eq!(identifier("0x"), "_0x");
}

#[test]
fn keywords_become_usable_identifiers() {
    assert_eq!(raw("type"), "r#type");
    assert_eq!(raw("x"), "x");
    // `r#self`, `r#super` and `r#crate` are not identifiers.
    assert_eq!(raw("self"), "self_");
    assert_eq!(raw("super"), "super_");
    assert_eq!(raw("crate"), "crate_");
}

#[test]
fn reserved_method_names_are_refused() {
    let error = method_name("m", "load").unwrap_err();
    assert_eq!(
        error.to_string(),
        "model `m`: function `load`: `load` is a method every generated Model has; rename the function"
    );
    // `vm` was a field of the generated Model; now it is an ordinary method name.
    assert_eq!(method_name("m", "vm").unwrap(), "vm");
}

#[test]
fn targets_read_as_words() {
    assert_eq!(
        readable_target(
            r#"{"kind":"llvm","tag":"","keys":["cpu"],"mtriple":"aarch64-unknown-linux-gnu","mattr":["+neon"]}"#
        ),
        "llvm, mtriple aarch64-unknown-linux-gnu, mattr +neon"
    );
}

/// The generated code for the TVMScript fixture, against a committed golden file.
/// Re-bless with `RELAX_BLESS=1 cargo test -p relax-build golden`.
#[test]
fn golden_generated_code() {
    let data = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden");
    let json = std::fs::read_to_string(data.join("pair.signature.json")).unwrap();
    let signature: Signature = serde_json::from_str(&json).unwrap();
    let json = serde_json::from_str::<serde_json::Value>(&json)
        .unwrap()
        .to_string();
    let generated = generate(
        &signature,
        &Embedded {
            origin: "`models/pair.py`, entry `Pair`",
            cargo_target: "x86_64-unknown-linux-gnu",
            signature_json: &json,
            library: "relax/pair/library.so",
            library_sha256: "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
            weights: None,
            files: &[("labels".to_string(), "relax/pair/files/labels".to_string())],
            tvm_version: "0.27.0.post1",
            runtime_hint: Some("build/pair-0123/out/relax/runtime"),
            state: &[],
        },
    )
    .unwrap();
    let golden_path = data.join("pair.rs");
    if std::env::var_os("RELAX_BLESS").is_some() {
        std::fs::write(&golden_path, &generated).unwrap();
    }
    let golden = std::fs::read_to_string(&golden_path).unwrap_or_default();
    assert!(
        generated == golden,
        "generated code differs from {}; if the change is intended, re-bless with \
         `RELAX_BLESS=1 cargo test -p relax-build golden`\n--- generated ---\n{generated}",
        golden_path.display()
    );
}

/// The `relax_runtime` items generated code uses, with the same signatures, so that a
/// generated module compiles without TVM.
const RUNTIME_STUB: &str = r#"
pub type Result<T> = std::result::Result<T, ()>;
pub struct Device;
impl Device { pub fn cpu() -> Device { Device } }
pub struct Tensor;
pub struct Session;
impl Session {
    pub fn load_embedded(_: &'static __private::EmbeddedModel, _: Device) -> Result<Session> { Err(()) }
    pub fn call_single_by_index(&self, _: usize, _: &[&Tensor]) -> Result<Tensor> { Err(()) }
    pub fn call_tuple_by_index<const N: usize>(&self, _: usize, _: &[&Tensor]) -> Result<[Tensor; N]> { Err(()) }
}
pub mod __private {
    pub struct EmbeddedParts {
        pub name: &'static str,
        pub cargo_target: &'static str,
        pub tvm_version: &'static str,
        pub runtime_hint: Option<&'static str>,
        pub signature_json: &'static str,
        pub library: &'static [u8],
        pub library_sha256: &'static str,
        pub weights: Option<&'static [u8]>,
    }
    pub struct EmbeddedModel(pub EmbeddedParts);
    impl EmbeddedModel {
        pub const unsafe fn new(parts: EmbeddedParts) -> EmbeddedModel { EmbeddedModel(parts) }
    }
}
"#;

/// Compiles `generated` (with `rustc -D warnings`) as a module of a crate against
/// [`RUNTIME_STUB`]; panics with rustc's output when it does not compile.
fn compile_generated(generated: &str, embedded_files: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("out");
    for file in embedded_files {
        let path = out_dir.join(file);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, b"bytes").unwrap();
    }
    std::fs::write(dir.path().join("runtime.rs"), RUNTIME_STUB).unwrap();
    std::fs::write(dir.path().join("generated.rs"), generated).unwrap();
    std::fs::write(
        dir.path().join("app.rs"),
        "#![deny(warnings)]\ninclude!(\"generated.rs\");\n",
    )
    .unwrap();
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let run = |arguments: &[&str]| {
        let output = std::process::Command::new(&rustc)
            .args(["--edition", "2021", "--crate-type", "lib", "-D", "warnings"])
            .args(arguments)
            .arg("--out-dir")
            .arg(dir.path())
            .current_dir(dir.path())
            .env("OUT_DIR", &out_dir)
            .output()
            .expect("rustc runs (it built this test)");
        assert!(
            output.status.success(),
            "rustc {arguments:?} failed:\n{}\n--- generated ---\n{generated}",
            String::from_utf8_lossy(&output.stderr)
        );
    };
    run(&["--crate-name", "relax_runtime", "runtime.rs"]);
    run(&[
        "--crate-name",
        "app",
        "--extern",
        "relax_runtime=librelax_runtime.rlib",
        "app.rs",
    ]);
}

/// A signature whose names hold what could end a doc comment, a code span or a line.
const HOSTILE: &str = r#"{
  "model": "hostile",
  "tvm_version": "0.27\npub fn injected_version() {}",
  "target": "{\"kind\": \"llvm\", \"mcpu\": \"x\\n/// `*/` \\u202e\"}",
  "functions": [
    {
      "name": "forward\npub fn injected() {}\n/// */ `tick` \"quoted\" ünïcode",
      "inputs": [
        {"name": "x\n#![injected_attribute]", "dtype": "float32", "shape": ["n\n}", 4]},
        {"name": "*/ /* `b` \"c\" \\", "dtype": "float32\npub fn injected_dtype() {}", "shape": [1]},
        {"name": "ünïcode", "dtype": "int8", "shape": []},
        {"name": "\u202ertl\u2028", "dtype": "int8", "shape": ["m|`k`"]}
      ],
      "weights": [],
      "outputs": [{"dtype": "float32", "shape": ["n\n}", 4]}],
      "returns_tuple": true
    },
    {
      "name": "r\u00e9sum\u00e9\u0000",
      "inputs": [{"name": "self", "dtype": "float32", "shape": [2]}],
      "weights": [],
      "outputs": [{"dtype": "float32", "shape": [2]}],
      "returns_tuple": false
    }
  ]
}"#;

fn generate_hostile(origin: &str) -> String {
    let signature: Signature = serde_json::from_str(HOSTILE).unwrap();
    let json = serde_json::from_str::<serde_json::Value>(HOSTILE)
        .unwrap()
        .to_string();
    generate(
        &signature,
        &Embedded {
            origin,
            cargo_target: "x86_64-unknown-linux-gnu",
            signature_json: &json,
            library: "relax/hostile/library.so",
            library_sha256: "00",
            weights: Some("relax/hostile/weights.safetensors"),
            files: &[],
            tvm_version: "0.27.0.post1",
            runtime_hint: Some("a\"b\nc"),
            state: &[],
        },
    )
    .unwrap()
}

/// Names from a signature (newlines, `*/`, backticks, quotes, text-direction marks,
/// non-ASCII) stay inside their doc comments and code spans, and the module compiles.
#[test]
fn hostile_signature_names_stay_in_their_comments_and_compile() {
    let origin = format!(
        "{}, entry {}",
        code_span("models/a\nfn injected_origin() {}.py"),
        code_span("Entry`\r")
    );
    let generated = generate_hostile(&origin);
    for line in generated.lines() {
        let code = line.trim_start();
        assert!(
            !["pub fn injected", "fn injected", "#![injected", "/// */"]
                .iter()
                .any(|payload| code.starts_with(payload)),
            "a name escaped its comment: {line:?}"
        );
        assert!(
            !line.contains(['\u{202e}', '\u{2028}', '\r', '\0']),
            "an invisible character was written raw: {line:?}"
        );
        if code.starts_with("///") && code.contains("forward") {
            // Every backtick of a doc line opens or closes a code span of relax-build's.
            assert_eq!(code.matches('`').count() % 2, 0, "{line:?}");
        }
    }
    assert!(generated.contains(
        "/// `forward\\npub fn injected() {}\\n/// */ \\u{60}tick\\u{60} \"quoted\" ünïcode("
    ));
    // Identifiers are mapped deterministically from the sanitised names.
    assert!(generated.contains(
        "pub fn forward_pub_fn_injected_tick_quoted_n_code(&self, x_injected_attribute: &Tensor, b_c: &Tensor, n_code: &Tensor, rtl: &Tensor)"
    ));
    assert!(generated.contains("pub fn r_sum(&self, self_: &Tensor)"));
    compile_generated(
        &generated,
        &[
            "relax/hostile/library.so",
            "relax/hostile/weights.safetensors",
        ],
    );
}

#[test]
fn the_golden_module_compiles() {
    let data = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden");
    let golden = std::fs::read_to_string(data.join("pair.rs")).unwrap();
    compile_generated(
        &golden,
        &["relax/pair/library.so", "relax/pair/files/labels"],
    );
}

#[test]
fn a_signature_naming_another_kind_of_model_is_refused() {
    let hostile = HOSTILE.replace(r#""model": "hostile""#, r#""model": "m {} fn x""#);
    let signature: Signature = serde_json::from_str(&hostile).unwrap();
    let error = generate(
        &signature,
        &Embedded {
            origin: "`m.py`",
            cargo_target: "x86_64-unknown-linux-gnu",
            signature_json: "{}",
            library: "relax/m/library.so",
            library_sha256: "00",
            weights: None,
            files: &[],
            tvm_version: "0.27.0.post1",
            runtime_hint: None,
            state: &[],
        },
    )
    .unwrap_err();
    assert_eq!(
        error.to_string(),
        "model `m {} fn x`: the signature names the model with something that is not a Rust \
         module name (lowercase letters, digits and `_`); the driver echoes the manifest's model \
         name, so the signature was not written by relax-build's driver"
    );
}

#[test]
fn escaped_text_keeps_printable_characters() {
    assert_eq!(escape_text("x: float32[n, 4]"), "x: float32[n, 4]");
    assert_eq!(escape_text("ünï \"q\" 'a'"), "ünï \"q\" 'a'");
    assert_eq!(escape_text("a\nb`c\\"), "a\\nb\\u{60}c\\\\");
    assert_eq!(escape_text("\u{202e}x\u{0}"), "\\u{202e}x\\0");
    assert_eq!(code_span("*/"), "`*/`");
}

/// A VAD-shaped ONNX signature: `state` in, `stateN` out.
const STREAMED: &str = r#"{
  "model": "vad", "tvm_version": "0.27.0.post1", "target": "{\"kind\":\"llvm\"}",
  "functions": [{
    "name": "main",
    "inputs": [
      {"name": "input", "dtype": "float32", "shape": [1, 576]},
      {"name": "state", "dtype": "float32", "shape": [2, 1, 128]},
      {"name": "sr", "dtype": "int64", "shape": []}
    ],
    "weights": [],
    "outputs": [
      {"name": "output", "dtype": "float32", "shape": [1, 1]},
      {"name": "stateN", "dtype": "float32", "shape": [2, 1, 128]}
    ],
    "returns_tuple": true
  }]
}"#;

fn generate_streamed(pairs: &[(&str, StateOutput)]) -> Result<String> {
    let signature: Signature = serde_json::from_str(STREAMED).unwrap();
    let state = [FunctionState {
        function: "main".to_string(),
        pairs: pairs
            .iter()
            .map(|(input, output)| (input.to_string(), output.clone()))
            .collect(),
    }];
    generate(
        &signature,
        &Embedded {
            origin: "`vad.onnx`",
            cargo_target: "x86_64-unknown-linux-gnu",
            signature_json: "{}",
            library: "relax/vad/library.so",
            library_sha256: "00",
            weights: None,
            files: &[],
            tvm_version: "0.27.0.post1",
            runtime_hint: None,
            state: &state,
        },
    )
}

#[test]
fn declared_state_makes_a_stream_whose_push_takes_the_other_inputs() {
    let by_name = generate_streamed(&[("state", StateOutput::Name("stateN".to_string()))]).unwrap();
    assert!(by_name.contains("pub fn stream(&self) -> Result<Stream> {"));
    assert!(by_name.contains("self.session.stream_by_index(0, &[(1, 1)])"));
    assert!(
        by_name.contains("pub fn push(&mut self, input: &Tensor, sr: &Tensor) -> Result<Tensor> {")
    );
    assert!(by_name.contains("let [output0] = self.inner.push_array::<1>(&[input, sr])?;"));
    // By position, the same code.
    let by_position = generate_streamed(&[("state", StateOutput::Position(1))]).unwrap();
    assert_eq!(by_name, by_position);
}

#[test]
fn a_state_that_does_not_fit_names_the_key_and_what_is_there() {
    let message = |pairs: &[(&str, StateOutput)]| generate_streamed(pairs).unwrap_err().to_string();
    let key = "package.metadata.relax.models.vad.state.main";
    let wrong_output = message(&[("state", StateOutput::Name("state_n".to_string()))]);
    assert!(wrong_output.contains(key), "{wrong_output}");
    assert!(
        wrong_output.contains("has no output named `state_n`; its outputs are 0 (`output: float32[1, 1]`), 1 (`stateN: float32[2, 1, 128]`)"),
        "{wrong_output}"
    );
    let wrong_input = message(&[("hidden", StateOutput::Position(1))]);
    assert!(
        wrong_input.contains("has no input `hidden`; its inputs are `input`, `state`, `sr`"),
        "{wrong_input}"
    );
    let wrong_shape = message(&[("state", StateOutput::Position(0))]);
    assert!(
        wrong_shape
            .contains("output 0 (`float32[1, 1]`) cannot be input `state` (`float32[2, 1, 128]`)"),
        "{wrong_shape}"
    );
    let out_of_range = message(&[("state", StateOutput::Position(2))]);
    assert!(
        out_of_range.contains("has 2 outputs, so none at position 2"),
        "{out_of_range}"
    );
    let twice = message(&[
        ("state", StateOutput::Position(1)),
        ("input", StateOutput::Position(1)),
    ]);
    assert!(twice.contains("is named twice"), "{twice}");
}
