//! Classifies the quickstart's held-out digits with an ONNX model compiled at build time.
//!
//! `--json N` prints the logits and probabilities of the first N digits as JSON (for
//! comparison with onnxruntime) instead of the accuracy.

use relax_runtime::Tensor;

relax_runtime::include_model!("classifier");
relax_runtime::include_model!("classifier_external");

const TEST_SET: &[u8] = include_bytes!("../../quickstart/data/test_digits.safetensors");

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let test_set = safetensors::SafeTensors::deserialize(TEST_SET)?;
    let pixels: Vec<f32> = test_set
        .tensor("x")?
        .data()
        .chunks_exact(4)
        .map(|chunk| f32::from_le_bytes(chunk.try_into().unwrap()))
        .collect();
    let labels: Vec<i64> = test_set
        .tensor("y")?
        .data()
        .chunks_exact(8)
        .map(|chunk| i64::from_le_bytes(chunk.try_into().unwrap()))
        .collect();

    let embedded = classifier::Model::load()?;
    let external = classifier_external::Model::load()?;
    let arguments: Vec<String> = std::env::args().collect();
    if let Some(position) = arguments.iter().position(|argument| argument == "--json") {
        let count: usize = arguments[position + 1].parse()?;
        let x = Tensor::from_slice(&pixels[..count * 64], &[count, 64])?;
        let (logits, probabilities) = embedded.main(&x)?;
        let (external_logits, _) = external.main(&x)?;
        assert_eq!(
            logits.as_slice::<f32>()?,
            external_logits.as_slice::<f32>()?
        );
        let json = serde_json::json!({
            "logits": {"shape": logits.shape(), "data": logits.as_slice::<f32>()?},
            "probabilities": {"shape": probabilities.shape(), "data": probabilities.as_slice::<f32>()?},
        });
        println!("{json}");
        return Ok(());
    }

    let x = Tensor::from_slice(&pixels, &[labels.len(), 64])?;
    let (_, probabilities) = embedded.main(&x)?;
    let correct = probabilities
        .as_slice::<f32>()?
        .chunks(10)
        .zip(&labels)
        .filter(|(row, label)| argmax(row) as i64 == **label)
        .count();
    println!(
        "accuracy: {:.4} ({correct}/{} held-out digits, ONNX model compiled by TVM)",
        correct as f64 / labels.len() as f64,
        labels.len()
    );
    Ok(())
}

fn argmax(row: &[f32]) -> usize {
    (0..row.len()).fold(
        0,
        |best, index| if row[index] > row[best] { index } else { best },
    )
}
