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
