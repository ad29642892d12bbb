//! `relax-conformance`: runs ONNX backend-test cases through relax-build's own compile
//! path and relax-runtime, and compares every output with the expected one.
//!
//! ```text
//! relax-conformance [--jobs N] [--tolerance T] [--time] [--compare-unprepared] [--expect FILE] [--write-expect FILE] DIR [DIR ...]
//! ```
//!
//! Each `DIR/<case>/` holds `model.onnx` and `test_data_set_*/{input,output}_<i>.pb`
//! (the layout of `onnx/backend/test/data/`; `node_suite.py` writes ONNX's generated node
//! tests in it). One line per case: `PASS <case>`, `FAIL <case>: <reason>` or
//! `UNSUPPORTED <case>: <operator>` (no converter; counted as failed), then a summary of
//! the unsupported cases, the failing cases that pass with `onnx_prepare = false` (each
//! failing case is compiled again without the preparation step: the step must never lose
//! a model, so this list must be empty), with `--compare-unprepared` the passing cases
//! that pass only thanks to the step, and, last, `N passed, M failed`. Outputs match when
//! |actual - expected| <= 1e-5 + 1e-3 * |expected| (integers and booleans exactly), or,
//! with `--tolerance T`, <= T * (1 + |expected|); float16 and bfloat16 outputs may
//! differ by four units in the last place of their type (see `half_precision_slack`).
//! A case folder may hold a `tolerance` file (one number, T as above) for itself, and a
//! `declaration.toml` of manifest lines for its model beside `source` (e.g. `inputs.main
//! = { x = "float32[1, 512]" }`: the model is built as an app declaring them would).
//! `--time` also times each passing case on its first data set (the median of about a
//! second of calls) and prints, after its name, the largest error (|actual - expected|
//! / (1 + |expected|)), the time and, when the case folder has an `onnxruntime.json`
//! (`{"time_us": ...}`, written by corpus.py), onnxruntime's and the ratio.
//! `--jobs N` runs N cases at a time (default 1).
//! With `--expect FILE` (one passing case name per line), the exit status is 1 only when
//! a listed case that was run does not pass, or when a case fails only with the
//! preparation step; without it, when any case fails.

mod onnx_tensor;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use relax_build::tooling::{self, Model, StandaloneModel};
use relax_build::{Config, Error as BuildError};
use relax_runtime::{DType, Device, Output, Session, Tensor};

/// A case folder's optional manifest lines for its model beside `source` (pinned
/// input dims, say), read as the model's table of a Cargo manifest.
const DECLARATION: &str = "declaration.toml";

/// How far a float output may be from the expected one: `absolute + relative * |expected|`.
#[derive(Clone, Copy)]
struct Tolerance {
    absolute: f64,
    relative: f64,
}

/// The backend tests' own tolerance.
const DEFAULT_TOLERANCE: Tolerance = Tolerance {
    absolute: 1e-5,
    relative: 1e-3,
};

enum Outcome {
    Pass(Measured),
    Fail(String),
    Unsupported(String),
}

/// What a passing case measured.
#[derive(Clone, Copy, Default)]
struct Measured {
    /// The largest |actual - expected| / (1 + |expected|) over float outputs.
    max_error: f64,
    /// The median time of a call on the first data set, in µs (with `--time`).
    time_us: Option<f64>,
}

struct Options {
    dirs: Vec<PathBuf>,
    time: bool,
    expect: Option<PathBuf>,
    write_expect: Option<PathBuf>,
    jobs: usize,
    tolerance: Tolerance,
    compare_unprepared: bool,
}

const USAGE: &str =
    "usage: relax-conformance [--jobs N] [--tolerance T] [--time] [--compare-unprepared] [--expect FILE] \
                     [--write-expect FILE] DIR [DIR ...]";

/// What running one case found.
struct Report {
    name: String,
    outcome: Outcome,
    /// Whether the case's outcome differs without the preparation step (a failing case
    /// that passes without it; with `--compare-unprepared`, a passing case that fails
    /// without it).
    differs_unprepared: bool,
}

