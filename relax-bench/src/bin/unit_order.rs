//! `cargo run --release -p relax-bench --bin unit_order [-- SECONDS]`: ResNet-50,
//! MobileNetV2 and EfficientNet-B0 with the blocked convolutions' units of work numbered
//! by pixels (relax-kernels' default, see its `UnitOrder`) and by panels (as before it), in
//! turn: windows of 0.3 s of each, for SECONDS (default 30) per model, 2 threads per
//! call. Prints each pair of windows' median latencies and their ratio, then the median
//! ratio per model.
//!
//! Pairs of windows, not one long run of each: this machine's 2 cores spend spells of
//! seconds to minutes sharing a level-3 cache and spells not sharing it (ResNet-50 then
//! takes about 1.25x as long), and both orders of a pair should see the same spell.

use std::time::{Duration, Instant};

use relax_runtime::{Session, Tensor};

relax_runtime::include_model!("resnet50");
relax_runtime::include_model!("mobilenet_v2");
relax_runtime::include_model!("efficientnet_b0");

/// How long each window of one order runs.
const WINDOW: Duration = Duration::from_millis(300);

/// The median latency, in ms, of `main` on `session` over one window.
fn window(session: &Session, x: &Tensor) -> Result<f64, Box<dyn std::error::Error>> {
    let vm = session.virtual_machine()?;
    let main = vm.function("main")?;
    // One call of warm-up: the first call after switching orders finds the other
    // order's data in the caches.
    main.call(&[x])?;
    let mut times = Vec::new();
    let started = Instant::now();
    while started.elapsed() < WINDOW {
        let call = Instant::now();
        drop(main.call(&[x])?);
        times.push(call.elapsed().as_secs_f64() * 1e3);
    }
    Ok(median(&mut times))
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let seconds: f64 = match std::env::args().nth(1) {
        Some(argument) => argument
            .parse()
            .map_err(|_| format!("SECONDS: expected a number of seconds, got {argument:?}"))?,
        None => 30.0,
    };
    relax_runtime::set_threads_per_call(2);
    let values: Vec<f32> = (0..3 * 224 * 224)
        .map(|index| (index % 255) as f32 / 255.0)
        .collect();
    let x = Tensor::from_slice(&values, &[1, 3, 224, 224])?;
    let models = [
        ("resnet50", resnet50::Model::load()?.into_session()),
        ("mobilenet_v2", mobilenet_v2::Model::load()?.into_session()),
        (
            "efficientnet_b0",
            efficientnet_b0::Model::load()?.into_session(),
        ),
    ];
    let mut summary = Vec::new();
    for (name, session) in &models {
        println!("{name}: median ms per window, by pixels then by panels");
        let mut ratios = Vec::new();
        let started = Instant::now();
        while started.elapsed().as_secs_f64() < seconds {
            relax_kernels::number_units_by_panels(false);
            let pixels = window(session, &x)?;
            relax_kernels::number_units_by_panels(true);
            let panels = window(session, &x)?;
            let ratio = pixels / panels;
            println!(
                "{:6.1} s  {pixels:8.3}  {panels:8.3}  {ratio:.3}",
                started.elapsed().as_secs_f64()
            );
            ratios.push(ratio);
        }
        relax_kernels::number_units_by_panels(false);
        summary.push(format!(
            "{name}_pixels_vs_panels={:.3} ({} pairs)",
            median(&mut ratios),
            ratios.len()
        ));
    }
    println!("summary: {}", summary.join(" "));
    Ok(())
}
