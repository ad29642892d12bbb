//! Classifies the quickstart's 360 held-out 8x8 digits with a CNN written in PyTorch
//! (models/cnn.py), in one call, draws the first three with their predictions, and prints
//! the accuracy. `--json N` prints the probabilities of the first N digits instead.

use relax_runtime::Tensor;

relax_runtime::include_model!("cnn");

const TEST_SET: &[u8] = include_bytes!("../../quickstart/data/test_digits.safetensors");
const SHADES: [char; 5] = [' ', '.', ':', '#', '@'];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let arguments: Vec<String> = std::env::args().collect();
    let test_set = safetensors::SafeTensors::deserialize(TEST_SET)?;
    let images: Vec<f32> = test_set
        .tensor("x")?
        .data()
        .chunks_exact(4)
        .map(|bytes| f32::from_le_bytes(bytes.try_into().unwrap()))
        .collect();
    let labels: Vec<i64> = test_set
        .tensor("y")?
        .data()
        .chunks_exact(8)
        .map(|bytes| i64::from_le_bytes(bytes.try_into().unwrap()))
        .collect();

    let model = cnn::Model::load()?;
    if arguments.get(1).map(String::as_str) == Some("--json") {
        let count: usize = arguments.get(2).ok_or("--json needs a count")?.parse()?;
        if count > labels.len() {
            return Err(
                format!("--json {count}: there are {} held-out digits", labels.len()).into(),
            );
        }
        let batch = Tensor::from_slice(&images[..count * 64], &[count, 1, 8, 8])?;
        let probabilities = model.forward(&batch)?;
        let data: Vec<String> = probabilities
            .as_slice::<f32>()?
            .iter()
            .map(f32::to_string)
            .collect();
        println!(
            r#"{{"shape": [{count}, 10], "data": [{}]}}"#,
            data.join(", ")
        );
        return Ok(());
    }
    let batch = Tensor::from_slice(&images, &[labels.len(), 1, 8, 8])?;
    let probabilities = model.forward(&batch)?;
    let rows: Vec<&[f32]> = probabilities.as_slice::<f32>()?.chunks(10).collect();
    let predicted: Vec<usize> = rows.iter().map(|row| argmax(row)).collect();
    for (index, image) in images.chunks(64).take(3).enumerate() {
        println!(
            "digit {index}: label {}, predicted {} (p = {:.3})",
            labels[index], predicted[index], rows[index][predicted[index]]
        );
        for line in image.chunks(8) {
            let drawn: String = line
                .iter()
                .map(|value| SHADES[((value * 4.0).round() as usize).min(4)])
                .flat_map(|shade| [shade, shade])
                .collect();
            println!("  {drawn}");
        }
    }
    let correct = predicted
        .iter()
        .zip(&labels)
        .filter(|(predicted, label)| **predicted as i64 == **label)
        .count();
    println!(
        "accuracy: {:.4} ({correct}/{} held-out digits)",
        correct as f64 / labels.len() as f64,
        labels.len()
    );
    Ok(())
}

fn argmax(row: &[f32]) -> usize {
    (0..row.len())
        .max_by(|&a, &b| row[a].total_cmp(&row[b]))
        .unwrap_or(0)
}
