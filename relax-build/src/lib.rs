//! Compile Apache TVM Relax models declared in `Cargo.toml` at `cargo build` time.
//!
//! # Tutorial
//!
//! 1. Declare the model in the app's `Cargo.toml`:
//!
//! ```toml
//! [build-dependencies]
//! relax-build = { path = "../relax-build" }
//! [dependencies]
//! relax-runtime = { path = "../relax-runtime" }
//!
//! [package.metadata.relax.models.digits]
//! source = "models/digits.py"              # relative to the package root
//! entry = "DigitsMLP"                       # relax.frontend.nn.Module subclass, TVMScript IRModule,
//!                                           # or a function returning an IRModule
//! weights = "models/digits.safetensors"     # nn modules: parameter values by parameter name
//! [package.metadata.relax.models.digits.inputs.forward]
//! x = "float32[batch, 64]"                  # export spec per method, symbolic dims by name
//! ```
//!
//! A TVMScript source declares no inputs: functions, argument names, shapes and dtypes
//! come from the IRModule itself.
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
//! For each model, relax-build runs a compile driver (a Python file shipped in this
//! crate) with a Python that has the pinned TVM (see [`toolchain`]); the driver imports
//! the source, exports it to a Relax IRModule, compiles it with `tvm.compile` for the
//! Cargo target ([`target`]) and writes, under `$OUT_DIR/relax/<model>/`, the exported
//! library and a signature JSON. relax-build then copies the weights next to it and
//! generates `$OUT_DIR/relax/<model>.rs`, the typed module that `include_model!`
//! includes. It prints `rerun-if-changed` for the manifest, every source and weights
//! file, and `rerun-if-env-changed` for every variable it reads, so a build with
//! nothing changed does not rerun the build script and never starts Python.
//!
//! # Environment variables
//!
//! | variable | meaning |
//! |---|---|
//! | `RELAX_PYTHON` | the Python interpreter to use; it must have `apache-tvm==0.27.0.post1` |
//! | `VIRTUAL_ENV` | an active virtualenv, used when its Python has the pinned TVM |
//! | `RELAX_TOOLCHAIN_DIR` | where the managed toolchain lives (default `$XDG_CACHE_HOME/relax-cargo/toolchains`, else `~/.cache/relax-cargo/toolchains`) |
//! | `RELAX_BOOTSTRAP_PYTHON` | the python3 that creates the managed toolchain (default `python3`) |
//! | `RELAX_ALLOW_TVM_VERSION` | `1` accepts a TVM other than the pinned one (unsupported) |
//!
//! At run time, relax-runtime reads `RELAX_RUNTIME_DIR` (see its docs).

mod cargo;
mod codegen;
mod compile;
pub mod env;
mod error;
pub mod metadata;
pub mod signature;
pub mod target;
pub mod toolchain;

use std::path::{Path, PathBuf};

pub use compile::CompiledModel;
pub use error::{Error, Result};

use error::io;

/// Compiles every model of the package being built. Call it from `build.rs`.
///
/// On error, prints the message and exits with status 1 (failing the build).
/// Use [`Config::try_compile`] to handle the error yourself.
pub fn compile_models() {
    Config::new().compile();
}

/// Options for compiling a package's models; every field defaults to what Cargo
/// gives a build script.
#[derive(Debug, Clone, Default)]
pub struct Config {
    manifest_dir: Option<PathBuf>,
    out_dir: Option<PathBuf>,
    target: Option<String>,
    host: Option<String>,
    cargo_directives: bool,
}

impl Config {
    pub fn new() -> Config {
        Config {
            cargo_directives: true,
            ..Config::default()
        }
    }

    /// The folder of the `Cargo.toml` to read (default: `CARGO_MANIFEST_DIR`).
    pub fn manifest_dir(mut self, dir: impl Into<PathBuf>) -> Config {
        self.manifest_dir = Some(dir.into());
        self
    }

    /// Where to write artifacts and generated code (default: `OUT_DIR`).
    pub fn out_dir(mut self, dir: impl Into<PathBuf>) -> Config {
        self.out_dir = Some(dir.into());
        self
    }

    /// The Cargo target triple to compile for (default: `TARGET`).
    pub fn target(mut self, triple: impl Into<String>) -> Config {
        self.target = Some(triple.into());
        self
    }

    /// The triple of the build machine (default: `HOST`, else the target).
    pub fn host(mut self, triple: impl Into<String>) -> Config {
        self.host = Some(triple.into());
        self
    }

