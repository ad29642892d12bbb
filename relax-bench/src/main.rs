//! `cargo run --release -p relax-bench [-- --quick | --check] [--only NAME,...]`: median latency of
//! TVM-compiled models called through relax-runtime, side by side in one run with
//! onnxruntime on the same `.onnx` files and inputs, and numpy's matmul (OpenBLAS), all
//! with the same thread count. `torch_cnn` is compiled from a PyTorch module and from its
//! ONNX export (with the same weights): `torch_vs_onnx_same_model` is the first's median
//! over the second's.
//!
//! Columns: *default* (the model declared with nothing but its source: relax-runtime's
//! kernels, default schedules, no tuning), *tuned* (meta-schedule records, where the
//! bench has them), onnxruntime. The last line is `summary: key=value ...` (ratios are
//! our median / onnxruntime's). `--check` instead compares every model's output with
//! onnxruntime's on the same inputs and fails above 1e-4 (relative to 1 + |expected|;
//! for a bf16 build, and the int8 row's, 5e-2 relative to 1 + the output's largest value,
//! with a classifier's top-1 the same; it also compares such a build with the same model
//! in float32).
//! `--only` keeps the named models (their rows, and a summary of their keys alone).
//!
//! ResNet-50, MobileNetV2, the OCR detector and MiniLM at 128 tokens are also timed in
//! OpenVINO, compiled with its f32 hint and with its default precision (bf16 where the CPU
//! has AVX512-BF16 or AMX): `<row>_f32_vs_openvino_f32` and `<row>_f32_vs_openvino`; and
//! their builds with `precision = "bf16"` (`resnet50_bf16`, ...) against OpenVINO's
//! default: `<row>_bf16_vs_openvino`. `resnet50_int8` is ResNet-50 quantized by
//! onnxruntime's static quantizer (QDQ), against onnxruntime running it on its int8
//! kernels: `resnet50_int8_vs_ort_int8`.
//!
//! onnxruntime, OpenVINO and numpy run in a Python side harness (`ort_bench.py`, in the tests'
//! reference venv under `target/test-python`, made on first use with pip), which times a
//! case when asked: a full run measures each case in 5 interleaved rounds (default,
//! tuned, onnxruntime) and reports the median of the rounds' medians, so that the
//! shared machine's noisy spells hit every column alike.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use relax_runtime::{Session, Tensor};
use serde_json::{json, Value};

mod tract_peer;

relax_runtime::include_model!("mlp_b1");
relax_runtime::include_model!("mlp_b64");
relax_runtime::include_model!("matmul");
relax_runtime::include_model!("cnn");
relax_runtime::include_model!("add");
relax_runtime::include_model!("tiny_mlp");
relax_runtime::include_model!("kws_cnn");
relax_runtime::include_model!("vad_chunk");
relax_runtime::include_model!("vad_chunk_ifless");
relax_runtime::include_model!("resnet50");
relax_runtime::include_model!("densenet121");
relax_runtime::include_model!("inception_v1");
relax_runtime::include_model!("inception_v2");
relax_runtime::include_model!("shufflenet");
relax_runtime::include_model!("squeezenet");
relax_runtime::include_model!("mobilenet_v2");
relax_runtime::include_model!("efficientnet_b0");
relax_runtime::include_model!("mobilenet_v3");
relax_runtime::include_model!("ocr_det");
relax_runtime::include_model!("minilm");
relax_runtime::include_model!("minilm_bf16");
relax_runtime::include_model!("resnet50_bf16");
relax_runtime::include_model!("resnet50_int8");
relax_runtime::include_model!("mobilenet_v2_bf16");
relax_runtime::include_model!("ocr_det_bf16");
relax_runtime::include_model!("torch_cnn");
relax_runtime::include_model!("torch_cnn_onnx");
relax_runtime::include_model!("crnn");
relax_runtime::include_model!("gru");
relax_runtime::include_model!("mlp_b1_tuned");
relax_runtime::include_model!("mlp_b64_tuned");
relax_runtime::include_model!("matmul_tuned");
relax_runtime::include_model!("cnn_tuned");
relax_runtime::include_model!("minilm_s128_tuned");
relax_runtime::include_model!("resnet50_tuned");

const THREADS: usize = 2;

/// The small models' rows, whose summary keys drop `_default` (`tiny_mlp_vs_ort`): each
/// has one build, declared with its source alone.
const SMALL_ROWS: [&str; 4] = ["tiny_mlp", "kws_cnn", "vad_chunk", "vad_chunk_ifless"];

/// The rows measured against OpenVINO too (issue 56's references): compiled with its f32
/// hint and with its default precision (bf16 on a CPU with AVX512-BF16 or AMX).
const OPENVINO_ROWS: [&str; 8] = [
    "resnet50",
    "mobilenet_v2",
    "ocr_det",
    "minilm_s128",
    "resnet50_bf16",
    "mobilenet_v2_bf16",
    "ocr_det_bf16",
    "minilm_s128_bf16",
];

/// The worst difference `--check` accepts from onnxruntime: float32 builds (relative to
/// `1 + |expected|`), and builds declared with `precision = "bf16"`, whose products round
/// their operands to 8 significant bits, and the QDQ int8 model, whose activations round
/// to 8 bits where onnxruntime's do, a float rounding apart (relative to `1 + ` the
/// output's largest value; a classifier's top-1 must agree too). OpenVINO's own bf16 measures 2.6e-2 so on
/// MobileNetV2 (seeded random weights, 52 layers deep), 1.1e-2 on ResNet-50.
const F32_BOUND: f64 = 1e-4;
const BF16_BOUND: f64 = 5e-2;

/// The pause before the shared-model measurements (see there).
const SHARED_SETTLE: Duration = Duration::from_secs(3);

/// Interleaved rounds per case in a full run (one with `--quick`).
const ROUNDS: usize = 5;

/// ocr_det's multiply-adds at 1x3x480x640: its convolutions and transposed convolutions
/// at the sizes ONNX's shape inference gives.
const OCR_DET_MULTIPLY_ADDS: f64 = 1.429e9;

/// What an input holds.
#[derive(Clone, Copy)]
enum Kind {
    /// Seeded random floats in [0, 1).
    Float,
    /// Seeded token ids in [1000, 2000).
    TokenIds,
    /// All ones.
    Mask,
    /// One int64 value everywhere (a sample rate).
    Integer(i64),
}

struct Input {
    name: &'static str,
    shape: Vec<usize>,
    kind: Kind,
}

