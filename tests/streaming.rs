//! Calls that carry state: the generated `stream()` of models whose manifest declares
//! `state` gives onnxruntime's results step by step (an LSTM's state, a cache that grows
//! from empty), says what is wrong when misused, and a steady-state call allocates no
//! tensor storage; the vad-stream example finds the speech segments onnxruntime finds.

use relax_build::tooling::{self, PackageFileSpec};
use relax_build::Config;
use relax_cargo_tests::{assert_success, run_fixture, run_release, test_python, workspace_root};
use serde_json::{json, Value};

/// The fixture's stream of `model` over `steps` calls against reference.py's
/// onnxruntime run of the same inputs, the state fed back alike.
fn stream_matches_onnxruntime(model: &str, steps: usize) {
    let ours: Value = serde_json::from_str(&run_fixture(
        "streaming",
        &["stream", model, &steps.to_string()],
    ))
    .unwrap();
    let request = json!({"model": model, "steps": ours["steps"]});
    let mut child = std::process::Command::new(test_python())
        .arg(workspace_root().join("fixtures/streaming/reference.py"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(request.to_string().as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert_success(&output, "fixtures/streaming/reference.py");
    let reference: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        ours["final_state_shape"], reference["final_state_shape"],
        "{model}"
    );
    let close = |what: &str, ours: &Value, theirs: &Value| {
        let ours: Vec<f64> = serde_json::from_value(ours.clone()).unwrap();
        let theirs: Vec<f64> = serde_json::from_value(theirs.clone()).unwrap();
        assert_eq!(ours.len(), theirs.len(), "{model} {what}");
        for (a, b) in ours.iter().zip(&theirs) {
            assert!(
                (a - b).abs() <= 1e-5 * (1.0 + b.abs()),
                "{model} {what}: {a} vs {b}"
            );
        }
    };
    for (step, (a, b)) in ours["outputs"]
        .as_array()
        .unwrap()
        .iter()
        .zip(reference["outputs"].as_array().unwrap())
        .enumerate()
    {
        close(&format!("output of step {step}"), a, b);
    }
    close(
        "final state",
        &ours["final_state"],
        &reference["final_state"],
    );
}

#[test]
fn a_recurrent_state_streams_as_onnxruntime_runs_it() {
    stream_matches_onnxruntime("lstm_state", 40);
}

#[test]
fn a_cache_that_grows_from_empty_streams_as_onnxruntime_runs_it() {
    stream_matches_onnxruntime("kv_cache", 7);
}

#[test]
fn a_misused_stream_says_what_is_wrong() {
    let expected = "\
same input, second call differs: true; after reset as the first: true
model `lstm_state`, function `main`, streamed with state: push takes 1 input(s) (chunk: the inputs that are not state), found 0
model `lstm_state`, function `main`, streamed with state: push takes 1 input(s) (chunk: the inputs that are not state), found 2
model `lstm_state`, function `main`, streamed with state: `chunk` is not a state input; the state inputs are: state
model `lstm_state`, function `main`, argument `state`: expected shape [2, 1, 32], found [1, 1, 32]
after a refused push the state is still the one set: Some([1, 1, 32])
model `lstm_state`, function `main`, streamed with state: it has no input `nope`; its inputs are: chunk, state
model `lstm_state`, function `main`, streamed with state: it has no output `nope`; its outputs are, by name where they have one and position: probability (0), next_state (1)
model `lstm_state`, function `main`, streamed with state: output 0 (float32[1, 1]) cannot be input `state` (float32[2, 1, 32]) of the next call
model `lstm_state`, function `main`, streamed with state: no state is declared: name at least one input and the output that feeds it
";
    assert_eq!(run_fixture("streaming", &["misuse"]), expected);
}

/// Counted by a replaced malloc and its kin (the fixture's counting.rs), over every
/// thread of the process: after warm-up, a static-shape call takes every tensor's
/// storage from the VM's pool. The small allocations that remain (TVM's VM frames and
/// tensor headers, a few dozen a call) are printed, not asserted.
#[test]
fn steady_state_calls_allocate_no_tensor_storage() {
    for model in ["lstm_state", "kws_cnn"] {
        let line = run_fixture("streaming", &["allocations", model, "200"]);
        eprint!("{line}");
        assert!(
            line.trim_end().ends_with(", 0 of them tensor storage"),
            "{model}: {line}"
        );
    }
}

/// A file of silero-vad's or pyannote's pinned wheel, as the example's build fetched it.
fn fetched(package: &str, path: &str, sha256: &str) -> std::path::PathBuf {
    tooling::fetch_package_file(
        &Config::new().cargo_directives(false),
        &PackageFileSpec {
            declared_in: &workspace_root().join("examples/vad-stream/Cargo.toml"),
            key: "tests/streaming.rs",
            package,
            path,
            member: None,
            sha256,
        },
    )
    .unwrap()
}

#[test]
fn the_vad_example_finds_the_segments_onnxruntime_finds() {
    let ours: Value =
        serde_json::from_slice(&run_release("vad-stream", &["--json"]).stdout).unwrap();
    let model = fetched(
        "silero-vad==6.2.3",
        "silero_vad/data/silero_vad.onnx",
        "1a153a22f4509e292a94e67d6f9b85e8deb25b4988682b7e174c65279d8788e3",
    );
    let audio = fetched(
        "pyannote.audio==4.0.7",
        "pyannote/audio/sample/sample.wav",
        "c319b4abca767b124e41432d364fd7df006cb26bb79d09326c487d606a134e6e",
    );
    let output = std::process::Command::new(test_python())
        .arg(workspace_root().join("examples/vad-stream/reference_segments.py"))
        .arg(&model)
        .arg(&audio)
        .output()
        .unwrap();
    assert_success(&output, "reference_segments.py");
    let reference: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(ours["segments"], reference["segments"]);
    assert_eq!(
        ours["segments"].as_array().map(Vec::len),
        Some(4),
        "the sample's four phrases"
    );
    let probabilities = |value: &Value| -> Vec<f64> {
        serde_json::from_value(value["chunk_probabilities"].clone()).unwrap()
    };
    let (ours, theirs) = (probabilities(&ours), probabilities(&reference));
    assert_eq!(ours.len(), theirs.len());
    let worst = ours
        .iter()
        .zip(&theirs)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f64::max);
    assert!(worst < 1e-4, "chunk probabilities differ by up to {worst}");
}
