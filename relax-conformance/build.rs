// The conformance runner compiles for the machine it runs on.
fn main() {
    println!(
        "cargo::rustc-env=RELAX_CONFORMANCE_HOST={}",
        std::env::var("TARGET").unwrap()
    );
}
