//! `cargo run --release -p relax-bench [-- --quick]`: median latency of TVM-compiled
//! models called through relax-runtime, side by side in one run with onnxruntime on the
//! same `.onnx` files and numpy's matmul (OpenBLAS), all with the same thread count.
//!
//! onnxruntime and numpy run in a Python side harness (`ort_bench.py`, in the tests'
//! reference venv under `target/test-python`, made on first use); the `ort` crate's
//! download of onnxruntime cannot reach its host from here. The last line is
//! `summary: mlp_b1_vs_ort=<r> ... add_overhead_us=<µs>` (r = our median / the peer's).

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use relax_runtime::{Session, Tensor};
use serde_json::{json, Value};

relax_runtime::include_model!("mlp_b1");
relax_runtime::include_model!("mlp_b64");
relax_runtime::include_model!("matmul");
relax_runtime::include_model!("cnn");
relax_runtime::include_model!("add");
relax_runtime::include_model!("mlp_b1_untuned");
relax_runtime::include_model!("mlp_b64_untuned");
relax_runtime::include_model!("matmul_untuned");
relax_runtime::include_model!("cnn_untuned");

const THREADS: usize = 2;

/// One benchmark case: a tuned and (optionally) an untuned build of one .onnx file.
struct Case {
    name: &'static str,
    onnx: &'static str,
    inputs: &'static [(&'static str, &'static [usize])],
    flops: f64,
    tuned: Session,
    untuned: Option<Session>,
}

/// How long to measure: at least `seconds` and `min_iterations` calls, but a slow case
/// (untuned matmul takes seconds a call) stops after `min_slow` calls once past
/// 5 x `seconds`.
struct Timing {
    warmup: usize,
    seconds: f64,
    min_iterations: usize,
    min_slow: usize,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let quick = std::env::args().any(|argument| argument == "--quick");
    let timing = if quick {
        Timing {
            warmup: 1,
            seconds: 0.05,
            min_iterations: 5,
            min_slow: 1,
        }
    } else {
        Timing {
            warmup: 10,
            seconds: 1.0,
            min_iterations: 30,
            min_slow: 3,
        }
    };
    // TVM's thread pool reads this when the runtime starts (before any model loads).
    if std::env::var_os("TVM_NUM_THREADS").is_none() {
        std::env::set_var("TVM_NUM_THREADS", THREADS.to_string());
    }
    let mlp_flops = |batch: f64| 2.0 * batch * (784.0 * 128.0 + 128.0 * 10.0);
    let cases = vec![
        Case {
            name: "mlp_b1",
            onnx: "models/mlp_b1.onnx",
            inputs: &[("x", &[1, 784])],
            flops: mlp_flops(1.0),
            tuned: mlp_b1::Model::load()?.into_session(),
            untuned: Some(mlp_b1_untuned::Model::load()?.into_session()),
        },
        Case {
            name: "mlp_b64",
            onnx: "models/mlp_b64.onnx",
            inputs: &[("x", &[64, 784])],
            flops: mlp_flops(64.0),
            tuned: mlp_b64::Model::load()?.into_session(),
            untuned: Some(mlp_b64_untuned::Model::load()?.into_session()),
        },
        Case {
            name: "cnn",
            onnx: "models/cnn.onnx",
            inputs: &[("x", &[1, 3, 224, 224])],
            flops: 2.0 * 16.0 * 3.0 * 9.0 * 224.0 * 224.0 + 2.0 * 16.0 * 10.0,
            tuned: cnn::Model::load()?.into_session(),
            untuned: Some(cnn_untuned::Model::load()?.into_session()),
        },
        Case {
            name: "matmul",
            onnx: "models/matmul.onnx",
            inputs: &[("a", &[1024, 1024]), ("b", &[1024, 1024])],
            flops: 2.0 * 1024f64.powi(3),
            tuned: matmul::Model::load()?.into_session(),
            untuned: Some(matmul_untuned::Model::load()?.into_session()),
        },
        Case {
            name: "add",
            onnx: "models/add.onnx",
            inputs: &[("a", &[1, 4]), ("b", &[1, 4])],
            flops: 4.0,
            tuned: add::Model::load()?.into_session(),
            untuned: None,
        },
    ];

