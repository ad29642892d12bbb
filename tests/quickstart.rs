//! `cargo run --release -p quickstart` prints the same predictions as numpy on the same weights.

use relax_cargo_tests::{line_after, python, run_release, workspace_root};

#[test]
fn quickstart_matches_numpy() {
    let output = run_release("quickstart", &["--predictions"]);
    let ours = String::from_utf8(output.stdout).unwrap();
    let reference = python(
        &workspace_root().join("examples/quickstart/reference.py"),
        &[],
    );

    let predictions = line_after(&ours, "predictions: ");
    assert_eq!(
        predictions.split(' ').count(),
        360,
        "one prediction per held-out digit"
    );
    assert_eq!(predictions, line_after(&reference, "predictions: "));
    let accuracy: f64 = line_after(&ours, "accuracy: ")
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let reference_accuracy: f64 = line_after(&reference, "accuracy: ").parse().unwrap();
    assert_eq!(format!("{accuracy:.4}"), format!("{reference_accuracy:.4}"));
    assert!(
        accuracy > 0.9,
        "the trained MLP classifies most digits: {accuracy}"
    );
    assert!(line_after(&ours, "median latency per batch of 32: ").ends_with("over 12 batches"));
}
