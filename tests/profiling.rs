//! `RELAX_PROFILE=1`: a table of where a model's calls spent their time, per call target;
//! `RELAX_PERF_MAP=1`: perf names the functions of a library loaded from memory.

use relax_cargo_tests::{assert_success, cargo, fixture, stderr, stdout};

/// Three threads share one model and each call `forward` and `embed` 50 times: every
/// call is counted (nn-mlp's `forward` runs two dense layers on relax-runtime's kernel,
/// `embed` one), TVM's compiled functions and the VM's builtins have rows of their own,
/// and the shares add up to the whole.
#[test]
fn the_profile_counts_every_call_from_every_thread_by_kind() {
    let output = cargo(
        &fixture("nn-mlp"),
        &["run", "--quiet", "--", "profile", "3", "50"],
        &[("RELAX_PROFILE", "1")],
    );
    assert_success(&output, "fixture nn-mlp profile");
    let text = stdout(&output);
    let rows: Vec<(&str, &str, u64, f64)> = text
        .lines()
        .filter(|line| !line.starts_with("calls "))
        .map(|line| {
            let fields: Vec<&str> = line.split(' ').collect();
            (
                fields[0],
                fields[1],
                fields[2].parse().unwrap(),
                fields[3].parse().unwrap(),
            )
        })
        .collect();
    let row = |name: &str| {
        rows.iter()
            .find(|row| row.0 == name)
            .unwrap_or_else(|| panic!("no row {name} in\n{text}"))
    };
    assert!(text.contains("\ncalls 300\n"), "{text}");
    assert_eq!(row("forward").1, "function", "{text}");
    assert_eq!(row("forward").2, 150, "{text}");
    assert_eq!(row("embed").2, 150, "{text}");
    let dense = row("relax_runtime.dense_bias");
    assert_eq!((dense.1, dense.2), ("kernel", 450), "{text}");
    assert!(
        rows.iter().any(|row| row.1 == "compiled" && row.2 > 0),
        "no function compiled by TVM in\n{text}"
    );
    assert!(
        rows.iter()
            .any(|row| row.0.starts_with("vm.builtin.") && row.1 == "builtin"),
        "{text}"
    );
    let shares: f64 = rows.iter().map(|row| row.3).sum();
    assert!(
        (shares - 100.0).abs() < 0.01,
        "shares add up to {shares}\n{text}"
    );
    // Dropped, the model prints its table (reset, then one call) to stderr.
    let table = stderr(&output);
    assert!(
        table.contains("relax-runtime profile of model `tiny_mlp`: 1 calls"),
        "{table}"
    );
    assert!(
        table.contains("relax_runtime.dense_bias     kernel            2"),
        "{table}"
    );
}

/// Without the variable, no profile is kept and nothing is printed.
#[test]
fn without_relax_profile_there_is_no_profile() {
    let output = cargo(
        &fixture("nn-mlp"),
        &["run", "--quiet", "--", "profile", "1", "1"],
        &[("RELAX_PROFILE", "0")],
    );
    assert!(!output.status.success());
    assert!(
        stderr(&output).contains("RELAX_PROFILE=1 is set"),
        "{}",
        stderr(&output)
    );
    assert!(!stderr(&output).contains("relax-runtime profile"));
}

/// The map lists the library's functions where the dynamic loader mapped them, in
/// memory perf sees as anonymous (so that it reads the map), under the names the loader
/// itself gives those addresses, after what another writer of the process wrote.
#[test]
fn the_perf_map_names_the_functions_of_the_embedded_library() {
    let output = cargo(
        &fixture("nn-mlp"),
        &["run", "--quiet", "--", "perf-map"],
        &[("RELAX_PERF_MAP", "1")],
    );
    assert_success(&output, "fixture nn-mlp perf-map");
    let text = stdout(&output);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "first line: 1000 10 another_writer", "{text}");
    let counts: Vec<usize> = lines[1]
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|number| number.parse().ok())
        .collect();
    assert!(counts[0] >= 3, "{text}");
    assert_eq!(counts[0], counts[1], "{text}");
    assert_eq!(counts[0], counts[2], "{text}");
    assert!(
        lines[2].starts_with("named as the loader names them: "),
        "{text}"
    );
    assert!(lines[2].ends_with(", misnamed: []"), "{text}");
    let named: usize = lines[2]
        .trim_start_matches("named as the loader names them: ")
        .split(',')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(named >= 1, "{text}");
}

/// A profiled VM passes dtypes to the functions it calls as their names: the outputs
/// relax-runtime allocates (`relax_runtime.output`, static shapes of every dtype) come
/// out the same as without profiling.
#[test]
fn profiling_changes_no_output_of_any_dtype() {
    let run = |profile: &str| {
        let output = cargo(
            &fixture("dtypes"),
            &["run", "--quiet"],
            &[("RELAX_PROFILE", profile)],
        );
        assert_success(&output, &format!("fixture dtypes, RELAX_PROFILE={profile}"));
        output
    };
    let (plain, profiled) = (run("0"), run("1"));
    assert_eq!(stdout(&profiled), stdout(&plain));
    assert!(!stderr(&plain).contains("relax-runtime profile"));
    let table = stderr(&profiled);
    assert!(
        table.contains("relax-runtime profile of model `casts`"),
        "{table}"
    );
    assert!(table.contains("relax_runtime.output"), "{table}");
}
