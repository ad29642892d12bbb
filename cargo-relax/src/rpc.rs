//! `cargo relax tracker` and `cargo relax bench --rpc`: TVM's RPC tracker from the managed
//! toolchain, and the app's models timed on a device that runs `relax-rpc-server`.
//!
//! Both run a Python script of `python/` with the toolchain's Python (TVM's RPC client
//! and tracker are Python); the device itself runs no Python.

use std::collections::BTreeMap;
use std::process::{Command, ExitCode};

use relax_build::tooling::{self, CompiledArtifacts};
use relax_build::Config;
use serde_json::{json, Value};

const TRACKER_SCRIPT: &str = include_str!("python/tracker.py");
const BENCH_SCRIPT: &str = include_str!("python/rpc_bench.py");

/// Where a device is reached: directly at `host:port`, or through the tracker there
/// under `key`.
#[derive(Debug, PartialEq, Eq)]
pub struct Device {
    pub host: String,
    pub port: u16,
    pub key: Option<String>,
}

impl Device {
    /// Parses `HOST:PORT` (a device's own server) or `HOST:PORT:KEY` (a tracker).
    pub fn parse(text: &str) -> Result<Device, String> {
        let fix = "expected HOST:PORT:KEY (a tracker and the device's key) or HOST:PORT (a device's server)";
        let mut parts = text.splitn(3, ':');
        let host = parts
            .next()
            .filter(|host| !host.is_empty())
            .ok_or_else(|| format!("--rpc `{text}`: {fix}"))?;
        let port = parts
            .next()
            .and_then(|port| port.parse::<u16>().ok())
            .ok_or_else(|| format!("--rpc `{text}`: {fix}"))?;
        let key = match parts.next() {
            Some("") => return Err(format!("--rpc `{text}`: the key is empty; {fix}")),
            Some(key) if key.contains(':') => {
                return Err(format!("--rpc `{text}`: a device key has no `:`; {fix}"))
            }
            other => other.map(str::to_string),
        };
        Ok(Device {
            host: host.to_string(),
            port,
            key,
        })
    }
}

/// Parses `--dim NAME=N` flags.
pub fn parse_dims(flags: &[String]) -> Result<BTreeMap<String, i64>, String> {
    flags
        .iter()
        .map(|flag| {
            let (name, size) = flag
                .split_once('=')
                .ok_or_else(|| format!("--dim `{flag}`: expected NAME=N, e.g. --dim batch=1"))?;
            let size = size
                .trim()
                .parse::<i64>()
                .ok()
                .filter(|size| *size >= 0)
                .ok_or_else(|| format!("--dim `{flag}`: `{size}` is not a size"))?;
            Ok((name.trim().to_string(), size))
        })
        .collect()
}

/// `cargo relax tracker`: runs TVM's tracker in the foreground until interrupted.
pub fn tracker(host: &str, port: u16) -> Result<ExitCode, String> {
    if !is_loopback(host) {
        eprintln!(
            "cargo relax tracker: warning: listening on {host}, which other machines can reach: \
             the tracker has no token, so whoever reaches it can register a device under your \
             key (and be sent your models) or ask for your boards; keep the default 127.0.0.1 \
             and reach it through SSH tunnels (docs/remote.md, Security)"
        );
    }
    let config = Config::new().cargo_directives(false);
    let toolchain = tooling::toolchain(&config)
        .and_then(|toolchain| toolchain.with_tornado(tooling::Cargo::TOOL))
        .map_err(|error| error.to_string())?;
    let status = toolchain
        .command()
        .args(["-c", TRACKER_SCRIPT, host, &port.to_string()])
        .status()
        .map_err(|error| format!("running {}: {error}", toolchain.python.display()))?;
    Ok(if status.success() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Whether `host` (an address or a name) is this machine's loopback only.
fn is_loopback(host: &str) -> bool {
    host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|address| address.to_canonical().is_loopback())
}

/// What `cargo relax bench --rpc` measures.
pub struct BenchRequest<'a> {
    pub device: &'a Device,
    pub dims: BTreeMap<String, i64>,
    pub warmup: u32,
    pub repeat: u32,
    pub wait_seconds: u64,
}

