//! One loaded model shared by many threads: every concurrent call returns exactly what
//! the same call returns on one thread (it used to crash: one VM served all threads).

use relax_cargo_tests::run_fixture;

#[test]
fn one_model_serves_four_threads_bit_exact() {
    assert_eq!(
        run_fixture("nn-mlp", &["threads", "4", "20000"]),
        "4 threads x 20000 calls: 0 mismatches; a VM moved to another thread: same output\n"
    );
}
