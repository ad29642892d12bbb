//! Classifies the held-out 8x8 digits with the `digits` model and prints the accuracy
//! and the median latency per batch. `--predictions` also prints every prediction.

use std::time::{Duration, Instant};

use relax_runtime::Tensor;

relax_runtime::include_model!("digits");

const BATCH: usize = 32;
const TEST_SET: &[u8] = include_bytes!("../data/test_digits.safetensors");

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let print_predictions = std::env::args().any(|argument| argument == "--predictions");
    let test_set = safetensors::SafeTensors::deserialize(TEST_SET)?;
    let images: Vec<f32> = le_values(test_set.tensor("x")?.data(), f32::from_le_bytes);
    let labels: Vec<i64> = le_values(test_set.tensor("y")?.data(), i64::from_le_bytes);

    let model = digits::Model::load()?;
    let mut predictions = Vec::with_capacity(labels.len());
    let mut latencies = Vec::new();
    for (batch_images, batch_labels) in images.chunks(BATCH * 64).zip(labels.chunks(BATCH)) {
        // The model takes exactly BATCH images: pad the last batch with zeros.
        let mut padded = batch_images.to_vec();
        padded.resize(BATCH * 64, 0.0);
        let x = Tensor::from_slice(&padded, &[BATCH, 64])?;
        let started = Instant::now();
        let logits = model.forward(&x)?;
        latencies.push(started.elapsed());
        let rows = logits
            .as_slice::<f32>()?
            .chunks(10)
            .take(batch_labels.len());
        predictions.extend(rows.map(argmax));
    }

    let correct = predictions
        .iter()
        .zip(&labels)
        .filter(|(predicted, label)| **predicted as i64 == **label)
        .count();
    println!(
        "accuracy: {:.4} ({correct}/{} held-out digits)",
        correct as f64 / labels.len() as f64,
        labels.len()
    );
    println!(
        "median latency per batch of {BATCH}: {:.1} µs over {} batches",
        median(&mut latencies).as_secs_f64() * 1e6,
        latencies.len()
    );
    if print_predictions {
        let text: Vec<String> = predictions.iter().map(usize::to_string).collect();
        println!("predictions: {}", text.join(" "));
    }
    Ok(())
}

fn le_values<T, const N: usize>(bytes: &[u8], from_le: fn([u8; N]) -> T) -> Vec<T> {
    bytes
        .chunks_exact(N)
        .map(|chunk| from_le(chunk.try_into().unwrap()))
        .collect()
}

fn argmax(row: &[f32]) -> usize {
    (0..row.len()).fold(
        0,
        |best, index| if row[index] > row[best] { index } else { best },
    )
}

fn median(durations: &mut [Duration]) -> Duration {
    durations.sort();
    durations[durations.len() / 2]
}
