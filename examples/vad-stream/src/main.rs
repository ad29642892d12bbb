//! Voice activity detection on a stream: runs silero-vad 6.2.3 (its ONNX graph compiled
//! by TVM at build time) over a 16 kHz WAV file, 512 samples at a time, and prints where
//! the speech is.
//!
//! ```text
//! cargo run --release -p vad-stream [-- FILE.wav] [--json]
//! ```
//!
//! Without a file it reads the 30-second speech sample that pyannote.audio ships
//! (fetched at build time, embedded as `silero_vad::files::SAMPLE`). It prints each
//! speech segment as soon as the silence after it ends it, one a line:
//! `speech 6.784 s - 7.200 s`. With `--json` it prints instead the per-chunk speech
//! probabilities and the segments in samples, exactly as `reference_segments.py` prints
//! them from onnxruntime, for comparison.
//!
//! Each call of the model takes 576 samples: the last 64 of the chunk before (zeros
//! before the first), then the 512 new ones, as silero-vad's own wrapper does. The
//! model's recurrent state (input `state`, output `stateN`, declared as `state.main` in
//! Cargo.toml) is carried from one call to the next by the generated
//! `silero_vad::Stream`, inside TVM's tensors: it never passes through Rust.

mod segments;

use std::error::Error;
use std::fmt;
use std::io::Cursor;
use std::path::PathBuf;

use relax_runtime::Tensor;

use segments::{Segment, Segmenter, CHUNK_SAMPLES, SAMPLE_RATE};

relax_runtime::include_model!("silero_vad");

/// Samples of the chunk before that come first in each model input. Without them the
/// model's probabilities stay near 0 even on clear speech.
const CONTEXT_SAMPLES: usize = 64;

/// Samples per model call: the context, then the chunk.
const INPUT_SAMPLES: usize = CONTEXT_SAMPLES + CHUNK_SAMPLES;

const USAGE: &str = "usage: vad-stream [FILE.wav] [--json]\n\
    Prints the speech segments of FILE.wav (16 kHz; default: the embedded sample);\n\
    --json prints the per-chunk probabilities and the segments in samples instead.";

/// The command line.
struct Options {
    /// The WAV file to read; None: the embedded sample.
    file: Option<PathBuf>,
    /// Print JSON (as reference_segments.py does) instead of one line per segment.
    json: bool,
}

/// An error for the user, printed as it is: `main` returns errors through `Debug`, which
/// would print a `String` quoted, its newlines escaped.
struct Message(String);

impl fmt::Display for Message {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(&self.0)
    }
}

impl fmt::Debug for Message {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(&self.0)
    }
}

impl Error for Message {}

impl Options {
    fn parse(arguments: impl Iterator<Item = String>) -> Result<Options, Message> {
        let mut options = Options {
            file: None,
            json: false,
        };
        for argument in arguments {
            match argument.as_str() {
                "--json" => options.json = true,
                "-h" | "--help" => return Err(Message(USAGE.to_string())),
                flag if flag.starts_with('-') => {
                    return Err(Message(format!("unknown option `{flag}`\n{USAGE}")))
                }
                _ if options.file.is_some() => {
                    return Err(Message(format!(
                        "one WAV file at most, found a second: `{argument}`\n{USAGE}"
                    )))
                }
                _ => options.file = Some(PathBuf::from(&argument)),
            }
        }
        Ok(options)
    }
}