/// One benchmark row: the same graph as default and (maybe) tuned builds, and as ONNX.
struct Case {
    name: &'static str,
    onnx: PathBuf,
    function: &'static str,
    inputs: Vec<Input>,
    flops: f64,
    default: Session,
    tuned: Option<Session>,
    /// For a PyTorch source (`default`): the same model compiled from `onnx`.
    from_onnx: Option<Session>,
    /// The same `.onnx` file in tract, for the rows measured against it too.
    tract: Option<tract_peer::Runner>,
    /// For a bf16 build (`default`): the same model in float32, which `--check` compares
    /// it with too.
    f32_build: Option<Session>,
}

/// How long to measure: at least `seconds` and `min_iterations` calls, but a slow case
/// stops after `min_slow` calls once past 5 x `seconds`.
struct Timing {
    warmup: usize,
    seconds: f64,
    min_iterations: usize,
    min_slow: usize,
}

type Failure = Box<dyn std::error::Error>;

fn main() -> Result<(), Failure> {
    let quick = std::env::args().any(|argument| argument == "--quick");
    let check = std::env::args().any(|argument| argument == "--check");
    let timing = if quick {
        Timing {
            warmup: 1,
            seconds: 0.05,
            min_iterations: 3,
            min_slow: 1,
        }
    } else {
        Timing {
            warmup: 5,
            seconds: 1.5,
            min_iterations: 30,
            min_slow: 3,
        }
    };
    // relax-runtime's threads per call (the benchmark's onnxruntime gets as many).
    if std::env::var_os("TVM_NUM_THREADS").is_none() {
        std::env::set_var("TVM_NUM_THREADS", THREADS.to_string());
    }
    let mut cases = cases()?;
    let only = only_models()?;
    if let Some(names) = &only {
        let all: Vec<&str> = cases.iter().map(|case| case.name).collect();
        if let Some(unknown) = names.iter().find(|name| !all.contains(&name.as_str())) {
            return Err(format!(
                "--only {}: `{unknown}` is not a model of the bench (they are: {})",
                names.join(","),
                all.join(", ")
            )
            .into());
        }
        cases.retain(|case| names.iter().any(|name| name == case.name));
    }
    if check {
        return check_outputs(&cases);
    }
    let rounds = if quick { 1 } else { ROUNDS };
    let round_timing = Timing {
        seconds: timing.seconds / rounds as f64,
        min_iterations: timing.min_iterations.div_ceil(rounds),
        ..timing
    };
    let mut peers = Peers::start(&cases, &round_timing)?;
    println!(
        "relax-bench: median latency, {THREADS} threads (TVM_NUM_THREADS={}, onnxruntime intra-op {THREADS}, BLAS {THREADS}){}",
        std::env::var("TVM_NUM_THREADS").unwrap_or_default(),
        if quick { ", --quick" } else { "" }
    );
    println!("BLAS: {}", peers.blas);
    println!("OpenVINO: {}", peers.openvino);
    println!("CPU: {}", cpu_description());
    println!(
        "our bf16 kernels: {} (RELAX_KERNELS_NO_AMX=1 keeps them off AMX)",
        relax_kernels::bf16_instructions()
    );
    println!();
    println!(
        "{:<15} {:>12} {:>12} {:>12} {:>12} {:>10} {:>10}",
        "model", "default µs", "tuned µs", "onnxrt µs", "default/ort", "tuned/ort", "best GF/s"
    );
    let mut summary: Vec<(String, f64)> = Vec::new();
    for case in &cases {
        // Rounds of (default, tuned, onnxruntime), so that a noisy spell of the shared
        // machine hits all three alike; each figure is the median of its rounds' medians.
        let (mut defaults, mut tuneds, mut orts) = (Vec::new(), Vec::new(), Vec::new());
        let (mut from_onnxs, mut tracts) = (Vec::new(), Vec::new());
        let (mut openvino_f32s, mut openvinos) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            defaults.push(median_call(
                &case.default,
                case.function,
                case,
                &round_timing,
            )?);
            settle(quick);
            if let Some(session) = &case.tuned {
                tuneds.push(median_call(session, case.function, case, &round_timing)?);
                settle(quick);
            }
            if let Some(session) = &case.from_onnx {
                from_onnxs.push(median_call(session, "main", case, &round_timing)?);
                settle(quick);
            }
            orts.push(peers.time(case.name, "onnxruntime")?);
            settle(quick);
            if OPENVINO_ROWS.contains(&case.name) {
                openvino_f32s.push(peers.time(case.name, "openvino_f32")?);
                settle(quick);
                openvinos.push(peers.time(case.name, "openvino")?);
                settle(quick);
            }
            if let Some(tract) = &case.tract {
                tracts.push(tract.median_seconds(
                    round_timing.warmup,
                    round_timing.seconds,
                    round_timing.min_iterations,
                )?);
                settle(quick);
            }
        }
        let default = median(&mut defaults);
        let tuned = (!tuneds.is_empty()).then(|| median(&mut tuneds));
        let ort = median(&mut orts);
        let best = tuned.map_or(default, |tuned| tuned.min(default));
        println!(
            "{:<15} {:>12.1} {:>12} {:>12.1} {:>12.3} {:>10} {:>10.1}",
            case.name,
            default * 1e6,
            tuned.map_or("-".to_string(), |value| format!("{:.1}", value * 1e6)),
            ort * 1e6,
            default / ort,
            tuned.map_or("-".to_string(), |value| format!("{:.3}", value / ort)),
            case.flops / best / 1e9,
        );
        summary.push((format!("{}_default_vs_ort", case.name), default / ort));
        if SMALL_ROWS.contains(&case.name) {
            summary.push((format!("{}_vs_ort", case.name), default / ort));
        }
        if case.name == "resnet50_int8" {
            summary.push(("resnet50_int8_vs_ort_int8".to_string(), default / ort));
        }
        if !openvinos.is_empty() {
            let (openvino_f32, openvino) = (median(&mut openvino_f32s), median(&mut openvinos));
            println!(
                "{:<15} {:>12} {:>12} {:>12.1} {:>12.3} {:>10} {:>10}   (OpenVINO f32 hint; default/openvino_f32 {:.3})",
                "  openvino f32",
                "",
                "",
                openvino_f32 * 1e6,
                default / openvino_f32,
                "",
                "",
                default / openvino_f32
            );
            println!(
                "{:<15} {:>12} {:>12} {:>12.1} {:>12.3} {:>10} {:>10}   (OpenVINO default precision; default/openvino {:.3})",
                "  openvino",
                "",
                "",
                openvino * 1e6,
                default / openvino,
                "",
                "",
                default / openvino
            );
            if case.f32_build.is_some() {
                // A bf16 build: against OpenVINO's default (bf16 where the CPU has it).
                summary.push((format!("{}_vs_openvino", case.name), default / openvino));
                summary.push((
                    format!("{}_vs_openvino_f32", case.name),
                    default / openvino_f32,
                ));
            } else {
                let row = case.name.trim_end_matches("_s128");
                summary.push((format!("{row}_f32_vs_openvino_f32"), default / openvino_f32));
                summary.push((format!("{row}_f32_vs_openvino"), default / openvino));
            }
        }
        if !tracts.is_empty() {
            let tract = median(&mut tracts);
            println!(
                "{:<15} {:>12} {:>12} {:>12.1} {:>12.3} {:>10} {:>10}   (tract, 1 thread; default/tract {:.3})",
                "  tract",
                "",
                "",
                tract * 1e6,
                default / tract,
                "",
                "",
                default / tract
            );
            // The if-less export stands for silero-vad in the tract row.
            summary.push((
                format!("{}_vs_tract", case.name.trim_end_matches("_ifless")),
                default / tract,
            ));
        }
        if let Some(tuned) = tuned {
            summary.push((format!("{}_tuned_vs_ort", case.name), tuned / ort));
        }
        if !from_onnxs.is_empty() {
            let from_onnx = median(&mut from_onnxs);
            println!(
                "{:<15} {:>12.1} {:>12} {:>12.1} {:>12.3} {:>10} {:>10.1}   (from its ONNX export; torch/onnx {:.3})",
                "  from onnx",
                from_onnx * 1e6,
                "",
                ort * 1e6,
                from_onnx / ort,
                "",
                case.flops / from_onnx / 1e9,
                default / from_onnx
            );
            summary.push((
                format!("{}_onnx_default_vs_ort", case.name),
                from_onnx / ort,
            ));
            summary.push(("torch_vs_onnx_same_model".to_string(), default / from_onnx));
        }
        // The recurrent models' row: the worse of their two lengths.
        for model in ["crnn", "gru"] {
            let lengths: Vec<f64> = summary
                .iter()
                .filter(|(key, _)| {
                    key.starts_with(&format!("{model}_")) && key.ends_with("_default_vs_ort")
                })
                .map(|(_, ratio)| *ratio)
                .collect();
            if lengths.len() == 2 && case.name.starts_with(model) {
                summary.push((
                    format!("{model}_default_vs_ort"),
                    lengths[0].max(lengths[1]),
                ));
            }
        }
        if case.name == "add" {
            summary.push(("add_overhead_us".to_string(), best * 1e6));
        }
        if case.name == "matmul" {
            let mut blas_rounds = Vec::new();
            for _ in 0..rounds {
                blas_rounds.push(peers.time("numpy_matmul", "numpy")?);
                settle(quick);
            }
            let blas = median(&mut blas_rounds);
            println!(
                "{:<15} {:>12} {:>12} {:>12.1} {:>12.3} {:>10} {:>10.1}   (numpy/OpenBLAS matmul; best/openblas {:.3})",
                "  numpy",
                "",
                "",
                blas * 1e6,
                default / blas,
                "",
                case.flops / blas / 1e9,
                best / blas
            );
            summary.push(("matmul_vs_openblas".to_string(), best / blas));
            summary.push(("matmul_vs_ort".to_string(), best / ort));
        }
    }
    if only.is_some() {
        let line: Vec<String> = summary
            .iter()
            .map(|(key, value)| format!("{key}={value:.3}"))
            .collect();
        println!("\nsummary: {}", line.join(" "));
        return Ok(());
    }
    let mlp = &cases[0].default;
    let seconds = timing.seconds * 2.0;
    drop(peers);
    // The idle workers of a TVM pool spin for a while after its last parallel loop
    // (TVM_THREAD_POOL_SPIN_COUNT yields) before they sleep, and the harness takes a
    // moment to exit: let both settle, so that they do not take a core from the threads
    // measured next (with a second settled in between, half of the runs measured the
    // ratio below at 1.2 instead of 1.7 once the bench ran its many-launch CNNs last).
    std::thread::sleep(SHARED_SETTLE);
    let latency_mode = throughput(mlp, &[1, 784], 1, seconds)?;
    std::thread::sleep(SHARED_SETTLE);
    relax_runtime::set_threads_per_call(1);
    // Rounds of (1 thread, 2 threads), as for the latencies; the ratio is the median of
    // the rounds' ratios.
    let (mut ones, mut twos, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..rounds {
        let one = throughput(mlp, &[1, 784], 1, seconds / rounds as f64)?;
        let two = throughput(mlp, &[1, 784], 2, seconds / rounds as f64)?;
        ones.push(one);
        twos.push(two);
        ratios.push(two / one);
    }
    relax_runtime::set_threads_per_call(0);
    let (one, two, ratio) = (median(&mut ones), median(&mut twos), median(&mut ratios));
    println!();
    println!(
        "mlp_b1, one Model shared by request threads (1 thread per call): 1 thread {one:.0} calls/s, \
         2 threads {two:.0} calls/s, ratio {ratio:.2} (one caller with {THREADS} threads per call: {latency_mode:.0} calls/s)"
    );
    summary.push(("shared_model_2_threads_vs_1".to_string(), ratio));
    println!();
    let keys = [
        "mlp_b1_tuned_vs_ort",
        "mlp_b64_tuned_vs_ort",
        "cnn_tuned_vs_ort",
        "matmul_vs_ort",
        "matmul_vs_openblas",
        "add_overhead_us",
        "minilm_s16_default_vs_ort",
        "minilm_s128_default_vs_ort",
        "minilm_b8_s128_default_vs_ort",
        "resnet50_default_vs_ort",
        "minilm_s128_tuned_vs_ort",
        "resnet50_tuned_vs_ort",
        "shared_model_2_threads_vs_1",
        "densenet121_default_vs_ort",
        "inception_v1_default_vs_ort",
        "inception_v2_default_vs_ort",
        "shufflenet_default_vs_ort",
        "squeezenet_default_vs_ort",
        "mobilenet_v2_default_vs_ort",
        "efficientnet_b0_default_vs_ort",
        "mobilenet_v3_default_vs_ort",
        "ocr_det_default_vs_ort",
        "torch_cnn_default_vs_ort",
        "torch_vs_onnx_same_model",
        "crnn_w128_default_vs_ort",
        "crnn_w512_default_vs_ort",
        "crnn_default_vs_ort",
        "gru_t50_default_vs_ort",
        "gru_t200_default_vs_ort",
        "gru_default_vs_ort",
        "tiny_mlp_vs_ort",
        "kws_cnn_vs_ort",
        "vad_chunk_vs_ort",
        "vad_chunk_ifless_vs_ort",
        "vad_chunk_vs_tract",
        "resnet50_f32_vs_openvino_f32",
        "mobilenet_v2_f32_vs_openvino_f32",
        "ocr_det_f32_vs_openvino_f32",
        "minilm_f32_vs_openvino_f32",
        "resnet50_f32_vs_openvino",
        "mobilenet_v2_f32_vs_openvino",
        "ocr_det_f32_vs_openvino",
        "minilm_f32_vs_openvino",
        // Issue 56's reduced-precision rows.
        "resnet50_bf16_vs_openvino",
        "mobilenet_v2_bf16_vs_openvino",
        "ocr_det_bf16_vs_openvino",
        "minilm_s128_bf16_vs_openvino",
        "minilm_s128_bf16_vs_openvino_f32",
        "resnet50_int8_vs_ort_int8",
    ];
    let line: Vec<String> = keys
        .iter()
        .map(|key| {
            let value = summary
                .iter()
                .find(|(name, _)| name == key)
                .map_or(f64::NAN, |(_, value)| *value);
            format!("{key}={value:.3}")
        })
        .collect();
    println!("summary: {}", line.join(" "));
    Ok(())
}

