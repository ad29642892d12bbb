//! `cargo run --release -p relax-bench --bin soak [-- --quick]`: 10^6 calls of the batch-1
//! MLP on one loaded model, then 10^4 load/drop cycles, printing the resident set size
//! (RSS) every 10% and the growth per call and per load at the end. `--quick` (CI) runs
//! 1% of each. Fails when an output changes or the RSS grows by more than
//! [`GROWTH_LIMIT_KIB`] in either phase (a leak of a few bytes per call, or of one
//! model's weights per load, exceeds it).

use std::time::Instant;

use relax_runtime::Tensor;

relax_runtime::include_model!("mlp_b1");

/// The most RSS either phase may gain after its warm-up (allocator noise is a few pages).
const GROWTH_LIMIT_KIB: i64 = 256;

/// An error when `growth_kib` exceeds [`GROWTH_LIMIT_KIB`].
fn check_growth(phase: &str, growth_kib: i64) -> Result<(), String> {
    if growth_kib > GROWTH_LIMIT_KIB {
        return Err(format!(
            "{phase}: RSS grew by {growth_kib} KiB, more than the {GROWTH_LIMIT_KIB} KiB allowed: \
             something leaks per {phase}"
        ));
    }
    Ok(())
}

/// The resident set size in KiB, from /proc/self/statm.
fn rss_kib() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("/proc/self/statm");
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|field| field.parse().ok())
        .expect("statm's resident field");
    pages * 4
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let quick = std::env::args().any(|argument| argument == "--quick");
    let (calls, loads) = if quick {
        (10_000, 100)
    } else {
        (1_000_000, 10_000)
    };
    let input: Vec<f32> = (0..784).map(|index| (index % 255) as f32 / 255.0).collect();
    let x = Tensor::from_slice(&input, &[1, 784])?;

    let model = mlp_b1::Model::load()?;
    let expected = model.main(&x)?.to_vec::<f32>()?;
    // Warm up (the pooled allocator and the thread pool reach their steady state).
    for _ in 0..calls / 100 {
        model.main(&x)?;
    }
    let started = Instant::now();
    let calls_start = rss_kib();
    println!("calls: {calls} on one model; RSS {calls_start} KiB at the start");
    for call in 1..=calls {
        let output = model.main(&x)?;
        if call % (calls / 10) == 0 {
            assert_eq!(
                output.as_slice::<f32>()?,
                expected.as_slice(),
                "call {call} differs"
            );
            println!("  {:>3}%  RSS {} KiB", call * 100 / calls, rss_kib());
        }
    }
    let calls_growth = rss_kib() as i64 - calls_start as i64;
    drop(model);
    println!(
        "calls done in {:.1} s; growth {calls_growth} KiB = {:.4} bytes per call",
        started.elapsed().as_secs_f64(),
        calls_growth as f64 * 1024.0 / calls as f64
    );
    check_growth("call", calls_growth)?;

    // Load/drop: the library is loaded once per process; each load makes a session, its
    // weights and a VM, and drops them.
    for _ in 0..loads / 100 {
        drop(mlp_b1::Model::load()?);
    }
    let started = Instant::now();
    let loads_start = rss_kib();
    println!("loads: {loads} load/call/drop cycles; RSS {loads_start} KiB at the start");
    for load in 1..=loads {
        let model = mlp_b1::Model::load()?;
        let output = model.main(&x)?;
        if load % (loads / 10) == 0 {
            assert_eq!(
                output.as_slice::<f32>()?,
                expected.as_slice(),
                "load {load} differs"
            );
            println!("  {:>3}%  RSS {} KiB", load * 100 / loads, rss_kib());
        }
    }
    let loads_growth = rss_kib() as i64 - loads_start as i64;
    println!(
        "loads done in {:.1} s; growth {loads_growth} KiB = {:.1} bytes per load",
        started.elapsed().as_secs_f64(),
        loads_growth as f64 * 1024.0 / loads as f64
    );
    check_growth("load", loads_growth)?;
    Ok(())
}