fn main() -> Result<(), Box<dyn Error>> {
    let options = Options::parse(std::env::args().skip(1))?;
    let audio = match &options.file {
        Some(path) => {
            let name = path.display().to_string();
            let reader = hound::WavReader::open(path)
                .map_err(|error| Message(format!("cannot read {name}: {error}")))?;
            mono_samples(reader, &name)?
        }
        None => {
            let name = "the embedded sample (pyannote.audio 4.0.7's sample.wav)";
            let reader = hound::WavReader::new(Cursor::new(silero_vad::files::SAMPLE))
                .map_err(|error| Message(format!("cannot read {name}: {error}")))?;
            mono_samples(reader, name)?
        }
    };

    let model = silero_vad::Model::load()?;
    let mut vad = model.stream()?;
    let sample_rate = Tensor::from_slice(&[SAMPLE_RATE as i64], &[])?;
    let mut segmenter = Segmenter::new();
    let mut probabilities = Vec::new();
    let mut segments = Vec::new();
    let mut report = |segment: Segment| {
        if !options.json {
            println!(
                "speech {:.3} s - {:.3} s",
                segment.start_seconds(),
                segment.end_seconds()
            );
        }
        segments.push(segment);
    };
    // The model's input: the last CONTEXT_SAMPLES of the chunk before, then the chunk
    // (the last one zero-padded).
    let mut input = [0f32; INPUT_SAMPLES];
    for chunk in audio.chunks(CHUNK_SAMPLES) {
        input.copy_within(CHUNK_SAMPLES.., 0);
        input[CONTEXT_SAMPLES..][..chunk.len()].copy_from_slice(chunk);
        input[CONTEXT_SAMPLES + chunk.len()..].fill(0.0);
        let input_tensor = Tensor::from_slice(&input, &[1, INPUT_SAMPLES])?;
        let probability = vad.push(&input_tensor, &sample_rate)?.as_slice::<f32>()?[0];
        probabilities.push(probability);
        if let Some(segment) = segmenter.push(probability) {
            report(segment);
        }
    }
    if let Some(segment) = segmenter.finish(audio.len()) {
        report(segment);
    }

    if options.json {
        println!("{}", json(&probabilities, &segments));
    } else if segments.is_empty() {
        eprintln!("no speech found");
    }
    Ok(())
}

/// The audio of `reader` as mono samples in [-1, 1], scaled and averaged as
/// reference_segments.py does: integers divided by 2^(bits - 1) in `f32` (8-bit WAV is
/// unsigned, centered on 128), channels summed in order in `f32`, then divided by their
/// count. `name` names the audio in errors.
fn mono_samples<R: std::io::Read>(
    mut reader: hound::WavReader<R>,
    name: &str,
) -> Result<Vec<f32>, Message> {
    let spec = reader.spec();
    if spec.sample_rate as usize != SAMPLE_RATE {
        return Err(Message(format!(
            "{name}: sample rate {} Hz, but silero-vad takes {SAMPLE_RATE} Hz; resample it \
             first, e.g. `ffmpeg -i {name} -ar {SAMPLE_RATE} -ac 1 out.wav`",
            spec.sample_rate
        )));
    }
    let unreadable = |error: hound::Error| Message(format!("cannot read {name}: {error}"));
    let interleaved: Vec<f32> = match (spec.sample_format, spec.bits_per_sample) {
        (hound::SampleFormat::Float, 32) => reader
            .samples::<f32>()
            .collect::<Result<_, _>>()
            .map_err(unreadable)?,
        // hound centers 8-bit samples on 0 already.
        (hound::SampleFormat::Int, bits @ (8 | 16 | 24 | 32)) => {
            let scale = (1u64 << (bits - 1)) as f32;
            reader
                .samples::<i32>()
                .map(|sample| sample.map(|sample| sample as f32 / scale))
                .collect::<Result<_, _>>()
                .map_err(unreadable)?
        }
        (format, bits) => {
            return Err(Message(format!(
                "{name}: {bits}-bit {format:?} samples are not supported; convert them to \
                 16-bit integers, e.g. \
                 `ffmpeg -i {name} -ar {SAMPLE_RATE} -ac 1 -c:a pcm_s16le out.wav`"
            )))
        }
    };
    let channels = usize::from(spec.channels.max(1));
    Ok(interleaved
        .chunks_exact(channels)
        .map(|frame| frame.iter().fold(0f32, |sum, &sample| sum + sample) / channels as f32)
        .collect())
}

/// The JSON reference_segments.py prints, byte for byte:
/// `{"chunk_probabilities": [...], "segments": [{"start": s, "end": e}, ...]}`.
fn json(probabilities: &[f32], segments: &[Segment]) -> String {
    let probabilities: Vec<String> = probabilities
        .iter()
        .map(|&probability| python_float(f64::from(probability)))
        .collect();
    let segments: Vec<String> = segments
        .iter()
        .map(|segment| format!("{{\"start\": {}, \"end\": {}}}", segment.start, segment.end))
        .collect();
    format!(
        "{{\"chunk_probabilities\": [{}], \"segments\": [{}]}}",
        probabilities.join(", "),
        segments.join(", ")
    )
}