/// The names after `--only` (comma-separated), if given.
fn only_models() -> Result<Option<Vec<String>>, Failure> {
    let mut arguments = std::env::args().skip_while(|argument| argument != "--only");
    if arguments.next().is_none() {
        return Ok(None);
    }
    let names = arguments
        .next()
        .ok_or("--only needs model names, comma-separated")?;
    Ok(Some(names.split(',').map(str::to_string).collect()))
}

fn cases() -> Result<Vec<Case>, Failure> {
    let here = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let generated = PathBuf::from(env!("OUT_DIR")).join("models");
    let float = |name, shape: &[usize]| Input {
        name,
        shape: shape.to_vec(),
        kind: Kind::Float,
    };
    let text = |batch: usize, seq: usize| {
        vec![
            Input {
                name: "input_ids",
                shape: vec![batch, seq],
                kind: Kind::TokenIds,
            },
            Input {
                name: "attention_mask",
                shape: vec![batch, seq],
                kind: Kind::Mask,
            },
        ]
    };
    let mlp_flops = |batch: f64| 2.0 * batch * (784.0 * 128.0 + 128.0 * 10.0);
    // Multiply-adds of the encoder at one sequence length: projections, FFN, attention.
    let minilm_flops = |batch: f64, seq: f64| {
        2.0 * batch
            * 6.0
            * (seq * (4.0 * 384.0 * 384.0 + 2.0 * 384.0 * 1536.0) + 2.0 * seq * seq * 384.0)
    };
    let minilm = minilm::Model::load()?.into_session();
    let minilm_case = |name, batch, seq, tuned| -> Result<Case, Failure> {
        Ok(Case {
            name,
            onnx: generated.join("minilm.onnx"),
            function: "forward",
            inputs: text(batch, seq),
            flops: minilm_flops(batch as f64, seq as f64),
            default: minilm::Model::load()?.into_session(),
            tuned,
            from_onnx: None,
            tract: None,
            f32_build: None,
        })
    };
    drop(minilm);
    Ok(vec![
        Case {
            name: "mlp_b1",
            onnx: here.join("models/mlp_b1.onnx"),
            function: "main",
            inputs: vec![float("x", &[1, 784])],
            flops: mlp_flops(1.0),
            default: mlp_b1::Model::load()?.into_session(),
            tuned: Some(mlp_b1_tuned::Model::load()?.into_session()),
            from_onnx: None,
            tract: None,
            f32_build: None,
        },
        Case {
            name: "mlp_b64",
            onnx: here.join("models/mlp_b64.onnx"),
            function: "main",
            inputs: vec![float("x", &[64, 784])],
            flops: mlp_flops(64.0),
            default: mlp_b64::Model::load()?.into_session(),
            tuned: Some(mlp_b64_tuned::Model::load()?.into_session()),
            from_onnx: None,
            tract: None,
            f32_build: None,
        },
        Case {
            name: "cnn",
            onnx: here.join("models/cnn.onnx"),
            function: "main",
            inputs: vec![float("x", &[1, 3, 224, 224])],
            flops: 2.0 * 16.0 * 3.0 * 9.0 * 224.0 * 224.0 + 2.0 * 16.0 * 10.0,
            default: cnn::Model::load()?.into_session(),
            tuned: Some(cnn_tuned::Model::load()?.into_session()),
            from_onnx: None,
            tract: None,
            f32_build: None,
        },
        Case {
            name: "matmul",
            onnx: here.join("models/matmul.onnx"),
            function: "main",
            inputs: vec![float("a", &[1024, 1024]), float("b", &[1024, 1024])],
            flops: 2.0 * 1024f64.powi(3),
            default: matmul::Model::load()?.into_session(),
            tuned: Some(matmul_tuned::Model::load()?.into_session()),
            from_onnx: None,
            tract: None,
            f32_build: None,
        },
        Case {
            name: "add",
            onnx: here.join("models/add.onnx"),
            function: "main",
            inputs: vec![float("a", &[1, 4]), float("b", &[1, 4])],
            flops: 4.0,
            default: add::Model::load()?.into_session(),
            tuned: None,
            from_onnx: None,
            tract: None,
            f32_build: None,
        },
        Case {
            name: "tiny_mlp",
            onnx: here.join("models/tiny_mlp.onnx"),
            function: "main",
            inputs: vec![float("x", &[1, 64])],
            flops: 2.0 * (64.0 * 128.0 + 128.0 * 128.0 + 128.0 * 10.0),
            default: tiny_mlp::Model::load()?.into_session(),
            tuned: None,
            from_onnx: None,
            tract: None,
            f32_build: None,
        },
        Case {
            name: "kws_cnn",
            onnx: here.join("models/kws_cnn.onnx"),
            function: "main",
            inputs: vec![float("features", &[1, 1, 49, 10])],
            // Twice the multiply-adds: the 10x4 stem (64 x 40 x 125 outputs), four
            // depthwise 3x3 (64 x 9 x 125) and pointwise (64 x 64 x 125) pairs, the classifier.
            flops: 2.0
                * (64.0 * 40.0 * 125.0
                    + 4.0 * (64.0 * 9.0 * 125.0 + 64.0 * 64.0 * 125.0)
                    + 64.0 * 12.0),
            default: kws_cnn::Model::load()?.into_session(),
            tuned: None,
            from_onnx: None,
            tract: None,
            f32_build: None,
        },
        vad_chunk_case(&generated, false)?,
        vad_chunk_case(&generated, true)?,
        minilm_case("minilm_s16", 1, 16, None)?,
        minilm_case(
            "minilm_s128",
            1,
            128,
            Some(minilm_s128_tuned::Model::load()?.into_session()),
        )?,
        minilm_case("minilm_b8_s128", 8, 128, None)?,
        Case {
            name: "minilm_s128_bf16",
            default: minilm_bf16::Model::load()?.into_session(),
            f32_build: Some(minilm::Model::load()?.into_session()),
            ..minilm_case("minilm_s128_bf16", 1, 128, None)?
        },
        Case {
            name: "resnet50",
            onnx: generated.join("resnet50.onnx"),
            function: "main",
            inputs: vec![float("gpu_0/data_0", &[1, 3, 224, 224])],
            flops: 2.0 * 4.1e9,
            default: resnet50::Model::load()?.into_session(),
            tuned: Some(resnet50_tuned::Model::load()?.into_session()),
            from_onnx: None,
            tract: None,
            f32_build: None,
        },
        Case {
            // onnxruntime's static quantizer's QDQ ResNet-50, which onnxruntime runs on its
            // int8 kernels: `resnet50_int8_vs_ort_int8`.
            name: "resnet50_int8",
            f32_build: Some(resnet50::Model::load()?.into_session()),
            ..light_case(
                &generated,
                "resnet50_int8",
                "gpu_0/data_0",
                2.0 * 4.1e9,
                resnet50_int8::Model::load()?.into_session(),
            )
        },
        Case {
            name: "resnet50_bf16",
            f32_build: Some(resnet50::Model::load()?.into_session()),
            ..light_case(
                &generated,
                "resnet50",
                "gpu_0/data_0",
                2.0 * 4.1e9,
                resnet50_bf16::Model::load()?.into_session(),
            )
        },
        light_case(
            &generated,
            "densenet121",
            "data_0",
            2.0 * 2.83e9,
            densenet121::Model::load()?.into_session(),
        ),
        light_case(
            &generated,
            "inception_v1",
            "data_0",
            2.0 * 1.43e9,
            inception_v1::Model::load()?.into_session(),
        ),
        light_case(
            &generated,
            "inception_v2",
            "data_0",
            2.0 * 2.02e9,
            inception_v2::Model::load()?.into_session(),
        ),
        light_case(
            &generated,
            "shufflenet",
            "gpu_0/data_0",
            2.0 * 0.124e9,
            shufflenet::Model::load()?.into_session(),
        ),
        light_case(
            &generated,
            "squeezenet",
            "data_0",
            2.0 * 0.349e9,
            squeezenet::Model::load()?.into_session(),
        ),
        light_case(
            &generated,
            "mobilenet_v2",
            "input",
            2.0 * 0.301e9,
            mobilenet_v2::Model::load()?.into_session(),
        ),
        Case {
            name: "mobilenet_v2_bf16",
            f32_build: Some(mobilenet_v2::Model::load()?.into_session()),
            ..light_case(
                &generated,
                "mobilenet_v2",
                "input",
                2.0 * 0.301e9,
                mobilenet_v2_bf16::Model::load()?.into_session(),
            )
        },
        light_case(
            &generated,
            "efficientnet_b0",
            "input",
            2.0 * 0.386e9,
            efficientnet_b0::Model::load()?.into_session(),
        ),
        light_case(
            &generated,
            "mobilenet_v3",
            "input",
            2.0 * 0.219e9,
            mobilenet_v3::Model::load()?.into_session(),
        ),
        Case {
            name: "ocr_det",
            onnx: generated.join("ocr_det.onnx"),
            function: "main",
            inputs: vec![float("input", &[1, 3, 480, 640])],
            flops: 2.0 * OCR_DET_MULTIPLY_ADDS,
            default: ocr_det::Model::load()?.into_session(),
            tuned: None,
            from_onnx: None,
            tract: None,
            f32_build: None,
        },
        Case {
            name: "ocr_det_bf16",
            onnx: generated.join("ocr_det.onnx"),
            function: "main",
            inputs: vec![float("input", &[1, 3, 480, 640])],
            flops: 2.0 * OCR_DET_MULTIPLY_ADDS,
            default: ocr_det_bf16::Model::load()?.into_session(),
            tuned: None,
            from_onnx: None,
            tract: None,
            f32_build: Some(ocr_det::Model::load()?.into_session()),
        },
        Case {
            name: "torch_cnn",
            onnx: generated.join("torch_cnn.onnx"),
            function: "forward",
            inputs: vec![float("x", &[1, 3, 224, 224])],
            // Twice its multiply-adds: stem 59M, stages 116M + 3 x 103M, classifier 0.3M.
            flops: 2.0 * 0.484e9,
            default: torch_cnn::Model::load()?.into_session(),
            tuned: None,
            from_onnx: Some(torch_cnn_onnx::Model::load()?.into_session()),
            tract: None,
            f32_build: None,
        },
        recurrent_case(&generated, "crnn_w128", "image", &[1, 1, 32, 128])?,
        recurrent_case(&generated, "crnn_w512", "image", &[1, 1, 32, 512])?,
        recurrent_case(&generated, "gru_t50", "frames", &[50, 1, 80])?,
        recurrent_case(&generated, "gru_t200", "frames", &[200, 1, 80])?,
    ])
}

