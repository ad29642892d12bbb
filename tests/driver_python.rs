//! The compile driver's Python unit tests (its helpers, the ONNX preparation, the
//! offload's choice of weight layouts, the driver's own ONNX converters against
//! onnxruntime), run with the toolchain's Python (which has TVM) so that CI runs them
//! with the rest. onnxruntime, which the toolchain does not install, comes from the
//! tests' Python: its packages are appended to the search path, after the toolchain's.

use relax_cargo_tests::{assert_success, stderr, test_python, toolchain_python, workspace_root};

/// Appends the folder in argv[1] to the search path, then runs unittest discovery of
/// the folder in argv[2].
const RUN: &str = "import sys, unittest; sys.path.append(sys.argv[1]); \
                   unittest.main(module=None, argv=['unittest', 'discover', '-v', '-s', sys.argv[2]])";

#[test]
fn the_drivers_python_unit_tests_pass() {
    let site = std::process::Command::new(test_python())
        .args([
            "-c",
            "import sysconfig; print(sysconfig.get_paths()['purelib'])",
        ])
        .output()
        .expect("running the tests' Python");
    assert_success(&site, "locating the tests' Python packages");
    let site = String::from_utf8(site.stdout).unwrap();
    let output = std::process::Command::new(toolchain_python())
        .args(["-c", RUN, site.trim()])
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