/// `value` as Python's `json.dump` writes it (its `repr`): the shortest digits that read
/// back as `value`, which Rust's `{:?}` gives too, but with Python's exponent form
/// (`1e-05`, `1e+16`) and its names for what is not a number.
fn python_float(value: f64) -> String {
    if value.is_nan() {
        return "NaN".to_string();
    }
    if value.is_infinite() {
        return if value > 0.0 { "Infinity" } else { "-Infinity" }.to_string();
    }
    let text = format!("{value:?}");
    match text.split_once('e') {
        Some((digits, exponent)) => {
            let exponent: i32 = exponent.parse().expect("Rust writes a decimal exponent");
            let sign = if exponent < 0 { '-' } else { '+' };
            format!("{digits}e{sign}{:02}", exponent.unsigned_abs())
        }
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_are_written_as_python_writes_them() {
        // Each right-hand side is Python's repr of the same value.
        assert_eq!(python_float(0.0), "0.0");
        assert_eq!(python_float(1.0), "1.0");
        assert_eq!(python_float(0.5), "0.5");
        assert_eq!(python_float(0.0001), "0.0001");
        assert_eq!(python_float(1e-5), "1e-05");
        assert_eq!(python_float(1.5e-7), "1.5e-07");
        assert_eq!(python_float(1e16), "1e+16");
        assert_eq!(python_float(f64::from(0.9f32)), "0.8999999761581421");
        assert_eq!(python_float(f64::from(3e-5f32)), "2.9999999242136255e-05");
    }

    #[test]
    fn json_is_what_python_json_dump_prints() {
        // json.dumps({"chunk_probabilities": [0.5, float(np.float32(3e-5))],
        //             "segments": [{"start": 1, "end": 2}, {"start": 3, "end": 4}]})
        let segments = [Segment { start: 1, end: 2 }, Segment { start: 3, end: 4 }];
        assert_eq!(
            json(&[0.5, 3e-5], &segments),
            "{\"chunk_probabilities\": [0.5, 2.9999999242136255e-05], \"segments\": \
             [{\"start\": 1, \"end\": 2}, {\"start\": 3, \"end\": 4}]}"
        );
        assert_eq!(
            json(&[], &[]),
            "{\"chunk_probabilities\": [], \"segments\": []}"
        );
    }

    /// A WAV file of `samples` (interleaved) at `rate` Hz, in memory.
    fn wav(
        rate: u32,
        channels: u16,
        samples: &[i16],
    ) -> hound::WavReader<std::io::Cursor<Vec<u8>>> {
        let spec = hound::WavSpec {
            channels,
            sample_rate: rate,
            bits_per_sample: 16,
            sample_format: hound::SampleFormat::Int,
        };
        let mut bytes = std::io::Cursor::new(Vec::new());
        let mut writer = hound::WavWriter::new(&mut bytes, spec).unwrap();
        for &sample in samples {
            writer.write_sample(sample).unwrap();
        }
        writer.finalize().unwrap();
        bytes.set_position(0);
        hound::WavReader::new(bytes).unwrap()
    }

    #[test]
    fn another_sample_rate_is_refused_with_the_command_that_converts_it() {
        let refused =
            mono_samples(wav(8000, 1, &[0, 1, 2]), "talk.wav").expect_err("8 kHz is refused");
        assert_eq!(
            refused.0,
            "talk.wav: sample rate 8000 Hz, but silero-vad takes 16000 Hz; resample it first, \
             e.g. `ffmpeg -i talk.wav -ar 16000 -ac 1 out.wav`"
        );
    }

    #[test]
    fn stereo_is_averaged_and_integers_scaled_to_one() {
        let samples = mono_samples(wav(16000, 2, &[16384, 0, -32768, -32768]), "talk.wav").unwrap();
        assert_eq!(samples, vec![0.25, -1.0]);
    }

    #[test]
    fn options_take_a_file_and_json_in_any_order() {
        let parse = |words: &[&str]| Options::parse(words.iter().map(|word| word.to_string()));
        let options = parse(&["--json", "talk.wav"]).unwrap();
        assert!(options.json);
        assert_eq!(options.file, Some(PathBuf::from("talk.wav")));
        assert!(parse(&["a.wav", "b.wav"]).is_err());
        let refused = parse(&["--jsn"])
            .err()
            .expect("an unknown option is refused");
        assert!(refused.0.contains("unknown option `--jsn`"));
    }
}
