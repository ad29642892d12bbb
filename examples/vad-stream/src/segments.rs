//! Speech segments from per-chunk speech probabilities: a port of `Segmenter` in
//! `reference_segments.py` (same constants, same rules, same names), so that the
//! example's segments can be compared with the ones onnxruntime's probabilities give.
//!
//! - not in speech: a chunk with probability >= [`THRESHOLD`] starts a segment at the
//!   chunk's first sample;
//! - in speech: a chunk with probability >= [`NEG_THRESHOLD`] is a speech chunk;
//!   [`MIN_SILENCE_CHUNKS`] consecutive chunks below it end the segment at the end of
//!   the last speech chunk before them;
//! - a segment still open at the end of the audio ends at the end of its last speech
//!   chunk, clamped to the audio's length;
//! - segments shorter than [`MIN_SPEECH_SAMPLES`] are dropped.
//!
//! Positions are sample indices from 0; a segment's `end` is exclusive. Probabilities
//! are compared as `f64`, as Python compares the model's `float32` turned `float`.

/// Samples per second the model takes.
pub const SAMPLE_RATE: usize = 16_000;
/// Samples per model call (the new ones; the model sees 64 more of context).
pub const CHUNK_SAMPLES: usize = 512;

/// The probability that starts speech.
pub const THRESHOLD: f64 = 0.5;
/// Speech goes on while the probability is at least `THRESHOLD - NEG_THRESHOLD_OFFSET`.
pub const NEG_THRESHOLD_OFFSET: f64 = 0.15;
/// How long the probability must stay low to end speech.
pub const MIN_SILENCE_MS: usize = 100;
/// Shorter segments are dropped.
pub const MIN_SPEECH_MS: usize = 250;

/// The probability below which a chunk in speech counts as silence (0.35).
pub const NEG_THRESHOLD: f64 = THRESHOLD - NEG_THRESHOLD_OFFSET;
/// [`MIN_SILENCE_MS`] in samples (1600).
pub const MIN_SILENCE_SAMPLES: usize = SAMPLE_RATE * MIN_SILENCE_MS / 1000;
/// [`MIN_SILENCE_SAMPLES`] rounded up to whole chunks (4).
pub const MIN_SILENCE_CHUNKS: usize = MIN_SILENCE_SAMPLES.div_ceil(CHUNK_SAMPLES);
/// [`MIN_SPEECH_MS`] in samples (4000).
pub const MIN_SPEECH_SAMPLES: usize = SAMPLE_RATE * MIN_SPEECH_MS / 1000;

/// A stretch of speech, in samples from the start of the audio.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    /// The first sample.
    pub start: usize,
    /// The sample after the last one.
    pub end: usize,
}

impl Segment {
    /// Where the segment starts, in seconds.
    pub fn start_seconds(&self) -> f64 {
        self.start as f64 / SAMPLE_RATE as f64
    }

    /// Where the segment ends, in seconds.
    pub fn end_seconds(&self) -> f64 {
        self.end as f64 / SAMPLE_RATE as f64
    }
}

/// Turns one chunk's probability at a time into segments, each returned as soon as the
/// silence after it (or the end of the audio) closes it.
#[derive(Debug, Default)]
pub struct Segmenter {
    /// The chunk the next probability is for.
    chunk_index: usize,
    in_speech: bool,
    /// The first sample of the open segment.
    start: usize,
    /// The end sample of the last speech chunk.
    last_speech_end: usize,
    /// Consecutive chunks below [`NEG_THRESHOLD`] since the last speech chunk.
    silent_chunks: usize,
}

impl Segmenter {
    /// A segmenter at the start of the audio, not in speech.
    pub fn new() -> Segmenter {
        Segmenter::default()
    }

    /// Takes the next chunk's speech probability; returns the segment it ends, if any.
    pub fn push(&mut self, probability: f32) -> Option<Segment> {
        let probability = f64::from(probability);
        let chunk_start = self.chunk_index * CHUNK_SAMPLES;
        let chunk_end = chunk_start + CHUNK_SAMPLES;
        self.chunk_index += 1;
        if !self.in_speech {
            if probability >= THRESHOLD {
                self.in_speech = true;
                self.start = chunk_start;
                self.last_speech_end = chunk_end;
                self.silent_chunks = 0;
            }
            return None;
        }
        if probability >= NEG_THRESHOLD {
            self.last_speech_end = chunk_end;
            self.silent_chunks = 0;
            return None;
        }
        self.silent_chunks += 1;
        if self.silent_chunks >= MIN_SILENCE_CHUNKS {
            self.in_speech = false;
            return long_enough(self.start, self.last_speech_end);
        }
        None
    }

    /// Ends the audio, `total_samples` long; returns the segment still open (its end
    /// clamped to the audio), if any.
    pub fn finish(&mut self, total_samples: usize) -> Option<Segment> {
        if !self.in_speech {
            return None;
        }
        self.in_speech = false;
        long_enough(self.start, self.last_speech_end.min(total_samples))
    }
}

