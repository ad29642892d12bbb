fn main() {
    relax_build::compile_models();
}