/// Times each compiled model's functions on the device and prints a table.
pub fn bench(
    config: &Config,
    models: &[CompiledArtifacts],
    request: &BenchRequest<'_>,
    target: &str,
) -> Result<(), String> {
    let toolchain = tooling::toolchain(config).map_err(|error| error.to_string())?;
    let script_request = json!({
        "host": request.device.host,
        "port": request.device.port,
        "key": request.device.key,
        "wait": request.wait_seconds,
        "warmup": request.warmup,
        "repeat": request.repeat,
        "models": models.iter().map(|model| json!({
            "name": model.name,
            "dir": model.dir,
            "dims": request.dims,
        })).collect::<Vec<_>>(),
    });
    let folder =
        tempfile::tempdir().map_err(|error| format!("making a temporary folder: {error}"))?;
    let request_path = folder.path().join("request.json");
    std::fs::write(&request_path, script_request.to_string())
        .map_err(|error| format!("writing {}: {error}", request_path.display()))?;
    let driver = tooling::driver_dir(config).map_err(|error| error.to_string())?;
    let output = Command::new(&toolchain.python)
        .env("PYTHONPATH", &driver)
        .arg("-c")
        .arg(BENCH_SCRIPT)
        .arg(&request_path)
        .output()
        .map_err(|error| format!("running {}: {error}", toolchain.python.display()))?;
    let answers: Vec<Value> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect();
    for line in table(&answers, target) {
        println!("{line}");
    }
    if !output.status.success() {
        let stderr = last_lines(&String::from_utf8_lossy(&output.stderr), 8);
        return Err(if stderr.is_empty() {
            format!("the RPC client failed ({})", output.status)
        } else {
            stderr
        });
    }
    Ok(())
}

fn last_lines(text: &str, count: usize) -> String {
    let lines: Vec<&str> = text.trim().lines().collect();
    lines[lines.len().saturating_sub(count)..].join("\n")
}

/// The latency table of the devices' answers: a row per function (median, spread).
pub fn table(answers: &[Value], target: &str) -> Vec<String> {
    let mut lines = Vec::new();
    for answer in answers {
        let device = answer["device"].as_str().unwrap_or("?");
        lines.push(format!(
            "model `{}` on device {device} (target {target})",
            answer["model"].as_str().unwrap_or("?")
        ));
        lines.push(format!(
            "  {:<20} {:<24} {:>6} {:>12} {:>12} {:>12}",
            "function", "inputs", "runs", "median µs", "min µs", "max µs"
        ));
        for function in answer["functions"].as_array().into_iter().flatten() {
            let mut runs: Vec<f64> = function["runs_us"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_f64)
                .collect();
            runs.sort_by(f64::total_cmp);
            let shapes: Vec<String> = function["inputs"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|shape| shape.to_string())
                .collect();
            let (median, min, max) = match runs.as_slice() {
                [] => (f64::NAN, f64::NAN, f64::NAN),
                runs => (runs[runs.len() / 2], runs[0], runs[runs.len() - 1]),
            };
            lines.push(format!(
                "  {:<20} {:<24} {:>6} {:>12.1} {:>12.1} {:>12.1}",
                function["name"].as_str().unwrap_or("?"),
                shapes.join(" "),
                runs.len(),
                median,
                min,
                max
            ));
        }
    }
    lines
}

/// The package's models compiled for `target` (`only`: one of them).
pub fn compiled_models(
    config: &Config,
    only: Option<&str>,
) -> Result<Vec<CompiledArtifacts>, String> {
    let progress = crate::progress::Progress::new("compiling for the device");
    let compiled = tooling::compile_for_target(config, only, &|step, steps, what| {
        progress.step(step, steps, what)
    });
    progress.finish();
    compiled.map_err(|error| error.to_string())
}

#[cfg(test)]
mod tests;
