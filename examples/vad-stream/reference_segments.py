"""Reference speech segments for the vad-stream example, computed with onnxruntime.

Usage:
    python reference_segments.py MODEL.onnx AUDIO.wav

MODEL.onnx is silero-vad 6.2.3's ``silero_vad/data/silero_vad.onnx``
(inputs: ``input`` float32[1, N], ``state`` float32[2, 1, 128], ``sr`` int64
scalar; outputs: ``output`` [1, 1] speech probability, ``stateN`` [2, 1, 128]).

AUDIO.wav must be a 16 kHz integer PCM WAV (8/16/32-bit, any channel count;
channels are averaged to mono), as read by the stdlib ``wave`` module.
Other rates are refused.

The audio is cut into consecutive CHUNK_SAMPLES-sample chunks (the last partial
chunk zero-padded). Each chunk goes through the model once, carrying the
recurrent state from chunk to chunk (zeros at the start). Like silero-vad's
own OnnxWrapper, the model input is the last CONTEXT_SAMPLES (64) samples of
the previous chunk (zeros before the first chunk) followed by the 512 chunk
samples, i.e. float32[1, 576]. The graph also accepts [1, 512], but then its
probabilities stay near 0 even on clear speech (max ~0.001 on the example
audio), so the context is required in practice.

The per-chunk probabilities are turned into segments by a hysteresis
segmenter (see ``Segmenter``):

* not in speech: a chunk with probability >= THRESHOLD starts a segment at
  the chunk's first sample;
* in speech: a chunk with probability >= THRESHOLD - NEG_THRESHOLD_OFFSET is
  a speech chunk; MIN_SILENCE_MS worth of consecutive chunks below that
  (rounded up to whole chunks) ends the segment at the end sample of the last
  speech chunk before the silence;
* a segment still open at the end of the audio ends at the end of its last
  speech chunk, clamped to the audio length;
* segments shorter than MIN_SPEECH_MS (end - start, in samples) are dropped.

Sample positions are 0-based; ``end`` is exclusive.

Output on stdout (nothing else is printed there):
    {"chunk_probabilities": [p0, p1, ...],
     "segments": [{"start": sample, "end": sample}, ...]}
"""

import json
import sys
import wave

import numpy as np
import onnxruntime as ort

SAMPLE_RATE = 16000
CHUNK_SAMPLES = 512
CONTEXT_SAMPLES = 64  # prepended from the previous chunk: model input 576
STATE_SHAPE = (2, 1, 128)

THRESHOLD = 0.5  # probability that starts speech
NEG_THRESHOLD_OFFSET = 0.15  # speech continues while p >= THRESHOLD - this
MIN_SILENCE_MS = 100  # consecutive low-probability time that ends speech
MIN_SPEECH_MS = 250  # shorter segments are dropped