/// silero-vad on one chunk (576 samples: 64 of context and 512 new) with its state, as
/// an app streaming 16 kHz audio calls it: its export with an If (the package's default),
/// or the one without, which is also measured in tract (`vad_chunk_vs_tract`: tract
/// cannot load the other).
fn vad_chunk_case(generated: &Path, ifless: bool) -> Result<Case, Failure> {
    let (name, file, default) = if ifless {
        (
            "vad_chunk_ifless",
            "silero_vad_op18_ifless.onnx",
            vad_chunk_ifless::Model::load()?.into_session(),
        )
    } else {
        (
            "vad_chunk",
            "silero_vad.onnx",
            vad_chunk::Model::load()?.into_session(),
        )
    };
    let case = Case {
        name,
        onnx: generated.join(file),
        function: "main",
        inputs: vec![
            Input {
                name: "input",
                shape: vec![1, 576],
                kind: Kind::Float,
            },
            Input {
                name: "state",
                shape: vec![2, 1, 128],
                kind: Kind::Float,
            },
            Input {
                name: "sr",
                shape: vec![],
                kind: Kind::Integer(16000),
            },
        ],
        // Its STFT as a convolution (258 x 256 taps over 4 frames), four convolutions
        // (129->128, 128->64, 64->64, 64->128, kernel 3), one LSTM step (4 x 128 x 256)
        // and the decoder.
        flops: 2.0
            * (258.0 * 256.0 * 4.0
                + 3.0 * (129.0 * 128.0 * 4.0 + 128.0 * 64.0 * 2.0 + 64.0 * 64.0 + 64.0 * 128.0)
                + 4.0 * 128.0 * 256.0
                + 128.0),
        default,
        tuned: None,
        from_onnx: None,
        tract: None,
        f32_build: None,
    };
    // In the order of the compiled function's arguments (the two exports differ).
    let mut case = case;
    let order: Vec<String> = case.default.signature().functions[0]
        .inputs
        .iter()
        .map(|input| input.name.clone())
        .collect();
    case.inputs
        .sort_by_key(|input| order.iter().position(|name| name == input.name));
    if !ifless {
        return Ok(case);
    }
    let tensors = inputs(&case)?;
    let values: Vec<(&str, &[usize], tract_peer::Value<'_>)> = case
        .inputs
        .iter()
        .zip(&tensors)
        .map(|(input, tensor)| {
            let value = match input.kind {
                Kind::Integer(_) => tract_peer::Value::Integers(tensor.as_slice::<i64>()?),
                _ => tract_peer::Value::Floats(tensor.as_slice::<f32>()?),
            };
            Ok((input.name, input.shape.as_slice(), value))
        })
        .collect::<Result<_, relax_runtime::Error>>()?;
    let tract = tract_peer::Runner::new(&case.onnx, &values)
        .map_err(|error| format!("tract could not load {}: {error:?}", case.onnx.display()))?;
    Ok(Case {
        tract: Some(tract),
        ..case
    })
}

/// The recurrent models build.rs generates (make_models.py's crnn and gru), at one
/// length of their symbolic dim: `name` is the model's, `_`, and the length's tag. One
/// library per model serves both lengths.
fn recurrent_case(
    generated: &Path,
    name: &'static str,
    input: &'static str,
    shape: &[usize],
) -> Result<Case, Failure> {
    let (model, default) = if name.starts_with("crnn") {
        ("crnn", crnn::Model::load()?.into_session())
    } else {
        ("gru", gru::Model::load()?.into_session())
    };
    // Twice the multiply-adds: crnn's convolutions (per column of the 32-row image:
    // 64x9 at 32 rows, 128x64x9 at 16 / 2, 256x128x9 at 8 / 4, 256x256x9 at 4 / 4), its
    // two bidirectional LSTM layers (4 gates of 128 over 256 inputs + 128 state, both
    // directions) and classifier; gru's two layers (3 gates of 256 over 80 or 256 inputs
    // + 256 state) and classifier.
    let flops = if model == "crnn" {
        let width = shape[3] as f64;
        let convolutions = width
            * (64.0 * 9.0 * 32.0
                + 128.0 * 64.0 * 9.0 * 8.0
                + 256.0 * 128.0 * 9.0 * 2.0
                + 256.0 * 256.0 * 9.0);
        let steps = width / 4.0;
        2.0 * (convolutions + steps * (2.0 * 2.0 * 4.0 * 128.0 * 384.0 + 256.0 * 97.0))
    } else {
        let steps = shape[0] as f64;
        2.0 * steps * (3.0 * 256.0 * (80.0 + 256.0) + 3.0 * 256.0 * 512.0 + 256.0 * 64.0)
    };
    Ok(Case {
        name,
        onnx: generated.join(format!("{model}.onnx")),
        function: "main",
        inputs: vec![Input {
            name: input,
            shape: shape.to_vec(),
            kind: Kind::Float,
        }],
        flops,
        default,
        tuned: None,
        from_onnx: None,
        tract: None,
        f32_build: None,
    })
}

/// One of the light models build.rs generates besides ResNet-50: one 1x3x224x224 image,
/// no tuned build. `flops`: twice its convolutions' multiply-adds (counted on the graph).
/// `generated`: the folder build.rs writes them to.
fn light_case(
    generated: &Path,
    name: &'static str,
    input: &'static str,
    flops: f64,
    default: Session,
) -> Case {
    Case {
        name,
        onnx: generated.join(format!("{name}.onnx")),
        function: "main",
        inputs: vec![Input {
            name: input,
            shape: vec![1, 3, 224, 224],
            kind: Kind::Float,
        }],
        flops,
        default,
        tuned: None,
        from_onnx: None,
        tract: None,
        f32_build: None,
    }
}

/// Deterministic inputs of a case, with the seed of each input's position.
fn inputs(case: &Case) -> Result<Vec<Tensor>, Failure> {
    case.inputs
        .iter()
        .enumerate()
        .map(|(index, input)| {
            let count = input.shape.iter().product::<usize>();
            let mut state = (index as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
            let mut next = move || {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state >> 40
            };
            Ok(match input.kind {
                Kind::Float => {
                    let values: Vec<f32> = (0..count)
                        .map(|_| next() as f32 / (1u64 << 24) as f32)
                        .collect();
                    Tensor::from_slice(&values, &input.shape)?
                }
                Kind::TokenIds => {
                    let values: Vec<i64> =
                        (0..count).map(|_| 1000 + (next() % 1000) as i64).collect();
                    Tensor::from_slice(&values, &input.shape)?
                }
                Kind::Mask => Tensor::from_slice(&vec![1i64; count], &input.shape)?,
                Kind::Integer(value) => Tensor::from_slice(&vec![value; count], &input.shape)?,
            })
        })
        .collect()
}

/// Median seconds of one call of `function` with the case's inputs.
fn median_call(
    session: &Session,
    function: &str,
    case: &Case,
    timing: &Timing,
) -> Result<f64, Failure> {
    let vm = session.virtual_machine()?;
    let function = vm.function(function)?;
    let inputs = inputs(case)?;
    let arguments: Vec<&Tensor> = inputs.iter().collect();
    let warmup_started = Instant::now();
    for _ in 0..timing.warmup {
        function.call(&arguments)?;
        if warmup_started.elapsed().as_secs_f64() > timing.seconds {
            break;
        }
    }
    let mut times: Vec<Duration> = Vec::new();
    let started = Instant::now();
    let budget = Duration::from_secs_f64(timing.seconds);
    loop {
        let elapsed = started.elapsed();
        let enough = elapsed >= budget && times.len() >= timing.min_iterations;
        let slow_enough = elapsed >= budget * 5 && times.len() >= timing.min_slow;
        if enough || slow_enough {
            break;
        }
        let call_started = Instant::now();
        let output = function.call(&arguments)?;
        times.push(call_started.elapsed());
        drop(output);
    }
    times.sort();
    Ok(times[times.len() / 2].as_secs_f64())
}

/// Calls per second of `session`'s `main` from `threads` threads sharing it, each
/// calling as fast as it can for `seconds`.
fn throughput(
    session: &Session,
    shape: &[usize],
    threads: usize,
    seconds: f64,
) -> Result<f64, Failure> {
    let input = Tensor::from_slice(&vec![0.5f32; shape.iter().product()], shape)?;
    let calls = std::sync::atomic::AtomicUsize::new(0);
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    std::thread::scope(|scope| -> relax_runtime::Result<()> {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| -> relax_runtime::Result<()> {
                    // Warm this thread's VM and TVM thread pool first.
                    session.call("main", &[&input])?;
                    let mut mine = 0;
                    while Instant::now() < deadline {
                        session.call("main", &[&input])?;
                        mine += 1;
                    }
                    calls.fetch_add(mine, std::sync::atomic::Ordering::Relaxed);
                    Ok(())
                })
            })
            .collect();
        for worker in workers {
            worker.join().expect("a benchmark thread panicked")?;
        }
        Ok(())
    })?;
    Ok(calls.into_inner() as f64 / seconds)
}