    /// Whether to print `cargo::` directives (default: yes; turn off outside build scripts).
    pub fn cargo_directives(mut self, enabled: bool) -> Config {
        self.cargo_directives = enabled;
        self
    }

    /// Like [`Config::try_compile`], but prints the error and exits with status 1.
    pub fn compile(&self) -> Vec<CompiledModel> {
        match self.try_compile() {
            Ok(models) => models,
            Err(error) => {
                eprintln!("error: relax-build: {error}");
                std::process::exit(1);
            }
        }
    }

    /// Compiles every model declared in `[package.metadata.relax]`.
    pub fn try_compile(&self) -> Result<Vec<CompiledModel>> {
        cargo::set_enabled(self.cargo_directives);
        let manifest_dir = self.path_or_env(&self.manifest_dir, "CARGO_MANIFEST_DIR")?;
        let out_dir = self.path_or_env(&self.out_dir, "OUT_DIR")?;
        let target = match &self.target {
            Some(target) => target.clone(),
            None => env::cargo_var("TARGET")?,
        };
        let host = match &self.host {
            Some(host) => host.clone(),
            None => std::env::var("HOST").unwrap_or_else(|_| target.clone()),
        };
        cargo::rerun_if_changed(&manifest_dir.join("Cargo.toml"));
        let metadata = metadata::read(&manifest_dir)?;
        if metadata.models.is_empty() {
            cargo::warning(&format!(
                "relax-build: no models declared in [{}.models] of {}",
                metadata::ROOT_KEY,
                manifest_dir.join("Cargo.toml").display()
            ));
            return Ok(Vec::new());
        }
        for model in &metadata.models {
            cargo::rerun_if_changed(&model.source);
            if let Some(weights) = &model.weights {
                cargo::rerun_if_changed(weights);
            }
        }
        if target != host {
            return Err(Error::UnsupportedTarget {
                target,
                message: format!(
                    "cross-compiling models from {host} is not supported yet; build for the host"
                ),
            });
        }
        let tvm_target = target::tvm_target(&target, &host, &rustflags())?;
        let toolchain = toolchain::find_or_provision()?;

        let relax_dir = out_dir.join("relax");
        std::fs::create_dir_all(&relax_dir)
            .map_err(io(format!("creating {}", relax_dir.display())))?;
        let driver = relax_dir.join("driver.py");
        compile::write_atomically(&driver, compile::DRIVER_SOURCE.as_bytes())?;

        let mut compiled = Vec::new();
        for model in &metadata.models {
            let artifacts = compile::compile(
                model,
                &toolchain,
                &tvm_target,
                &driver,
                &relax_dir.join(&model.name),
            )?;
            let relative = |path: &Path| -> String {
                path.strip_prefix(&out_dir)
                    .unwrap_or(path)
                    .to_string_lossy()
                    .into_owned()
            };
            let library = relative(&artifacts.library);
            let weights = artifacts.weights.as_deref().map(relative);
            let source = model
                .source
                .strip_prefix(&manifest_dir)
                .unwrap_or(&model.source);
            let origin = format!("`{}`, entry `{}`", source.display(), model.entry);
            let code = codegen::generate(
                &artifacts.signature,
                &origin,
                &codegen::Embedded {
                    library: &library,
                    weights: weights.as_deref(),
                },
            )?;
            compile::write_atomically(
                &relax_dir.join(format!("{}.rs", model.name)),
                code.as_bytes(),
            )?;
            compiled.push(artifacts);
        }
        let runtime_dirs: Vec<String> = toolchain
            .runtime_library_dirs
            .iter()
            .map(|dir| dir.to_string_lossy().into_owned())
            .collect();
        cargo::rustc_env(codegen::RUNTIME_DIRS_ENV, &runtime_dirs.join(":"));
        Ok(compiled)
    }

    fn path_or_env(&self, configured: &Option<PathBuf>, variable: &'static str) -> Result<PathBuf> {
        match configured {
            Some(path) => Ok(path.clone()),
            None => env::cargo_var(variable).map(PathBuf::from),
        }
    }
}

/// The build's rustflags (`CARGO_ENCODED_RUSTFLAGS`, separated by `\x1f`).
fn rustflags() -> Vec<String> {
    std::env::var("CARGO_ENCODED_RUSTFLAGS")
        .map(|flags| {
            flags
                .split('\x1f')
                .filter(|flag| !flag.is_empty())
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}
