//! Compile Apache TVM Relax models declared in `Cargo.toml` at `cargo build` time, for
//! [relax-runtime](https://docs.rs/relax-runtime).
//!
//! # Tutorial
//!
//! 1. Declare the model in the app's `Cargo.toml`:
//!
//! ```toml
//! [build-dependencies]
//! relax-build = "0.1"
//! [dependencies]
//! relax-runtime = "0.1"
//!
//! [package.metadata.relax.models.digits]
//! source = "models/digits.py"              # relative to the package root
//! entry = "DigitsMLP"                       # relax.frontend.nn.Module subclass, TVMScript IRModule,
//!                                           # or a function returning an IRModule
//! weights = "models/digits.safetensors"     # nn modules: parameter values by parameter name
//! include = ["models/layers"]               # optional: files/folders the source imports
//! pipeline = "zero"                         # optional: "zero" (default), "cpu" or "default"
//! [package.metadata.relax.models.digits.inputs.forward]
//! x = "float32[batch, 64]"                  # export spec per method, symbolic dims by name
//! ```
//!
//! A TVMScript source declares no inputs: functions, argument names, shapes and dtypes
//! come from the IRModule itself. An `.onnx` source is imported with TVM's ONNX
//! importer; its function is `main`. A PyTorch source (a `.py` whose entry is a
//! `torch.nn.Module`, exported with `torch.export` from `inputs.forward`, or a `.pt2`
//! program) is imported with `from_exported_program`; its function is `forward`, and
//! torch is installed beside the managed toolchain the first time one is built (only
//! PyTorch sources' builds see it).
//!
//! 2. Compile the models from `build.rs`:
//!
//! ```no_run
//! // build.rs
//! # fn main() {
//! relax_build::compile_models();
//! # }
//! ```
//!
//! 3. Include the generated module with `relax_runtime::include_model!("digits")` and
//!    call `digits::Model::load()?.forward(&x)?`.
//!
//! # What happens at build time
//!
//! For each model, relax-build computes a key in Rust: a sha256 over the source and
//! `include` files, the weights, the manifest entry, the TVM target, the driver and the
//! versions. It then takes the model's artifacts from, in order:
//!
//! 1. the package's prepared folder (`.relax/<model>/<target>/`, written by
//!    `cargo relax prepare`), when its recorded key matches;
//! 2. the shared cache, keyed by the key and the TVM build;
//! 3. a compile: a driver (Python files shipped in this crate) run with a Python that
//!    has the pinned TVM imports the source, exports it to a Relax IRModule, compiles it
//!    with `tvm.compile` for the Cargo target, and writes the exported library and a
//!    signature JSON into a new cache entry.
//!
//! The artifacts are copied to `$OUT_DIR/relax/<model>/`, and `$OUT_DIR/relax/<model>.rs`,
//! the typed module `include_model!` includes, is generated. relax-build prints
//! `rerun-if-changed` for the manifest and every file a model reads, and
//! `rerun-if-env-changed` for every variable it reads, so a build with nothing changed
//! does not rerun the build script; when it does rerun, cached models start no Python.
//! A build script writes only under `OUT_DIR` (and the shared cache).
//!
//! Offline (`RELAX_OFFLINE=1` or `CARGO_NET_OFFLINE=true`) only prepared artifacts are
//! used; a missing, stale or tampered one is an error naming the model and the
//! `cargo relax prepare` command to run.
//!
//! # Compile options
//!
//! Set under `[package.metadata.relax]` for every model, or per model:
//!
//! | key | values | default |
//! |---|---|---|
//! | `pipeline` | `"zero"`: `relax.get_pipeline("zero")` (constant folding, fusion), then the CPU backend pipeline; `"cpu"`: the backend pipeline alone; `"default"`: `tvm.compile`'s default pipeline alone | `"zero"` |
//! | `tir_pipeline` | passed to `tvm.compile` | `"default"` |
//! | `opt_level` | 0–3 | 3 |
//! | `target` | a table of TVM target keys merged over the one derived from the Cargo target | — |
//! | `offload` | matmuls and convolutions run in relax-runtime's kernels | `true` |
//! | `onnx_prepare` | fold an ONNX graph's shape computations with the pinned dims before importing it | `true` |
//! | `precision` | `"f32"`, or `"bf16"`: offloaded dense layers and blocked convolutions multiply bf16-rounded operands with float32 sums | `"f32"` |
//! | `python` (package level only) | the Python to compile with: a path, or a command on `PATH` | — |
//! | `allow_outside` (package level only) | folders outside the package that `source`, `weights`, `files` and `include` may name files in | — |
//!
//! Every path a model names (`source`, `weights`, `files.<name>`, `include`) must lie
//! inside the package (a `$OUT_DIR/` path inside `OUT_DIR`) once `..` and symbolic links
//! are resolved, or inside a folder listed in `allow_outside`; anything else is an
//! error naming the key and the path.
//!
//! # Environment variables
//!
#![doc = include_str!("../docs/environment.md")]
//!
//! # Layout of this crate
//!
//! Leaves first; every module imports only modules above it in this list.
//!
//! - `error`, `versions`, `text`, `files` (atomic writes, sha256, lock files), `cargo`
//!   (the only place printing directives), `env` (every variable's name and the one
//!   reader), `elf`, `tensor_spec`;
//! - `metadata` (the manifest), `signature` (the driver's signature JSON), `tuning`,
//!   `target` (Cargo target -> TVM target, cross compiler);
//! - `driver` (the typed, versioned protocol with `driver/*.py`), `key`, `artifacts`
//!   (artifact folders and their manifest), `cache`, `prepared`, `toolchain`,
//!   `locks` (the hash locks the managed toolchain is installed from),
//!   `runtime_libraries`, `fetched` (files from pinned packages);
//! - `compile` (one driver run for one model), `resolve` (prepared, cached or compiled),
//!   `codegen`;
//! - `config` ([`Config`], settings only), `package` (one package's models), and the
//!   workflows: `build_script` ([`Config::try_compile`]) and `tooling` (cargo relax).

#![warn(missing_docs)]

mod artifacts;
mod build_script;
mod cache;
mod cargo;
mod codegen;
mod compile;
mod config;
mod driver;
mod elf;
mod env;
mod error;
mod extras;
mod fetched;
mod files;
mod key;
mod locks;
mod metadata;
mod package;
mod prepared;
mod resolve;
mod runtime_libraries;
mod signature;
mod target;
mod tensor_spec;
mod text;
mod toolchain;
mod tuning;
mod versions;

#[doc(hidden)]
pub mod tooling;

pub use build_script::CompiledModel;
pub use config::Config;
pub use error::Error;

/// Compiles every model of the package being built. Call it from `build.rs`.
///
/// On error, prints the message and exits with status 1 (failing the build).
/// Use [`Config::try_compile`] to handle the error yourself.
///
/// ```no_run
/// // build.rs
/// # fn main() {
/// relax_build::compile_models();
/// # }
/// ```
pub fn compile_models() {
    Config::new().compile();
}