fn parse_arguments() -> Result<Options, String> {
    let mut options = Options {
        dirs: Vec::new(),
        time: false,
        expect: None,
        write_expect: None,
        jobs: 1,
        tolerance: DEFAULT_TOLERANCE,
        compare_unprepared: false,
    };
    let mut arguments = std::env::args().skip(1);
    while let Some(argument) = arguments.next() {
        match argument.as_str() {
            "--expect" => {
                options.expect = Some(arguments.next().ok_or("--expect needs a file")?.into())
            }
            "--write-expect" => {
                options.write_expect = Some(
                    arguments
                        .next()
                        .ok_or("--write-expect needs a file")?
                        .into(),
                )
            }
            "--jobs" => {
                options.jobs = arguments
                    .next()
                    .and_then(|jobs| jobs.parse().ok())
                    .filter(|&jobs| jobs > 0)
                    .ok_or("--jobs needs a number of cases to run at a time (1 or more)")?
            }
            "--tolerance" => {
                let tolerance = arguments
                    .next()
                    .and_then(|tolerance| tolerance.parse::<f64>().ok())
                    .filter(|tolerance| *tolerance >= 0.0)
                    .ok_or("--tolerance needs a number (e.g. 1e-4)")?;
                options.tolerance = Tolerance {
                    absolute: tolerance,
                    relative: tolerance,
                };
            }
            "--compare-unprepared" => options.compare_unprepared = true,
            "--time" => options.time = true,
            "-h" | "--help" => return Err(USAGE.to_string()),
            _ => options.dirs.push(argument.into()),
        }
    }
    if options.dirs.is_empty() {
        return Err(USAGE.to_string());
    }
    Ok(options)
}

fn main() -> ExitCode {
    let options = match parse_arguments() {
        Ok(options) => options,
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::from(2);
        }
    };
    let mut cases = Vec::new();
    for dir in &options.dirs {
        let Ok(entries) = std::fs::read_dir(dir) else {
            eprintln!("error: cannot read the folder {}", dir.display());
            return ExitCode::from(2);
        };
        let mut found: Vec<PathBuf> = entries
            .filter_map(|entry| entry.ok().map(|entry| entry.path()))
            .filter(|path| path.join("model.onnx").is_file())
            .collect();
        found.sort();
        cases.extend(found);
    }
    let out_root = tempfile::tempdir().expect("a temporary folder");
    let config = Config::new()
        .cargo_directives(false)
        .target(env!("RELAX_CONFORMANCE_HOST"))
        .host(env!("RELAX_CONFORMANCE_HOST"));
    if let Err(message) = use_toolchain_runtime(&config) {
        eprintln!("error: {message}");
        return ExitCode::from(2);
    }

    let reports = run_cases(&config, out_root.path(), &cases, &options);
    let (mut passed, mut failed, mut unsupported) = (Vec::new(), Vec::new(), Vec::new());
    let (mut prepared_only, mut failing_prepared_only) = (Vec::new(), Vec::new());
    for report in reports {
        match report.outcome {
            Outcome::Pass(_) => {
                if report.differs_unprepared {
                    prepared_only.push(report.name.clone());
                }
                passed.push(report.name);
            }
            outcome => {
                if report.differs_unprepared {
                    failing_prepared_only.push(report.name.clone());
                }
                match outcome {
                    Outcome::Unsupported(operator) => unsupported.push((report.name, operator)),
                    Outcome::Fail(reason) => failed.push((report.name, reason)),
                    Outcome::Pass(_) => unreachable!("matched above"),
                }
            }
        }
    }
    if !unsupported.is_empty() {
        let list: Vec<String> = unsupported
            .iter()
            .map(|(name, operator)| format!("{name} ({operator})"))
            .collect();
        println!("unsupported by TVM's ONNX importer: {}", list.join(", "));
    }
    let listed = |names: &[String]| match names {
        [] => "none".to_string(),
        names => names.join(", "),
    };
    println!(
        "failing only with the ONNX preparation step ({}): {}",
        failing_prepared_only.len(),
        listed(&failing_prepared_only)
    );
    if options.compare_unprepared {
        println!(
            "passing only with the ONNX preparation step ({}): {}",
            prepared_only.len(),
            listed(&prepared_only)
        );
    }
    println!(
        "{} passed, {} failed",
        passed.len(),
        failed.len() + unsupported.len()
    );

    if let Some(path) = &options.write_expect {
        let text: String = passed.iter().map(|name| format!("{name}\n")).collect();
        if let Err(error) = std::fs::write(path, text) {
            eprintln!("error: writing {}: {error}", path.display());
            return ExitCode::from(2);
        }
    }
    let run: Vec<String> = cases
        .iter()
        .map(|case| case.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    match &options.expect {
        Some(_) if !failing_prepared_only.is_empty() => ExitCode::FAILURE,
        Some(path) => check_expected(path, &run, &passed),
        None if failed.is_empty() && unsupported.is_empty() => ExitCode::SUCCESS,
        None => ExitCode::FAILURE,
    }
}