/// The cases as the harness takes them, with their inputs' values.
fn harness_cases(cases: &[Case]) -> Result<Vec<Value>, Failure> {
    cases
        .iter()
        .map(|case| {
            let tensors = inputs(case)?;
            let inputs: serde_json::Map<String, Value> = case
                .inputs
                .iter()
                .zip(&tensors)
                .map(|(input, tensor)| {
                    let (dtype, data) = match input.kind {
                        Kind::Float => ("float32", json!(tensor.as_slice::<f32>()?)),
                        Kind::TokenIds | Kind::Mask | Kind::Integer(_) => {
                            ("int64", json!(tensor.as_slice::<i64>()?))
                        }
                    };
                    Ok((
                        input.name.to_string(),
                        json!({"shape": input.shape, "dtype": dtype, "data": data}),
                    ))
                })
                .collect::<Result<_, relax_runtime::Error>>()?;
            Ok(json!({
                "name": case.name,
                "model": case.onnx,
                "inputs": inputs,
                "openvino": OPENVINO_ROWS.contains(&case.name),
            }))
        })
        .collect()
}

/// Runs the side harness with `spec` (plus the cases) and returns its JSON.
/// The side harness, with the test venv's Python.
fn harness_command() -> Command {
    let here = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut command = Command::new(relax_cargo_tests::test_python());
    command
        .arg(here.join("ort_bench.py"))
        // Set on some machines for old OpenBLAS builds; they slow a current numpy.
        .env_remove("OPENBLAS_CORETYPE")
        .env_remove("OPENBLAS_L2_SIZE");
    command
}

