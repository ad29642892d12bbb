//! Run Apache TVM Relax models compiled by [relax-build](https://docs.rs/relax-build),
//! through a typed, thread-safe wrapper generated per model.
//!
//! # Tutorial
//!
//! Declare a model in the app's `Cargo.toml` and compile it from `build.rs` with
//! relax-build (see its docs). Then, in the app:
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
//! per input and returns a `Tensor`, or a tuple of `Tensor`s when the function returns
//! a tuple. Weights are bound by `Model::load()`, never passed by the caller. Inputs are
//! checked against the compiled signature (dtype, rank, static dims, and symbolic dims
//! that must agree across arguments) before the call reaches TVM.
//!
//! # Threads and serving
//!
//! A generated `Model` (a [`Session`]) is `Send + Sync`: load it once, share it (in an
//! `Arc` or a `static`), and call it from every thread. The library and the weights are
//! loaded once; each call in flight gets a VM of its own from a pool. A
//! [`VirtualMachine`] is one VM for one thread at a time (`Send`, not `Sync`).
//!
//! # Finding TVM's runtime libraries
//!
//! The compiled library of a model travels inside the executable. The two TVM runtime
//! libraries it needs, `libtvm_ffi.so` and `libtvm_runtime.so`, are loaded once per
//! process from the first folder that has them: `RELAX_RUNTIME_DIR`; the executable's
//! folder (a bundle from `cargo relax bundle`); the copy relax-build made next to the
//! build (`cargo run`, `cargo test`); the managed toolchain of relax-build
//! (`RELAX_TOOLCHAIN_DIR`, else `~/.cache/relax-cargo/toolchains`). The executable
//! holds no absolute path of the machine that built it.
//!
//! Nothing is written to disk at run time: a model's library is checked against the
//! sha256 recorded at build time and loaded from an in-memory file, so models load on
//! a read-only file system and with a `noexec` `/tmp`.
//!
//! # Profiling
//!
//! With `RELAX_PROFILE=1` (read when the first model loads), every VM of a model
//! reports each call it makes (Relax VM's `set_instrument`), and relax-runtime times
//! the calls made from Rust: [`Session::profile`] returns a [`Profile`] with a row per
//! call target ([`CallKind`]: a relax-kernels kernel, a function TVM compiled into the
//! library, a VM builtin, a Relax function), and each model prints it to stderr when
//! dropped. A row's time is its own, without the calls it made, so the rows add up to
//! the time spent in the model's calls. With `RELAX_PROFILE=shapes` a row is a call
//! target with the shapes of its tensor arguments ([`PROFILE_SHAPES`]): each layer of a
//! CNN its own row. Off, it costs nothing: no instrument is set.
//!
//! With `RELAX_PERF_MAP=1`, each library embedded by `include_model!` appends its
//! functions to `/tmp/perf-<pid>.map` when it loads, so that `perf report` names them
//! (perf sees the in-memory file as anonymous memory). Both variables are in the one
//! environment-variable table (relax-build's docs).
//!
//! # Element types
//!
//! [`Tensor::from_slice`] and [`Tensor::as_slice`] take `f32`, `f64`, `i8`..`i64`,
//! `u8`..`u64` and `bool`, and with the `half` feature `half::f16` (float16) and
//! `half::bf16` (bfloat16). Without it, float16/bfloat16 data is read and written as
//! raw little-endian bits with [`Tensor::from_bytes`] and [`Tensor::as_bytes`].
//!
//! # ndarray
//!
//! With the `ndarray` feature, `Tensor::from_array` takes any `ndarray` array or view
//! (a transposed or sliced one included), `Tensor::view::<T>()` gives an `ArrayViewD`
//! of a tensor without a copy (an output, for one), and `Tensor::to_array` an owned
//! `ArrayD`.

#![warn(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks)]

#[allow(
    non_upper_case_globals,
    non_camel_case_types,
    non_snake_case,
    dead_code,
    missing_docs,
    unsafe_op_in_unsafe_fn,
    clippy::all,
    clippy::undocumented_unsafe_blocks
)]
mod sys;

mod api;
mod backend;
mod device;
mod dtype;
mod error;
mod globals;
mod kernels;
mod library;
mod locate;
mod object;
mod outputs;
mod pool;
mod profile;
pub mod rpc;
mod runtime;
mod session;
mod set_ops;
mod stream;
mod tensor;
#[cfg(feature = "ndarray")]
mod tensor_ndarray;
mod threads;
mod unbuilt_branch;
mod vm;
mod weights;

#[doc(hidden)]
pub mod signature;

/// What the code relax-build generates uses; not part of the API.
#[doc(hidden)]
#[path = "private.rs"]
pub mod __private;
use __private as private;

pub use device::{Device, DeviceKind};
pub use dtype::{DType, Element};
pub use error::{Error, Result};
pub use locate::RUNTIME_DIR_VARIABLE;
pub use profile::{CallKind, Profile, ProfileRow, PROFILE_SHAPES, PROFILE_VARIABLE};
pub use relax_perf_map::PERF_MAP_VARIABLE;
pub use session::Session;
pub use stream::Stream;
pub use tensor::Tensor;
pub use threads::{set_threads_per_call, threads_per_call};
pub use vm::{Function, Output, VirtualMachine};

/// Includes the typed module that relax-build generated for a model.
///
/// `include_model!("digits")` defines `mod digits` with a `Model` type whose methods
/// are the model's functions. It must be used in the crate whose `build.rs` ran
/// `relax_build::compile_models()`, since the module lives in that crate's `OUT_DIR`.
/// Without a build script, or with a name not declared in
/// `[package.metadata.relax.models]`, it is a compile error that says what to do (and
/// lists the declared models).
///
/// ```ignore
/// relax_runtime::include_model!("digits");
/// let model = digits::Model::load()?;
/// ```
///
/// Loading a model runs its library's native code, so the generated module vouches
/// for the embedded library in one `unsafe` block (with its `// SAFETY:` comment: the
/// bytes are the library relax-build compiled, and their sha256 is checked before they
/// are loaded); safe code cannot make a model out of other bytes. The module allows
/// `unsafe_code`, so a crate that denies it still compiles; one that forbids it
/// (`#![forbid(unsafe_code)]`, which no `allow` can lift) must deny it instead.
pub use relax_runtime_macros::include_model;