/// Runs every case, `options.jobs` at a time, printing each result as it comes; the
/// reports in the cases' order.
fn run_cases(
    config: &Config,
    out_root: &Path,
    cases: &[PathBuf],
    options: &Options,
) -> Vec<Report> {
    let next = AtomicUsize::new(0);
    let reports: Vec<Mutex<Option<Report>>> = cases.iter().map(|_| Mutex::new(None)).collect();
    std::thread::scope(|scope| {
        for _ in 0..options.jobs.min(cases.len()) {
            scope.spawn(|| loop {
                let index = next.fetch_add(1, Ordering::Relaxed);
                let Some(case) = cases.get(index) else { break };
                let report = run_reported(config, out_root, case, options);
                *reports[index].lock().unwrap_or_else(|e| e.into_inner()) = Some(report);
            });
        }
    });
    reports
        .into_iter()
        .map(|report| {
            report
                .into_inner()
                .unwrap_or_else(|e| e.into_inner())
                .expect("every case ran")
        })
        .collect()
}

/// Runs one case (and, where its outcome is to be compared, again without the
/// preparation step), prints its line, and returns its report.
fn run_reported(config: &Config, out_root: &Path, case: &Path, options: &Options) -> Report {
    let name = case.file_name().unwrap().to_string_lossy().into_owned();
    let prepared = config.clone().out_dir(out_root.join(&name));
    let tolerance = match case_tolerance(case) {
        Ok(tolerance) => tolerance.unwrap_or(options.tolerance),
        Err(reason) => {
            println!("FAIL {name}: {reason}");
            return Report {
                name,
                outcome: Outcome::Fail(reason),
                differs_unprepared: false,
            };
        }
    };
    let outcome = run_case(&prepared, case, true, tolerance, options.time);
    let passes = matches!(outcome, Outcome::Pass(_));
    let differs_unprepared = if passes && !options.compare_unprepared {
        false
    } else {
        let unprepared = config
            .clone()
            .out_dir(out_root.join(format!("{name}-unprepared")));
        matches!(
            run_case(&unprepared, case, false, tolerance, false),
            Outcome::Pass(_)
        ) != passes
    };
    let line = match &outcome {
        Outcome::Pass(measured) if options.time => {
            format!("PASS {name} ({})", describe(measured, case))
        }
        Outcome::Pass(_) => format!("PASS {name}"),
        Outcome::Fail(reason) => format!("FAIL {name}: {reason}"),
        Outcome::Unsupported(operator) => format!("UNSUPPORTED {name}: {operator}"),
    };
    println!("{line}");
    Report {
        name,
        outcome,
        differs_unprepared,
    }
}

/// A case's own tolerance, from its `tolerance` file.
fn case_tolerance(case: &Path) -> Result<Option<Tolerance>, String> {
    let Ok(text) = std::fs::read_to_string(case.join("tolerance")) else {
        return Ok(None);
    };
    let value = text
        .trim()
        .parse::<f64>()
        .ok()
        .filter(|value| *value >= 0.0)
        .ok_or_else(|| format!("its tolerance file holds `{}`, not a number", text.trim()))?;
    Ok(Some(Tolerance {
        absolute: value,
        relative: value,
    }))
}