NEG_THRESHOLD = THRESHOLD - NEG_THRESHOLD_OFFSET
MIN_SILENCE_SAMPLES = SAMPLE_RATE * MIN_SILENCE_MS // 1000  # 1600
MIN_SILENCE_CHUNKS = -(-MIN_SILENCE_SAMPLES // CHUNK_SAMPLES)  # ceil: 4
MIN_SPEECH_SAMPLES = SAMPLE_RATE * MIN_SPEECH_MS // 1000  # 4000


def read_wav_mono_f32(path):
    """Returns (samples float32 in [-1, 1], averaged to mono, sample_rate)."""
    try:
        with wave.open(path, "rb") as w:
            channels, width = w.getnchannels(), w.getsampwidth()
            rate = w.getframerate()
            raw = w.readframes(w.getnframes())
    except wave.Error as e:
        raise SystemExit(f"{path}: {e} (need integer PCM WAV)")
    if width == 2:
        data = np.frombuffer(raw, dtype="<i2").astype(np.float32) / 32768.0
    elif width == 4:
        data = np.frombuffer(raw, dtype="<i4").astype(np.float32) / 2147483648.0
    elif width == 1:
        data = (np.frombuffer(raw, dtype=np.uint8).astype(np.float32) - 128.0) / 128.0
    else:
        raise SystemExit(f"{path}: unsupported sample width {width} bytes")
    return data.reshape(-1, channels).mean(axis=1, dtype=np.float32), rate


def chunk_probabilities(model_path, audio):
    opts = ort.SessionOptions()
    opts.inter_op_num_threads = 1
    opts.intra_op_num_threads = 1
    session = ort.InferenceSession(
        model_path, sess_options=opts, providers=["CPUExecutionProvider"]
    )
    n_chunks = -(-len(audio) // CHUNK_SAMPLES)
    padded = np.zeros(n_chunks * CHUNK_SAMPLES, dtype=np.float32)
    padded[: len(audio)] = audio
    state = np.zeros(STATE_SHAPE, dtype=np.float32)
    context = np.zeros(CONTEXT_SAMPLES, dtype=np.float32)
    sr = np.array(SAMPLE_RATE, dtype=np.int64)
    probs = []
    for i in range(n_chunks):
        chunk = padded[i * CHUNK_SAMPLES:(i + 1) * CHUNK_SAMPLES]
        x = np.concatenate([context, chunk])[None, :]
        out, state = session.run(None, {"input": x, "state": state, "sr": sr})
        probs.append(float(out.reshape(-1)[0]))
        context = x[0, x.shape[1] - CONTEXT_SAMPLES:]
    return probs


class Segmenter:
    """Streaming hysteresis segmenter over per-chunk probabilities."""

    def __init__(self):
        self.chunk_index = 0
        self.in_speech = False
        self.start = 0
        self.last_speech_end = 0  # end sample of the last speech chunk
        self.silent_chunks = 0

    def push(self, prob):
        """Feeds one chunk's probability; returns a finished (start, end) or None."""
        chunk_start = self.chunk_index * CHUNK_SAMPLES
        chunk_end = chunk_start + CHUNK_SAMPLES
        self.chunk_index += 1
        if not self.in_speech:
            if prob >= THRESHOLD:
                self.in_speech = True
                self.start = chunk_start
                self.last_speech_end = chunk_end
                self.silent_chunks = 0
            return None
        if prob >= NEG_THRESHOLD:
            self.last_speech_end = chunk_end
            self.silent_chunks = 0
            return None
        self.silent_chunks += 1
        if self.silent_chunks >= MIN_SILENCE_CHUNKS:
            self.in_speech = False
            return self._emit(self.start, self.last_speech_end)
        return None

    def finish(self, total_samples):
        """Ends the stream; returns the open segment (clamped) or None."""
        if not self.in_speech:
            return None
        self.in_speech = False
        return self._emit(self.start, min(self.last_speech_end, total_samples))

    @staticmethod
    def _emit(start, end):
        if end - start < MIN_SPEECH_SAMPLES:
            return None
        return (start, end)


def segments_from_probabilities(probs, total_samples):
    seg = Segmenter()
    out = []
    for p in probs:
        s = seg.push(p)
        if s is not None:
            out.append(s)
    s = seg.finish(total_samples)
    if s is not None:
        out.append(s)
    return out


def main(argv):
    if len(argv) != 3:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    model_path, audio_path = argv[1], argv[2]
    audio, rate = read_wav_mono_f32(audio_path)
    if rate != SAMPLE_RATE:
        print(f"{audio_path}: sample rate {rate} Hz, need {SAMPLE_RATE} Hz", file=sys.stderr)
        return 1
    probs = chunk_probabilities(model_path, audio)
    segments = segments_from_probabilities(probs, len(audio))
    json.dump(
        {
            "chunk_probabilities": probs,
            "segments": [{"start": s, "end": e} for s, e in segments],
        },
        sys.stdout,
    )
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
