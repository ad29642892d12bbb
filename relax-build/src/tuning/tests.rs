use super::RECORD_FILES;

/// The driver writes the records under the same names (meta-schedule's JSON database's),
/// which `cargo relax tune` moves into place and builds apply.
#[test]
fn the_driver_writes_the_record_files_builds_apply() {
    let tune = include_str!("../../driver/relax_driver/tune.py");
    let quoted: Vec<String> = RECORD_FILES
        .iter()
        .map(|file| format!("{file:?}"))
        .collect();
    let line = format!("RECORD_FILES = ({})", quoted.join(", "));
    assert!(
        tune.lines().any(|source| source == line),
        "tune.py should define `{line}`"
    );
}
