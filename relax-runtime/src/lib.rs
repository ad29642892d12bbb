//! Run Apache TVM Relax models compiled by `relax-build`, through a typed VirtualMachine.
//!
//! # Tutorial
//!
//! Declare a model in the app's `Cargo.toml` and compile it from `build.rs` with
//! `relax-build` (see its docs). Then, in the app:
//!
//! ```ignore
//! relax_runtime::include_model!("digits");          // defines `mod digits`
//!
//! fn main() -> relax_runtime::Result<()> {
//!     let model = digits::Model::load()?;             // CPU; the library is inside the binary
//!     let pixels = vec![0f32; 2 * 64];
//!     let x = relax_runtime::Tensor::from_slice(&pixels, &[2, 64])?;
//!     let logits = model.forward(&x)?;                // shape and dtype checked first
//!     let values: &[f32] = logits.as_slice::<f32>()?;
//!     println!("{values:?}");
//!     Ok(())
//! }
//! ```
//!
//! Each Relax function becomes a method named in snake_case that takes one `&Tensor`
//! per input and returns a `Tensor`, or a tuple of `Tensor`s when the function
//! returns a tuple. Weights are bound by `Model::load()`, never passed by the caller.
//! Inputs are checked against the compiled signature (dtype, rank, static dims, and
//! symbolic dims that must agree across arguments) before the call reaches TVM.
//!
//! # Finding TVM's runtime libraries
//!
//! The compiled library of a model travels inside the executable. The two TVM runtime
//! libraries it needs, `libtvm_ffi.so` and `libtvm_runtime.so`, are loaded once per
//! process from the first folder that has them, in this order:
//!
//! | where | when |
//! |---|---|
//! | `RELAX_RUNTIME_DIR` | when set: a folder holding both libraries |
//! | the executable's folder | always (how a bundled app ships them) |
//! | the toolchain that compiled the model | the folders relax-build recorded at build time |
//!
//! Each `load()` writes the embedded library to a private temporary file (in
//! `TMPDIR`, default `/tmp`) that is deleted once TVM has loaded it.
//!
//! # Element types
//!
//! [`Tensor::from_slice`] and [`Tensor::as_slice`] take `f32`, `f64`, `i8`..`i64`,
//! `u8`..`u64` and `bool`, and with the `half` feature `half::f16` (float16) and
//! `half::bf16` (bfloat16). Without it, float16/bfloat16 data is read and written as
//! raw little-endian bits with [`Tensor::from_bytes`] and [`Tensor::as_bytes`].

#[allow(
    non_upper_case_globals,
    non_camel_case_types,
    non_snake_case,
    dead_code,
    clippy::all
)]
mod sys;

mod device;
mod dtype;
mod error;
mod library;
mod object;
pub mod signature;
mod tensor;
mod vm;
mod weights;

pub use device::{Device, DeviceKind};
pub use dtype::{DType, Element};
pub use error::{Error, Result};
pub use library::RUNTIME_DIR_VARIABLE;
pub use tensor::Tensor;
pub use vm::{Function, Output, VirtualMachine};

/// Includes the typed module that relax-build generated for a model.
///
/// `include_model!("digits")` defines `mod digits` with a `Model` type whose methods
/// are the model's functions. It must be used in the crate whose `build.rs` ran
/// `relax_build::compile_models()`, since the module lives in that crate's `OUT_DIR`.
#[macro_export]
macro_rules! include_model {
    ($model:literal) => {
        include!(concat!(env!("OUT_DIR"), "/relax/", $model, ".rs"));
    };
}
