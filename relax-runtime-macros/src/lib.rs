//! The `include_model!` macro of relax-runtime; use it as `relax_runtime::include_model!`.
//!
//! It checks, at compile time, that the crate's build script compiled models (`OUT_DIR`
//! is set and holds relax-build's index, `relax/models.txt`) and that the named model is
//! one of them, and otherwise fails with a message that names the fix. A known model
//! expands to `include!` of the module relax-build generated for it.

use proc_macro::{Literal, TokenStream, TokenTree};

/// Includes the typed module relax-build generated for a model: see
/// `relax_runtime::include_model!`.
#[proc_macro]
pub fn include_model(input: TokenStream) -> TokenStream {
    match expand(input) {
        Ok(code) | Err(code) => code.parse().expect("the expansion is valid Rust"),
    }
}

fn compile_error(message: &str) -> String {
    format!("compile_error!({});", Literal::string(message))
}

fn expand(input: TokenStream) -> Result<String, String> {
    let tokens: Vec<TokenTree> = input.into_iter().collect();
    let usage = "relax_runtime::include_model! takes the model's name as a string: include_model!(\"digits\")";
    let name = match tokens.as_slice() {
        [TokenTree::Literal(literal)] => {
            let text = literal.to_string();
            text.strip_prefix('"')
                .and_then(|rest| rest.strip_suffix('"'))
                .map(str::to_string)
                .ok_or_else(|| compile_error(usage))?
        }
        _ => return Err(compile_error(usage)),
    };
    let Some(out_dir) = std::env::var_os("OUT_DIR") else {
        return Err(compile_error(&format!(
            "relax_runtime::include_model!(\"{name}\"): this crate has no build script output (OUT_DIR is not set). \
             Fix: add `relax-build` to [build-dependencies] and a build.rs with \
             `fn main() {{ relax_build::compile_models(); }}`, and declare the model under \
             [package.metadata.relax.models.{name}] in Cargo.toml"
        )));
    };
    let relax = std::path::Path::new(&out_dir).join("relax");
    let Ok(index) = std::fs::read_to_string(relax.join("models.txt")) else {
        return Err(compile_error(&format!(
            "relax_runtime::include_model!(\"{name}\"): the build script did not compile models (no relax/models.txt \
             in OUT_DIR). Fix: call `relax_build::compile_models()` from build.rs"
        )));
    };
    let declared: Vec<&str> = index.lines().filter(|line| !line.is_empty()).collect();
    if !declared.contains(&name.as_str()) {
        let declared = if declared.is_empty() {
            "none".to_string()
        } else {
            declared.join(", ")
        };
        return Err(compile_error(&format!(
            "relax_runtime::include_model!: no model `{name}` in [package.metadata.relax.models] of this package; \
             declared: {declared}"
        )));
    }
    let module = relax.join(format!("{name}.rs"));
    Ok(format!(
        "include!({});",
        Literal::string(&module.to_string_lossy())
    ))
}