    let peers = run_peers(&cases, &timing)?;
    println!(
        "relax-bench: median latency, {THREADS} threads (TVM_NUM_THREADS={}, onnxruntime intra-op {THREADS}, BLAS {THREADS}){}",
        std::env::var("TVM_NUM_THREADS").unwrap_or_default(),
        if quick { ", --quick" } else { "" }
    );
    println!("BLAS: {}", peers["blas"].as_str().unwrap_or("unknown"));
    println!();
    println!(
        "{:<9} {:>14} {:>14} {:>14} {:>10} {:>12} {:>12}",
        "model", "untuned µs", "tuned µs", "onnxrt µs", "tuned/ort", "tuned GF/s", "onnxrt GF/s"
    );
    let mut ratios = Vec::new();
    let mut add_overhead = 0.0;
    for case in &cases {
        let tuned = median_call(&case.tuned, case, &timing)?;
        let untuned = match &case.untuned {
            Some(vm) => Some(median_call(vm, case, &timing)?),
            None => None,
        };
        let ort = peers["ort"][case.name].as_f64().unwrap_or(f64::NAN);
        let ratio = tuned / ort;
        println!(
            "{:<9} {:>14} {:>14.1} {:>14.1} {:>10.3} {:>12.1} {:>12.1}",
            case.name,
            untuned.map_or("-".to_string(), |value| format!("{:.1}", value * 1e6)),
            tuned * 1e6,
            ort * 1e6,
            ratio,
            case.flops / tuned / 1e9,
            case.flops / ort / 1e9,
        );
        ratios.push((case.name, ratio));
        if case.name == "add" {
            add_overhead = tuned * 1e6;
        }
        if case.name == "matmul" {
            let blas = peers["numpy_matmul"].as_f64().unwrap_or(f64::NAN);
            println!(
                "{:<9} {:>14} {:>14} {:>14.1} {:>10} {:>12} {:>12.1}   (numpy/OpenBLAS matmul; tuned/openblas {:.3})",
                "  numpy",
                "",
                "",
                blas * 1e6,
                "",
                "",
                case.flops / blas / 1e9,
                tuned / blas
            );
            ratios.push(("matmul_vs_openblas", tuned / blas));
        }
    }
    let ratio = |name: &str| {
        ratios
            .iter()
            .find(|(case, _)| *case == name)
            .map_or(f64::NAN, |(_, ratio)| *ratio)
    };
    let mlp = &cases[0].tuned;
    let seconds = timing.seconds * 2.0;
    let latency_mode = throughput(mlp, &[1, 784], 1, seconds)?;
    relax_runtime::set_threads_per_call(1);
    let one = throughput(mlp, &[1, 784], 1, seconds)?;
    let two = throughput(mlp, &[1, 784], 2, seconds)?;
    relax_runtime::set_threads_per_call(0);
    println!();
    println!(
        "mlp_b1, one Model shared by request threads (1 thread per call): 1 thread {one:.0} calls/s, \
         2 threads {two:.0} calls/s, ratio {:.2} (one caller with {THREADS} threads per call: {latency_mode:.0} calls/s)",
        two / one
    );
    println!();
    println!(
        "summary: mlp_b1_vs_ort={:.3} mlp_b64_vs_ort={:.3} cnn_vs_ort={:.3} matmul_vs_ort={:.3} matmul_vs_openblas={:.3} add_overhead_us={:.2} shared_model_2_threads_vs_1={:.2}",
        ratio("mlp_b1"),
        ratio("mlp_b64"),
        ratio("cnn"),
        ratio("matmul"),
        ratio("matmul_vs_openblas"),
        add_overhead,
        two / one
    );
    Ok(())
}

/// Calls per second of `session`'s `main` from `threads` threads sharing it, each
/// calling as fast as it can for `seconds`.
fn throughput(
    session: &Session,
    shape: &[usize],
    threads: usize,
    seconds: f64,
) -> Result<f64, Box<dyn std::error::Error>> {
    let input = random_tensor(shape, 7)?;
    let calls = std::sync::atomic::AtomicUsize::new(0);
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    std::thread::scope(|scope| -> relax_runtime::Result<()> {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| -> relax_runtime::Result<()> {
                    // Warm this thread's VM and TVM thread pool first.
                    session.call("main", &[&input])?;
                    while Instant::now() < deadline {
                        session.call("main", &[&input])?;
                        calls.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
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

/// Median seconds of one call of `main` with seeded random inputs.
fn median_call(
    session: &Session,
    case: &Case,
    timing: &Timing,
) -> Result<f64, Box<dyn std::error::Error>> {
    let vm = session.virtual_machine()?;
    let function = vm.function("main")?;
    let inputs: Vec<Tensor> = case
        .inputs
        .iter()
        .enumerate()
        .map(|(index, (_, shape))| random_tensor(shape, index as u64 + 1))
        .collect::<Result<_, _>>()?;
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

fn random_tensor(shape: &[usize], seed: u64) -> relax_runtime::Result<Tensor> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let values: Vec<f32> = (0..shape.iter().product::<usize>())
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 40) as f32 / (1u64 << 24) as f32
        })
        .collect();
    Tensor::from_slice(&values, shape)
}

/// Runs onnxruntime and numpy in the side harness with the same timing rules.
fn run_peers(cases: &[Case], timing: &Timing) -> Result<Value, Box<dyn std::error::Error>> {
    let here = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let spec = json!({
        "threads": THREADS,
        "warmup": timing.warmup,
        "seconds": timing.seconds,
        "min_iterations": timing.min_iterations,
        "matmul": 1024,
        "cases": cases.iter().map(|case| json!({
            "name": case.name,
            "model": here.join(case.onnx),
            "inputs": case.inputs.iter().map(|(name, shape)| (name.to_string(), json!(shape))).collect::<serde_json::Map<_, _>>(),
        })).collect::<Vec<_>>(),
    });
    let mut child = Command::new(relax_cargo_tests::test_python())
        .arg(here.join("ort_bench.py"))
        // Set on some machines for old OpenBLAS builds; they slow a current numpy.
        .env_remove("OPENBLAS_CORETYPE")
        .env_remove("OPENBLAS_L2_SIZE")
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
