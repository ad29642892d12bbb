//! The sentence-embeddings example (all-MiniLM-L6-v2): the similarities
//! sentence-transformers publishes, one embedding element-wise against a numpy forward
//! pass of the same weights, batches equal to one sentence at a time, and truncation.

use relax_cargo_tests::{
    assert_success, built_model_dir, run_release, stderr, stdout, test_python, workspace_root,
};
use serde_json::Value;

const SENTENCES: [&str; 3] = [
    "The weather is lovely today.",
    "It's so sunny outside!",
    "He drove to the stadium.",
];

/// `cargo run --release -p sentence-embeddings -- <args>`.
fn run(args: &[&str]) -> std::process::Output {
    run_release("sentence-embeddings", args)
}

/// The similarity in row `row`, column `column` (1-based) of the printed matrix.
pub fn similarity(output: &str, row: usize, column: usize) -> f64 {
    let line = output
        .lines()
        .skip_while(|line| !line.starts_with("cosine similarity:"))
        .nth(1 + row)
        .unwrap_or_else(|| panic!("no row {row} in:\n{output}"));
    line.split_whitespace()
        .nth(column)
        .unwrap()
        .parse()
        .unwrap()
}

#[test]
fn the_published_similarities() {
    let output = stdout(&run(&SENTENCES));
    for (row, column, published) in [(1, 2, 0.6660), (1, 3, 0.1046), (2, 3, 0.1411)] {
        let ours = similarity(&output, row, column);
        assert!(
            (ours - published).abs() <= 0.002,
            "similarity {row}-{column}: {ours}, published {published}\n{output}"
        );
        assert_eq!(
            ours,
            similarity(&output, column, row),
            "the matrix is symmetric"
        );
    }
    assert!(output.contains("time per sentence: "), "{output}");
}

#[test]
fn one_embedding_matches_a_numpy_forward_pass() {
    let sentence = "A numpy reference, written without TVM, checks every element.";
    let ids = stdout(&run(&["--token-ids", sentence]));
    let ours: Vec<Vec<f64>> =
        serde_json::from_str(&stdout(&run(&["--embeddings", sentence]))).unwrap();
    let weights =
        built_model_dir("release", "sentence-embeddings", "minilm").join("weights.safetensors");
    let ids_file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(ids_file.path(), &ids).unwrap();
    let output = std::process::Command::new(test_python())
        .arg(workspace_root().join("examples/sentence-embeddings/reference.py"))
        .arg(&weights)
        .arg(ids_file.path())
        .output()
        .unwrap();
    assert_success(&output, "reference.py");
    let reference: Vec<Vec<f64>> = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(ours[0].len(), 384);
    for (index, (a, b)) in ours[0].iter().zip(&reference[0]).enumerate() {
        assert!((a - b).abs() <= 1e-4, "element {index}: {a} vs numpy {b}");
    }
}

#[test]
fn a_padded_batch_equals_one_sentence_at_a_time() {
    let sentences = [
        "Short.",
        "A somewhat longer sentence, which needs more tokens than the first one.",
        "Medium length sentence here.",
    ];
    let mut args = vec!["--embeddings"];
    args.extend(sentences);
    let batched: Value = serde_json::from_str(&stdout(&run(&args))).unwrap();
    args.insert(0, "--one-at-a-time");
    let single: Value = serde_json::from_str(&stdout(&run(&args))).unwrap();
    for (sentence, (a, b)) in batched
        .as_array()
        .unwrap()
        .iter()
        .zip(single.as_array().unwrap())
        .enumerate()
    {
        for (a, b) in a.as_array().unwrap().iter().zip(b.as_array().unwrap()) {
            let (a, b) = (a.as_f64().unwrap(), b.as_f64().unwrap());
            assert!(
                (a - b).abs() <= 1e-5,
                "sentence {sentence}: {a} batched, {b} alone"
            );
        }
    }
}

#[test]
fn a_long_sentence_is_truncated_with_a_note() {
    let long = "word ".repeat(300);
    let output = run(&[&long, "short"]);
    assert!(
        stderr(&output).contains("note: sentence 1 is longer than 256 tokens; it is truncated (as sentence-transformers does)"),
        "{}",
        stderr(&output)
    );
    assert!(!stderr(&output).contains("sentence 2"));
    let tokens: Vec<Vec<u32>> = serde_json::from_str(&stdout(&run(&[
        "--token-ids",
        "--max-tokens",
        "512",
        &long,
    ])))
    .unwrap();
    assert_eq!(
        tokens[0].len(),
        302,
        "300 words and the two special tokens fit in 512"
    );
}