fn harness(mut spec: Value, cases: &[Case]) -> Result<Value, Failure> {
    spec["threads"] = json!(THREADS);
    spec["cases"] = json!(harness_cases(cases)?);
    let mut child = harness_command()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()?;
    child
        .stdin
        .take()
        .expect("piped stdin")
        .write_all(spec.to_string().as_bytes())?;
    let output = child.wait_with_output()?;
    if !output.status.success() {
        return Err(format!("the onnxruntime harness failed ({})", output.status).into());
    }
    Ok(serde_json::from_slice(&output.stdout)?)
}

/// onnxruntime and numpy in the side harness, with the same timing rules, timing one
/// case at a time on request (between relax-runtime's own runs of it).
struct Peers {
    child: std::process::Child,
    /// The harness's stdin (None once closed).
    requests: Option<std::process::ChildStdin>,
    answers: std::io::BufReader<std::process::ChildStdout>,
    blas: String,
    /// OpenVINO's version, the CPU it names and its default precision there.
    openvino: String,
}

impl Drop for Peers {
    /// Closes the harness's stdin (it exits) and waits for it.
    fn drop(&mut self) {
        drop(self.requests.take());
        let _ = self.child.wait();
    }
}

impl Peers {
    fn start(cases: &[Case], timing: &Timing) -> Result<Peers, Failure> {
        let mut spec = json!({
            "mode": "serve",
            "warmup": timing.warmup,
            "seconds": timing.seconds,
            "min_iterations": timing.min_iterations,
            "matmul": 1024,
            "threads": THREADS,
        });
        spec["cases"] = json!(harness_cases(cases)?);
        let mut child = harness_command()
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()?;
        let mut requests = child.stdin.take().expect("piped stdin");
        writeln!(requests, "{spec}")?;
        let answers = std::io::BufReader::new(child.stdout.take().expect("piped stdout"));
        let mut peers = Peers {
            child,
            requests: Some(requests),
            answers,
            blas: String::new(),
            openvino: String::new(),
        };
        let ready = peers.answer()?;
        peers.blas = ready["blas"].as_str().unwrap_or("unknown").to_string();
        peers.openvino = ready["openvino"].as_str().unwrap_or("unknown").to_string();
        Ok(peers)
    }

