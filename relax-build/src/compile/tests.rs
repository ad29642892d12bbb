//! Every failure kind the driver reports becomes an error on the right manifest key.

use super::*;
use crate::driver::UnsupportedOperator;

fn model(dir: &Path, source: &str) -> Model {
    std::fs::write(dir.join(source), b"x").unwrap();
    let text = format!(
        "[package.metadata.relax.models.m]\nsource = \"{source}\"\n{}",
        if source.ends_with(".py") {
            "entry = \"M\"\n"
        } else {
            ""
        }
    );
    crate::metadata::parse(&text, dir, &dir.join("Cargo.toml"))
        .unwrap()
        .models
        .remove(0)
}

fn failure(kind: FailureKind, subject: Option<&str>) -> Failure {
    Failure {
        kind,
        message: "the driver's message".to_string(),
        detail: "detail".to_string(),
        subject: subject.map(str::to_string),
        operators: Vec::new(),
    }
}

fn target(cross: Option<&CrossCompiler>) -> CompileTarget<'_> {
    CompileTarget {
        cargo: "aarch64-unknown-linux-gnu",
        tvm: serde_json::json!({"kind": "llvm"}),
        cross_compiler: cross,
        tuning_records: None,
        bf16_hardware: Bf16Hardware::default(),
    }
}

/// The key each kind is reported on (`None`: the model, no key).
#[test]
fn each_failure_kind_names_its_manifest_key() {
    let dir = tempfile::tempdir().unwrap();
    let python = model(dir.path(), "m.py");
    let onnx = model(dir.path(), "m.onnx");
    let cases: &[(FailureKind, &Model, Option<&str>, Option<&str>)] = &[
        (FailureKind::Protocol, &python, None, None),
        (FailureKind::TvmVersion, &python, None, None),
        (FailureKind::Source, &python, None, Some("source")),
        (FailureKind::SourceException, &python, None, Some("source")),
        (FailureKind::SourceExit, &python, None, Some("source")),
        (FailureKind::EntryMissing, &python, None, Some("entry")),
        (FailureKind::EntryType, &python, None, Some("entry")),
        (FailureKind::EntryConstruct, &python, None, Some("entry")),
        (FailureKind::InputsMissing, &python, None, Some("inputs")),
        (
            FailureKind::InputsMethod,
            &python,
            Some("backward"),
            Some("inputs.backward"),
        ),
        (FailureKind::InputsUnused, &python, None, Some("inputs")),
        (FailureKind::Export, &python, None, Some("inputs")),
        (FailureKind::NoFunctions, &python, None, Some("entry")),
        (FailureKind::OnnxInvalid, &onnx, None, Some("source")),
        (FailureKind::OnnxImport, &onnx, None, Some("source")),
        (FailureKind::OnnxPrepare, &onnx, None, Some("onnx_prepare")),
        (
            FailureKind::InputsContradiction,
            &onnx,
            None,
            Some("inputs.main"),
        ),
        (
            FailureKind::UnsupportedType,
            &python,
            Some("argument `x` of `f`"),
            Some("inputs"),
        ),
        (
            FailureKind::UnsupportedType,
            &python,
            Some("the output of `f`"),
            None,
        ),
        (FailureKind::Pipeline, &python, None, Some("pipeline")),
        (FailureKind::TuningRecords, &python, None, Some("tune")),
        (FailureKind::TuningSymbolic, &python, None, Some("inputs")),
        (FailureKind::Compile, &python, None, None),
        (FailureKind::Link, &python, None, None),
        (FailureKind::Internal, &python, None, None),
    ];
    for (kind, model, subject, key) in cases {
        let error = describe_failure(model, &target(None), failure(*kind, *subject));
        let Error::Model {
            key: found,
            message,
            ..
        } = &error
        else {
            panic!("{kind:?}: not a model error: {error}")
        };
        assert_eq!(
            found.as_deref(),
            key.map(|key| model.key(key)).as_deref(),
            "{kind:?}"
        );
        assert!(
            message.contains("the driver's message") || *kind == FailureKind::Link,
            "{kind:?}: {message}"
        );
    }
}

#[test]
fn unsupported_operators_are_listed_together() {
    let dir = tempfile::tempdir().unwrap();
    let onnx = model(dir.path(), "m.onnx");
    let mut report = failure(FailureKind::OnnxUnsupported, None);
    report.operators = ["Det", "Unique"]
        .iter()
        .map(|op| UnsupportedOperator {
            op_type: op.to_string(),
            count: 1,
            nodes: vec![format!("{op}_0")],
            reason: "unsupported".to_string(),
        })
        .collect();
    let error = describe_failure(&onnx, &target(None), report);
    let Error::UnsupportedOperator { operators, key, .. } = &error else {
        panic!("{error}")
    };
    assert_eq!(operators, &["Det", "Unique"]);
    assert_eq!(key, &onnx.key("source"));
}

#[test]
fn a_link_failure_names_the_cross_compiler_and_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let python = model(dir.path(), "m.py");
    let compiler = CrossCompiler {
        command: "g++".to_string(),
        origin: "CXX_aarch64-unknown-linux-gnu".to_string(),
    };
    let error = describe_failure(
        &python,
        &target(Some(&compiler)),
        failure(FailureKind::Link, None),
    );
    let text = error.to_string();
    assert!(text.contains("linking the library for aarch64-unknown-linux-gnu with `g++` (from CXX_aarch64-unknown-linux-gnu) failed"), "{text}");
    assert!(
        text.contains("apt-get install g++-aarch64-linux-gnu"),
        "{text}"
    );
}