/// `max error 3.1e-6, 1234.5 us, onnxruntime 1000.0 us, ratio 1.23` (what is known).
fn describe(measured: &Measured, case: &Path) -> String {
    let mut parts = vec![format!("max error {:.1e}", measured.max_error)];
    if let Some(time) = measured.time_us {
        parts.push(format!("{time:.1} us"));
        let reference = std::fs::read_to_string(case.join("onnxruntime.json"))
            .ok()
            .and_then(|text| reference_time_us(&text));
        if let Some(reference) = reference {
            parts.push(format!(
                "onnxruntime {reference:.1} us, ratio {:.2}",
                time / reference
            ));
        }
    }
    parts.join(", ")
}

/// `time_us` of corpus.py's `{"time_us": 1234.5, ...}`.
fn reference_time_us(json: &str) -> Option<f64> {
    serde_json::from_str::<serde_json::Value>(json).ok()?["time_us"].as_f64()
}

/// Exit status 1 when a case listed in `path` that was run (`run`) did not pass. Listed
/// cases not run (a run over some families of a suite) are counted, not checked.
fn check_expected(path: &Path, run: &[String], passed: &[String]) -> ExitCode {
    let Ok(text) = std::fs::read_to_string(path) else {
        eprintln!(
            "error: cannot read the expected pass list {}",
            path.display()
        );
        return ExitCode::from(2);
    };
    let listed: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .collect();
    let (listed_run, not_run): (Vec<&str>, Vec<&str>) = listed
        .iter()
        .partition(|name| run.iter().any(|run| run == *name));
    if !not_run.is_empty() {
        println!("{} listed cases were not in this run", not_run.len());
    }
    let regressions: Vec<&str> = listed_run
        .iter()
        .copied()
        .filter(|name| !passed.iter().any(|passed| passed == name))
        .collect();
    let expected_count = listed_run.len();
    let new: Vec<&String> = passed
        .iter()
        .filter(|name| !text.lines().any(|line| line.trim() == name.as_str()))
        .collect();
    if !new.is_empty() {
        println!(
            "newly passing (add them to {}): {}",
            path.display(),
            new.iter()
                .map(|name| name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    if regressions.is_empty() {
        println!("all {expected_count} expected cases pass");
        return ExitCode::SUCCESS;
    }
    for name in &regressions {
        println!(
            "REGRESSION {name}: listed in {} but did not pass",
            path.display()
        );
    }
    ExitCode::FAILURE
}

/// Points relax-runtime at the toolchain's TVM runtime libraries (unless
/// `RELAX_RUNTIME_DIR` already names a folder).
fn use_toolchain_runtime(config: &Config) -> Result<(), String> {
    if std::env::var_os(relax_runtime::RUNTIME_DIR_VARIABLE).is_some_and(|dir| !dir.is_empty()) {
        return Ok(());
    }
    let toolchain = tooling::toolchain(config).map_err(|error| error.to_string())?;
    let dir =
        std::env::temp_dir().join(format!("relax-conformance-runtime-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|error| error.to_string())?;
    for library in ["libtvm_ffi.so", "libtvm_runtime.so"] {
        let source = toolchain
            .runtime_library_dirs
            .iter()
            .map(|found| found.join(library))
            .find(|path| path.is_file())
            .ok_or_else(|| format!("the toolchain has no {library}"))?;
        let link = dir.join(library);
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&source, &link).map_err(|error| error.to_string())?;
    }
    // Read once, when the runtime is loaded (before any model; this is single-threaded).
    std::env::set_var(relax_runtime::RUNTIME_DIR_VARIABLE, &dir);
    Ok(())
}

/// Compiles and runs one case, with or without the ONNX preparation step (and timed,
/// with `time`).
fn run_case(
    config: &Config,
    case: &Path,
    onnx_prepare: bool,
    tolerance: Tolerance,
    time: bool,
) -> Outcome {
    let declaration = std::fs::read_to_string(case.join(DECLARATION)).unwrap_or_default();
    let mut model = match Model::from_declaration("model", &case.join("model.onnx"), &declaration) {
        Ok(model) => model,
        Err(error) => return Outcome::Fail(first_line(&error.to_string())),
    };
    model.options.onnx_prepare = onnx_prepare;
    let compiled = match tooling::compile_model(config, &model) {
        Ok(compiled) => compiled,
        Err(BuildError::UnsupportedOperator { operators, .. }) => {
            return Outcome::Unsupported(operators.join(", "))
        }
        Err(error) => return Outcome::Fail(first_line(&error.to_string())),
    };
    match run_compiled(&compiled, case, tolerance, time) {
        Ok(measured) => Outcome::Pass(measured),
        Err(reason) => Outcome::Fail(reason),
    }
}

fn run_compiled(
    standalone: &StandaloneModel,
    case: &Path,
    tolerance: Tolerance,
    time: bool,
) -> Result<Measured, String> {
    let compiled = &standalone.compiled;
    let weights = match &compiled.weights {
        Some(path) => Some(std::fs::read(path).map_err(|error| error.to_string())?),
        None => None,
    };
    // SAFETY: the library was just compiled by relax-build for this machine, with this
    // signature, and nothing else writes to its temporary folder.
    let session = unsafe {
        Session::load_file(
            &compiled.library,
            &standalone.signature_json,
            weights.as_deref(),
            Device::cpu(),
        )
    }
    .map_err(|error| first_line(&error.to_string()))?;
    let vm = session
        .virtual_machine()
        .map_err(|error| error.to_string())?;
    let function = vm.function("main").map_err(|error| error.to_string())?;
    let mut data_sets: Vec<PathBuf> = std::fs::read_dir(case)
        .map_err(|error| error.to_string())?
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter(|path| {
            path.file_name()
                .is_some_and(|name| name.to_string_lossy().starts_with("test_data_set_"))
        })
        .collect();
    data_sets.sort();
    if data_sets.is_empty() {
        return Err("no test_data_set_* folder".to_string());
    }
    let mut measured = Measured::default();
    for (number, data_set) in data_sets.iter().enumerate() {
        let inputs = (0..function.input_count())
            .map(|index| onnx_tensor::read(&data_set.join(format!("input_{index}.pb"))))
            .collect::<Result<Vec<Tensor>, String>>()?;
        let references: Vec<&Tensor> = inputs.iter().collect();
        let mut outputs = Vec::new();
        flatten(
            function
                .call(&references)
                .map_err(|error| first_line(&error.to_string()))?,
            &mut outputs,
        );
        let expected_count = (0..)
            .take_while(|index| data_set.join(format!("output_{index}.pb")).is_file())
            .count();
        if outputs.len() != expected_count {
            return Err(format!(
                "{} outputs, expected {expected_count}",
                outputs.len()
            ));
        }
        for (index, actual) in outputs.iter().enumerate() {
            let expected = onnx_tensor::read(&data_set.join(format!("output_{index}.pb")))?;
            let error = compare(index, actual, &expected, tolerance)?;
            measured.max_error = measured.max_error.max(error);
        }
        if time && number == 0 {
            measured.time_us = Some(median_call_us(|| {
                function
                    .call(&references)
                    .map(drop)
                    .map_err(|error| first_line(&error.to_string()))
            })?);
        }
    }
    Ok(measured)
}

/// The median time of `call` in µs, over about a second of calls after a warm-up one
/// (5 at least, 1000 at most).
fn median_call_us(mut call: impl FnMut() -> Result<(), String>) -> Result<f64, String> {
    call()?;
    let mut times = Vec::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
    while times.len() < 5 || (std::time::Instant::now() < deadline && times.len() < 1000) {
        let started = std::time::Instant::now();
        call()?;
        times.push(started.elapsed().as_secs_f64() * 1e6);
    }
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}

fn flatten(output: Output, into: &mut Vec<Tensor>) {
    match output {
        Output::Tensor(tensor) => into.push(tensor),
        Output::Tuple(items) => items.into_iter().for_each(|item| flatten(item, into)),
    }
}

fn compare(
    index: usize,
    actual: &Tensor,
    expected: &Tensor,
    tolerance: Tolerance,
) -> Result<f64, String> {
    if actual.dtype() != expected.dtype() {
        return Err(format!(
            "output {index}: dtype {}, expected {}",
            actual.dtype(),
            expected.dtype()
        ));
    }
    if actual.shape() != expected.shape() {
        return Err(format!(
            "output {index}: shape {:?}, expected {:?}",
            actual.shape(),
            expected.shape()
        ));
    }
    let exact = !matches!(
        actual.dtype(),
        DType::F16 | DType::BF16 | DType::F32 | DType::F64
    );
    let actual_values = onnx_tensor::values(actual)?;
    let expected_values = onnx_tensor::values(expected)?;
    let mut max_error: f64 = 0.0;
    for (position, (a, e)) in actual_values.iter().zip(&expected_values).enumerate() {
        if !exact && a.is_finite() && e.is_finite() {
            max_error = max_error.max((a - e).abs() / (1.0 + e.abs()));
        }
        let close = if exact {
            a == e
        } else {
            (a.is_nan() && e.is_nan())
                || a == e
                || (a - e).abs()
                    <= (tolerance.absolute + tolerance.relative * e.abs())
                        .max(half_precision_slack(actual.dtype(), *e))
        };
        if !close {
            return Err(format!(
                "output {index}: element {position} is {a}, expected {e}"
            ));
        }
    }
    Ok(max_error)
}

/// The error a float16 or bfloat16 output `expected` may have whatever the tolerance:
/// four units in the last place of its type at `expected`, else 0.
///
/// The suite's expected outputs are numpy's, computed in the half type with a rounding
/// after each of its operations, in numpy's order; TVM rounds in its own order (and
/// fuses), so the two differ by a few units in the last place, more than the suite's
/// 1e-3 for bfloat16, whose unit is 3.9e-3. (A wrong computation is off by far more.)
fn half_precision_slack(dtype: DType, expected: f64) -> f64 {
    // (mantissa bits, the smallest normal exponent)
    let (mantissa_bits, min_exponent) = match dtype {
        DType::F16 => (10, -14),
        DType::BF16 => (7, -126),
        _ => return 0.0,
    };
    let exponent = if expected == 0.0 || !expected.is_finite() {
        min_exponent
    } else {
        (expected.abs().log2().floor() as i32).max(min_exponent)
    };
    4.0 * f64::powi(2.0, exponent - mantissa_bits)
}

fn first_line(text: &str) -> String {
    text.lines().next().unwrap_or_default().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn onnxruntimes_time_is_read_from_corpus_py_s_json() {
        assert_eq!(
            reference_time_us(r#"{"time_us": 1234.5, "threads": 2}"#),
            Some(1234.5)
        );
        assert_eq!(reference_time_us(r#"{"time_us":2e3}"#), Some(2000.0));
        assert_eq!(reference_time_us(r#"{"threads": 2}"#), None);
    }

    #[test]
    fn half_precision_slack_is_four_units_in_the_last_place() {
        // float16's unit in [0.5, 1) is 2^-11, in [1024, 2048) 1; bfloat16's in [1, 2) 2^-7.
        assert_eq!(
            half_precision_slack(DType::F16, 0.6265),
            4.0 * 2f64.powi(-11)
        );
        assert_eq!(half_precision_slack(DType::F16, -1500.0), 4.0);
        assert_eq!(half_precision_slack(DType::BF16, 1.5), 4.0 * 2f64.powi(-7));
        // Zero and subnormals: the smallest normal binade's unit.
        assert_eq!(half_precision_slack(DType::F16, 0.0), 4.0 * 2f64.powi(-24));
        assert_eq!(half_precision_slack(DType::F32, 0.6), 0.0);
    }
}