/// The segment from `start` to `end`, unless it is shorter than [`MIN_SPEECH_SAMPLES`].
fn long_enough(start: usize, end: usize) -> Option<Segment> {
    (end.saturating_sub(start) >= MIN_SPEECH_SAMPLES).then_some(Segment { start, end })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPEECH: f32 = 0.9;
    const SILENCE: f32 = 0.1;
    /// Between the two thresholds: goes on with speech, starts none.
    const UNSURE: f32 = 0.4;

    /// The probabilities of `runs` (a probability and its chunk count) one after another.
    fn chunks(runs: &[(f32, usize)]) -> Vec<f32> {
        runs.iter()
            .flat_map(|&(probability, count)| std::iter::repeat_n(probability, count))
            .collect()
    }

    /// Every segment of `probabilities` over `total_samples` of audio.
    fn segments(probabilities: &[f32], total_samples: usize) -> Vec<Segment> {
        let mut segmenter = Segmenter::new();
        let mut found: Vec<Segment> = probabilities
            .iter()
            .filter_map(|&probability| segmenter.push(probability))
            .collect();
        found.extend(segmenter.finish(total_samples));
        found
    }

    fn segment(start_chunk: usize, end_chunk: usize) -> Segment {
        Segment {
            start: start_chunk * CHUNK_SAMPLES,
            end: end_chunk * CHUNK_SAMPLES,
        }
    }

    #[test]
    fn derived_constants_match_the_reference() {
        assert_eq!(NEG_THRESHOLD, 0.35);
        assert_eq!(MIN_SILENCE_SAMPLES, 1600);
        assert_eq!(MIN_SILENCE_CHUNKS, 4);
        assert_eq!(MIN_SPEECH_SAMPLES, 4000);
    }

    #[test]
    fn a_segment_ends_at_its_last_speech_chunk_after_enough_silence() {
        let probabilities = chunks(&[(SILENCE, 2), (SPEECH, 10), (SILENCE, 6)]);
        let total = probabilities.len() * CHUNK_SAMPLES;
        assert_eq!(segments(&probabilities, total), [segment(2, 12)]);
    }

    #[test]
    fn short_blips_are_dropped() {
        // 7 chunks are 3584 samples, under 4000; 8 are 4096.
        let probabilities = chunks(&[
            (SILENCE, 3),
            (SPEECH, 7),
            (SILENCE, 10),
            (SPEECH, 8),
            (SILENCE, 4),
        ]);
        let total = probabilities.len() * CHUNK_SAMPLES;
        assert_eq!(segments(&probabilities, total), [segment(20, 28)]);
    }

    #[test]
    fn short_dips_do_not_split_a_segment() {
        let probabilities = chunks(&[
            (SILENCE, 2),
            (SPEECH, 10),
            (SILENCE, MIN_SILENCE_CHUNKS - 1),
            (SPEECH, 10),
            (SILENCE, MIN_SILENCE_CHUNKS),
        ]);
        let total = probabilities.len() * CHUNK_SAMPLES;
        assert_eq!(segments(&probabilities, total), [segment(2, 25)]);
    }

    #[test]
    fn a_dip_of_min_silence_chunks_splits_a_segment() {
        let probabilities = chunks(&[
            (SPEECH, 10),
            (SILENCE, MIN_SILENCE_CHUNKS),
            (SPEECH, 10),
            (SILENCE, MIN_SILENCE_CHUNKS),
        ]);
        let total = probabilities.len() * CHUNK_SAMPLES;
        assert_eq!(
            segments(&probabilities, total),
            [segment(0, 10), segment(14, 24)]
        );
    }

    #[test]
    fn between_the_thresholds_speech_goes_on_but_does_not_start() {
        let probabilities = chunks(&[(UNSURE, 10), (SPEECH, 1), (UNSURE, 10), (SILENCE, 4)]);
        let total = probabilities.len() * CHUNK_SAMPLES;
        assert_eq!(segments(&probabilities, total), [segment(10, 21)]);
    }

    #[test]
    fn the_threshold_itself_starts_speech() {
        let probabilities = chunks(&[(0.5, 1), (UNSURE, 9)]);
        let total = probabilities.len() * CHUNK_SAMPLES;
        assert_eq!(segments(&probabilities, total), [segment(0, 10)]);
    }

    #[test]
    fn a_segment_open_at_the_end_ends_at_its_last_speech_chunk() {
        // Fewer silent chunks than it takes to end it: the end is the speech's, not the audio's.
        let probabilities = chunks(&[(SPEECH, 10), (SILENCE, 2)]);
        let total = probabilities.len() * CHUNK_SAMPLES;
        assert_eq!(segments(&probabilities, total), [segment(0, 10)]);
    }

    #[test]
    fn a_segment_open_at_the_end_is_clamped_to_the_audio() {
        // 11 chunks, the last zero-padded: the audio ends 100 samples into it.
        let probabilities = chunks(&[(SILENCE, 1), (SPEECH, 10)]);
        let total = 10 * CHUNK_SAMPLES + 100;
        assert_eq!(
            segments(&probabilities, total),
            [Segment {
                start: CHUNK_SAMPLES,
                end: total
            }]
        );
    }

    #[test]
    fn a_short_segment_open_at_the_end_is_dropped() {
        let probabilities = chunks(&[(SILENCE, 1), (SPEECH, 8)]);
        // 8 chunks would be 4096 samples; clamped to 3900, under 4000.
        let total = CHUNK_SAMPLES + 3900;
        assert!(segments(&probabilities, total).is_empty());
    }

    #[test]
    fn seconds_are_sample_positions_over_the_rate() {
        let found = Segment {
            start: 108_544,
            end: 115_200,
        };
        assert_eq!(found.start_seconds(), 6.784);
        assert_eq!(found.end_seconds(), 7.2);
    }
}
