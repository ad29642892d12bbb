//! Threads: one loaded model shared by many threads returns exactly what the same call
//! returns on one thread (it used to crash: one VM served all threads); callers keep their
//! CPU affinity; a model's parallel loops run on the caller's pool.

use relax_cargo_tests::{assert_success, cargo, fixture, run_fixture, stdout};

#[test]
fn one_model_serves_four_threads_bit_exact() {
    assert_eq!(
        run_fixture("nn-mlp", &["threads", "4", "20000"]),
        "4 threads x 20000 calls: 0 mismatches; a VM moved to another thread: same output\n"
    );
}

/// TVM pins a thread that calls a model to its first cores when it creates the thread's
/// pool (with two request threads, both on core 0); relax-runtime configures the pool so
/// that callers keep their affinity, pinned or not.
#[test]
fn calling_threads_keep_their_cpu_affinity() {
    let all = std::fs::read_to_string("/proc/self/status").unwrap();
    let cpus = all
        .lines()
        .find_map(|line| line.strip_prefix("Cpus_allowed_list:"))
        .unwrap()
        .trim()
        .to_string();
    assert_eq!(
        run_fixture("nn-mlp", &["affinity"]),
        format!("default: kept CPUs {cpus}\none thread per call: kept CPUs {cpus}\n")
    );
    // Pinned by the application (here by taskset): stays pinned to its one CPU.
    let build = cargo(&fixture("nn-mlp"), &["build", "--quiet"], &[]);
    assert_success(&build, "building fixture nn-mlp");
    let binary = relax_cargo_tests::fixture_target_dir().join("debug/fixture-nn-mlp");
    let pinned = std::process::Command::new("taskset")
        .args(["-c", "0"])
        .arg(&binary)
        .arg("affinity")
        .output()
        .expect("running taskset (util-linux)");
    assert_success(&pinned, "the fixture under taskset -c 0");
    assert_eq!(
        stdout(&pinned),
        "default: kept CPUs 0\none thread per call: kept CPUs 0\n"
    );
}

/// A model's own parallel loops (TIR's `T.parallel`, compiled by TVM) run on the calling
/// thread's relax-runtime pool, and the error a task raises reaches the caller, whichever
/// thread ran the task; the pool works on after it.
#[test]
fn a_models_parallel_loops_run_on_the_pool_and_their_errors_reach_the_caller() {
    let cpus = std::thread::available_parallelism().map_or(1, |cpus| cpus.get());
    assert_eq!(
        run_fixture("tvmscript-pair", &["parallel"]),
        format!(
            "100 calls over 1001 rows: 0 wrong values\n\
             a refused row: TVM RuntimeError while calling `double_rows` of model `pair`: a row starts below -1000\n\
             then: right\n\
             pool threads: {}\n",
            cpus.min(2) - 1
        )
    );
}
