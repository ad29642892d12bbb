pub fn compile_models() {}
