//! Sentence embeddings with all-MiniLM-L6-v2, compiled by TVM at build time.
//!
//! ```text
//! sentence-embeddings [OPTIONS] SENTENCE...
//!   --max-tokens N     truncate longer sentences to N tokens (default 256, as
//!                      sentence-transformers does for this model; at most 512)
//!   --one-at-a-time    one call per sentence instead of one batch
//!   --embeddings       print the embeddings as JSON instead of the similarity matrix
//!   --token-ids        print the token ids as JSON (for the reference implementation)
//! ```
//!
//! Prints the cosine-similarity matrix of the sentences' embeddings and the time per
//! sentence. The tokenizer is the model's own `tokenizer.json`, fetched at build time
//! with its weights and embedded as bytes by the generated module.

use std::time::Instant;

use relax_runtime::Tensor;
use tokenizers::{PaddingParams, PaddingStrategy, Tokenizer, TruncationParams};

relax_runtime::include_model!("minilm");

/// sentence-transformers' `max_seq_length` for this model (its sentence_bert_config.json).
const DEFAULT_MAX_TOKENS: usize = 256;
/// The model's position embeddings.
const MODEL_MAX_TOKENS: usize = 512;

struct Options {
    max_tokens: usize,
    one_at_a_time: bool,
    print: Print,
    sentences: Vec<String>,
}

enum Print {
    Similarities,
    Embeddings,
    TokenIds,
}

fn parse_options() -> Result<Options, String> {
    let mut options = Options {
        max_tokens: DEFAULT_MAX_TOKENS,
        one_at_a_time: false,
        print: Print::Similarities,
        sentences: Vec::new(),
    };
    let mut arguments = std::env::args().skip(1);
    while let Some(argument) = arguments.next() {
        match argument.as_str() {
            "--max-tokens" => {
                let value = arguments.next().ok_or("--max-tokens needs a number")?;
                options.max_tokens = value
                    .parse()
                    .ok()
                    .filter(|tokens| (3..=MODEL_MAX_TOKENS).contains(tokens))
                    .ok_or(format!(
                        "--max-tokens takes 3 to {MODEL_MAX_TOKENS}, not {value}"
                    ))?;
            }
            "--one-at-a-time" => options.one_at_a_time = true,
            "--embeddings" => options.print = Print::Embeddings,
            "--token-ids" => options.print = Print::TokenIds,
            "-h" | "--help" => return Err(usage()),
            _ => options.sentences.push(argument),
        }
    }
    if options.sentences.is_empty() {
        return Err(usage());
    }
    Ok(options)
}

fn usage() -> String {
    "usage: sentence-embeddings [--max-tokens N] [--one-at-a-time] [--embeddings | --token-ids] SENTENCE..."
        .to_string()
}

fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let options = match parse_options() {
        Ok(options) => options,
        Err(message) => {
            eprintln!("{message}");
            std::process::exit(2);
        }
    };
    let mut tokenizer = Tokenizer::from_bytes(minilm::files::TOKENIZER)?;
    tokenizer
        .with_truncation(Some(TruncationParams {
            max_length: options.max_tokens,
            ..TruncationParams::default()
        }))?
        .with_padding(Some(PaddingParams {
            strategy: PaddingStrategy::BatchLongest,
            ..PaddingParams::default()
        }));
    let encodings = tokenizer.encode_batch(options.sentences.clone(), true)?;
    for (index, encoding) in encodings.iter().enumerate() {
        if !encoding.get_overflowing().is_empty() {
            eprintln!(
                "note: sentence {} is longer than {} tokens; it is truncated (as sentence-transformers does)",
                index + 1,
                options.max_tokens
            );
        }
    }
    if let Print::TokenIds = options.print {
        let ids: Vec<Vec<u32>> = encodings
            .iter()
            .map(|encoding| {
                let length = encoding
                    .get_attention_mask()
                    .iter()
                    .filter(|&&mask| mask == 1)
                    .count();
                encoding.get_ids()[..length].to_vec()
            })
            .collect();
        println!("{ids:?}");
        return Ok(());
    }

    let model = minilm::Model::load()?;
    let started = Instant::now();
    let embeddings = if options.one_at_a_time {
        let mut all = Vec::new();
        for sentence in &options.sentences {
            let encoding = tokenizer.encode(sentence.as_str(), true)?;
            all.extend(embed(&model, std::slice::from_ref(&encoding))?);
        }
        all
    } else {
        embed(&model, &encodings)?
    };
    let elapsed = started.elapsed();

    match options.print {
        Print::Embeddings => println!("{embeddings:?}"),
        _ => {
            for (index, sentence) in options.sentences.iter().enumerate() {
                println!("{}: {sentence}", index + 1);
            }
            println!();
            println!("cosine similarity:");
            print!("     ");
            for column in 1..=embeddings.len() {
                print!("{column:>8}");
            }
            println!();
            for (row, a) in embeddings.iter().enumerate() {
                print!("{:>5}", row + 1);
                for b in &embeddings {
                    print!("{:>8.4}", dot(a, b));
                }
                println!();
            }
            println!();
            println!(
                "time per sentence: {:.2} ms ({} sentences, {})",
                elapsed.as_secs_f64() * 1e3 / options.sentences.len() as f64,
                options.sentences.len(),
                if options.one_at_a_time {
                    "one call each"
                } else {
                    "one batch"
                }
            );
        }
    }
    Ok(())
}

/// The embeddings of a batch of encodings (all of one length, padded by the tokenizer).
fn embed(
    model: &minilm::Model,
    encodings: &[tokenizers::Encoding],
) -> relax_runtime::Result<Vec<Vec<f32>>> {
    let batch = encodings.len();
    let seq = encodings[0].get_ids().len();
    let ids: Vec<i64> = encodings
        .iter()
        .flat_map(|encoding| encoding.get_ids().iter().map(|&id| i64::from(id)))
        .collect();
    let mask: Vec<i64> = encodings
        .iter()
        .flat_map(|encoding| {
            encoding
                .get_attention_mask()
                .iter()
                .map(|&mask| i64::from(mask))
        })
        .collect();
    let output = model.forward(
        &Tensor::from_slice(&ids, &[batch, seq])?,
        &Tensor::from_slice(&mask, &[batch, seq])?,
    )?;
    Ok(output
        .as_slice::<f32>()?
        .chunks(output.shape()[1] as usize)
        .map(<[f32]>::to_vec)
        .collect())
}

/// The embeddings have unit length, so their dot product is the cosine similarity.
fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}
