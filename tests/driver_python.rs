//! The compile driver's Python unit tests (its helpers, the ONNX preparation and the
//! offload's choice of weight layouts), run with the toolchain's Python (which has TVM)
//! so that CI runs them with the rest.

use relax_cargo_tests::{assert_success, stderr, toolchain_python, workspace_root};

#[test]
fn the_drivers_python_unit_tests_pass() {
    let output = std::process::Command::new(toolchain_python())
        .args(["-m", "unittest", "discover", "-v", "-s"])
        .arg(workspace_root().join("relax-build/driver/tests"))
        .output()
        .expect("running the toolchain's Python");
    assert_success(
        &output,
        "python -m unittest discover relax-build/driver/tests",
    );
    let report = stderr(&output);
    assert!(report.contains("\nOK"), "{report}");
    assert!(!report.contains("Ran 0 tests"), "{report}");
}