    fn answer(&mut self) -> Result<Value, Failure> {
        use std::io::BufRead;
        let mut line = String::new();
        if self.answers.read_line(&mut line)? == 0 {
            let status = self.child.wait()?;
            return Err(format!("the onnxruntime harness stopped ({status})").into());
        }
        Ok(serde_json::from_str(&line)?)
    }

    /// The median seconds of one run of `name` (or "numpy_matmul") by `engine`:
    /// "onnxruntime", "openvino_f32" or "openvino" (its default precision).
    fn time(&mut self, name: &str, engine: &str) -> Result<f64, Failure> {
        let requests = self.requests.as_mut().ok_or("the harness was closed")?;
        writeln!(requests, "{}", json!({ "time": name, "engine": engine }))?;
        requests.flush()?;
        let answer = self.answer()?;
        answer["seconds"]
            .as_f64()
            .ok_or_else(|| format!("the harness answered {answer}").into())
    }
}

/// Waits for the idle threads of the run just measured to stop spinning (relax-runtime's
/// pool workers spin for 100 µs after their last task, onnxruntime's for a while), so
/// that they take no core from the next run. Not
/// in `--quick` runs, whose figures only show the benchmark still works.
fn settle(quick: bool) {
    if !quick {
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// The CPU's model name and the matrix-unit features that decide OpenVINO's default
/// precision and ours (from /proc/cpuinfo on Linux).
fn cpu_description() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let field = |name: &str| {
        cpuinfo
            .lines()
            .find(|line| line.starts_with(name))
            .and_then(|line| line.split_once(':'))
            .map_or("", |(_, value)| value.trim())
    };
    let flags: Vec<&str> = field("flags").split_whitespace().collect();
    let present: Vec<&str> = [
        "avx512f",
        "avx512_bf16",
        "avx512_vnni",
        "amx_bf16",
        "amx_int8",
    ]
    .into_iter()
    .filter(|flag| flags.contains(flag))
    .collect();
    format!(
        "{} ({})",
        field("model name"),
        if present.is_empty() {
            "no AVX-512".to_string()
        } else {
            present.join(", ")
        }
    )
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(f64::NAN)
}

/// Compares every build's output with onnxruntime's on the same inputs.
fn check_outputs(cases: &[Case]) -> Result<(), Failure> {
    let expected = harness(json!({"mode": "outputs"}), cases)?;
    let mut failures = 0;
    for case in cases {
        let reference: Vec<f64> = serde_json::from_value(expected["outputs"][case.name].clone())?;
        let inputs = inputs(case)?;
        let arguments: Vec<&Tensor> = inputs.iter().collect();
        let builds = [
            ("default", Some(&case.default), case.function),
            ("tuned", case.tuned.as_ref(), case.function),
            ("onnx", case.from_onnx.as_ref(), "main"),
        ];
        let bf16 = case.f32_build.is_some();
        let (bound, difference): (f64, Difference) = if bf16 {
            (BF16_BOUND, worst_scaled_difference)
        } else {
            (F32_BOUND, worst_difference)
        };
        // A classifier's 1000 logits: whether a bf16 build picks onnxruntime's top-1.
        let classifier = |expected: &[f64]| bf16 && expected.len() == 1000;
        let top1 = |ours: &[f32], expected: &[f64]| {
            if !classifier(expected) {
                ""
            } else if same_top1(ours, expected) {
                ", top-1 agrees"
            } else {
                ", top-1 differs"
            }
        };
        let top1_ok =
            |ours: &[f32], expected: &[f64]| !classifier(expected) || same_top1(ours, expected);
        for (build, session, function) in builds {
            let Some(session) = session else { continue };
            let ours = first_output(session, function, &arguments)?;
            let worst = difference(&ours, &reference);
            let ok = ours.len() == reference.len() && worst <= bound && top1_ok(&ours, &reference);
            println!(
                "{} {:<15} {:<8} {} values, worst relative difference {worst:.2e}{}",
                if ok { "ok  " } else { "FAIL" },
                case.name,
                build,
                ours.len(),
                if bf16 {
                    format!(
                        " (reduced precision: relative to the largest value; bound {bound:.0e}{})",
                        top1(&ours, &reference)
                    )
                } else {
                    String::new()
                }
            );
            failures += usize::from(!ok);
        }
        if let Some(f32_build) = &case.f32_build {
            let ours = first_output(&case.default, case.function, &arguments)?;
            let float32: Vec<f64> = first_output(f32_build, case.function, &arguments)?
                .iter()
                .map(|&value| f64::from(value))
                .collect();
            let worst = difference(&ours, &float32);
            let ok = worst <= bound && top1_ok(&ours, &float32);
            println!(
                "{} {:<15} {:<8} {} values, worst relative difference {worst:.2e} (against our float32 build; bound {bound:.0e}{})",
                if ok { "ok  " } else { "FAIL" },
                case.name,
                "default",
                ours.len(),
                top1(&ours, &float32)
            );
            failures += usize::from(!ok);
        }
        if let Some(outputs) = expected["openvino"][case.name].as_object() {
            for (precision, values) in outputs {
                // Its float32 outputs, through JSON's float64.
                let theirs: Vec<f32> = serde_json::from_value(values.clone())?;
                // Its default precision (bf16 here) measured as our bf16 builds are.
                let (worst, how) = if precision == "f32" {
                    (worst_difference(&theirs, &reference), "")
                } else {
                    (
                        worst_scaled_difference(&theirs, &reference),
                        ", relative to the largest value",
                    )
                };
                println!(
                    "{} {:<15} {:<8} {} values, worst relative difference {worst:.2e} (OpenVINO {precision} against onnxruntime{how}{})",
                    if worst <= F32_BOUND { "ok  " } else { "note" },
                    case.name,
                    "openvino",
                    theirs.len(),
                    if precision == "f32" { "" } else { top1(&theirs, &reference) }
                );
            }
        }
        if let Some(tract) = &case.tract {
            let theirs = tract.first_output()?;
            let worst = worst_difference(&theirs, &reference);
            println!(
                "{} {:<15} {:<8} {} values, worst relative difference {worst:.2e} (tract against onnxruntime)",
                if worst <= F32_BOUND { "ok  " } else { "note" },
                case.name,
                "tract",
                theirs.len()
            );
        }
    }
    if failures > 0 {
        return Err(format!(
            "{failures} output(s) differ from onnxruntime by more than {F32_BOUND:.0e} ({BF16_BOUND:.0e} for bf16 and int8 builds)"
        )
        .into());
    }
    println!(
        "every output is within {F32_BOUND:.0e} of onnxruntime ({BF16_BOUND:.0e} for bf16 and int8 builds)"
    );
    Ok(())
}

/// The first output of `function` (onnxruntime's harness gives its first), as float32.
fn first_output(
    session: &Session,
    function: &str,
    arguments: &[&Tensor],
) -> Result<Vec<f32>, Failure> {
    let tensor = match session.call(function, arguments)? {
        relax_runtime::Output::Tensor(tensor) => tensor,
        relax_runtime::Output::Tuple(items) => items
            .into_iter()
            .next()
            .and_then(relax_runtime::Output::into_tensor)
            .ok_or("an empty or nested tuple output")?,
    };
    Ok(tensor.as_slice::<f32>()?.to_vec())
}

/// The worst difference of `ours` from `expected`, relative to 1 + |expected|.
/// How far `ours` is from `expected`, as one number.
type Difference = fn(&[f32], &[f64]) -> f64;

/// The worst difference of a bf16 build, relative to 1 + the largest |expected| value:
/// rounding every operand to 8 significant bits errs in proportion to the sums' terms,
/// not to each output (a logit near zero among large ones).
fn worst_scaled_difference(ours: &[f32], expected: &[f64]) -> f64 {
    let scale = 1.0
        + expected
            .iter()
            .fold(0.0f64, |largest, e| largest.max(e.abs()));
    ours.iter()
        .zip(expected)
        .map(|(a, e)| (f64::from(*a) - e).abs() / scale)
        .fold(0.0f64, f64::max)
}

/// Whether the largest values of `ours` and `expected` are at the same index (a
/// classifier's top-1).
fn same_top1(ours: &[f32], expected: &[f64]) -> bool {
    let top = |values: &mut dyn Iterator<Item = f64>| {
        values
            .enumerate()
            .fold((0, f64::NEG_INFINITY), |best, (index, value)| {
                if value > best.1 {
                    (index, value)
                } else {
                    best
                }
            })
            .0
    };
    top(&mut ours.iter().map(|value| f64::from(*value))) == top(&mut expected.iter().copied())
}

fn worst_difference(ours: &[f32], expected: &[f64]) -> f64 {
    ours.iter()
        .zip(expected)
        .map(|(a, e)| (f64::from(*a) - e).abs() / (1.0 + e.abs()))
        .fold(0.0f64, f64::max)
}
