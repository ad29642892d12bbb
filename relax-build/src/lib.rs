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
//! include = ["models/layers"]               # optional: files/folders the source imports
//! pipeline = "zero"                         # optional: "zero" (default) or "default"
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
//! For each model, relax-build computes a key in Rust (see [`key`]): a sha256 over the
//! source and `include` files, the weights, the manifest entry, the TVM target, the
//! driver and the versions. It then takes the model's artifacts from, in order:
//!
//! 1. the package's prepared folder (`.relax/<model>/<target>/`, written by
//!    `cargo relax prepare`), when its recorded key matches (see [`prepared`]);
//! 2. the shared cache (see [`Cache`]), keyed by the key and the TVM build;
//! 3. a compile: a driver (a Python file shipped in this crate) run with a Python that
//!    has the pinned TVM (see [`toolchain`]) imports the source, exports it to a Relax
//!    IRModule, compiles it with `tvm.compile` for the Cargo target ([`target`]), and
//!    writes the exported library and a signature JSON into a new cache entry.
//!
//! The artifacts are copied to `$OUT_DIR/relax/<model>/`, and `$OUT_DIR/relax/<model>.rs`,
//! the typed module `include_model!` includes, is generated. relax-build prints
//! `rerun-if-changed` for the manifest and every source, include, weights file and the
//! prepared folder, and `rerun-if-env-changed` for every variable it reads, so a build
//! with nothing changed does not rerun the build script; when it does rerun, cached
//! models start no Python (toolchain probes are cached too).
//!
//! Offline (`RELAX_OFFLINE=1` or `CARGO_NET_OFFLINE=true`) only prepared artifacts are
//! used; a missing, stale or tampered one is an error naming the model and the
//! `cargo relax prepare` command to run.
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
//! | `RELAX_CACHE_DIR` | the artifact cache (default `$XDG_CACHE_HOME/relax-cargo/cache`, else `~/.cache/relax-cargo/cache`) |
//! | `RELAX_OFFLINE` | `1`/`true`: use prepared artifacts only, never Python or the network |
//! | `CARGO_NET_OFFLINE` | `true` (`cargo --offline`): the same |
//!
//! At run time, relax-runtime reads `RELAX_RUNTIME_DIR` (see its docs).

mod cache;
mod cargo;
mod codegen;
mod compile;
pub mod env;
mod error;
pub mod key;
pub mod metadata;
pub mod prepared;
mod resolve;
pub mod signature;
pub mod target;
pub mod toolchain;
pub mod tuning;

use std::path::{Path, PathBuf};

pub use cache::{ArtifactManifest, Cache};
pub use error::{Error, Result};
pub use key::KeyInputs;
pub use prepared::Prepared;
pub use resolve::ArtifactSource;

use error::io;
use metadata::{Metadata, Model};
use resolve::{Artifacts, Resolver, ResolverSettings};
use signature::Signature;

/// Compiles every model of the package being built. Call it from `build.rs`.
///
/// On error, prints the message and exits with status 1 (failing the build).
/// Use [`Config::try_compile`] to handle the error yourself.
pub fn compile_models() {
    Config::new().compile();
}

/// A model ready for `include_model!`: its artifacts in `OUT_DIR` and where they came from.
#[derive(Debug, Clone)]
pub struct CompiledModel {
    pub name: String,
    pub library: PathBuf,
    pub weights: Option<PathBuf>,
    pub signature: Signature,
    pub source: ArtifactSource,
    /// The key over the model's inputs (what prepared artifacts are checked against).
    pub input_key: String,
    /// The key of its cache entry (inputs and toolchain).
    pub cache_key: String,
}

/// A model's artifacts written to the prepared folder by [`Config::prepare`].
#[derive(Debug, Clone)]
pub struct PreparedModel {
    pub name: String,
    pub dir: PathBuf,
    pub source: ArtifactSource,
}

/// What [`Config::status`] reports of one model.
#[derive(Debug, Clone)]
pub struct ModelStatus {
    pub name: String,
    pub input_key: String,
    /// The cache key, when a toolchain was found to compute it.
    pub cache_key: Option<String>,
    /// Whether the cache holds a valid entry for it.
    pub cached: bool,
    pub prepared: Prepared,
}

/// Options for compiling a package's models; every field defaults to what Cargo
/// gives a build script.
#[derive(Debug, Clone, Default)]
pub struct Config {
    manifest_dir: Option<PathBuf>,
    out_dir: Option<PathBuf>,
    target: Option<String>,
    host: Option<String>,
    cache_dir: Option<PathBuf>,
    prepared_dir: Option<PathBuf>,
    offline: Option<bool>,
    cargo_directives: bool,
}

/// One package's models and how to resolve them for one target.
struct Package {
    manifest_dir: PathBuf,
    metadata: Metadata,
    resolver: Resolver,
}

impl Package {
    /// The folders of the target's TVM runtime libraries (see
    /// [`toolchain::runtime_library_dirs`]); a cross target's are fetched when missing,
    /// unless offline.
    fn runtime_library_dirs(&self) -> Result<Vec<PathBuf>> {
        let resolver = &self.resolver;
        toolchain::runtime_library_dirs(&toolchain::RuntimeLookup {
            cargo_target: &resolver.cargo_target,
            host: &resolver.host,
            toolchain: resolver.resolved_toolchain(),
            find_toolchain: &|| resolver.toolchain().ok(),
            manifest_python: self.metadata.python.as_deref(),
            cache: &resolver.cache,
            fetch: !resolver.offline,
        })
    }
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

    /// The artifact cache (default: `RELAX_CACHE_DIR`, else the user cache folder).
    pub fn cache_dir(mut self, dir: impl Into<PathBuf>) -> Config {
        self.cache_dir = Some(dir.into());
        self
    }

    /// The prepared-artifacts folder (default: `.relax/` next to `Cargo.toml`).
    pub fn prepared_dir(mut self, dir: impl Into<PathBuf>) -> Config {
        self.prepared_dir = Some(dir.into());
        self
    }

    /// Use only prepared artifacts (default: `RELAX_OFFLINE` / `CARGO_NET_OFFLINE`).
    pub fn offline(mut self, offline: bool) -> Config {
        self.offline = Some(offline);
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

    /// Resolves every model declared in `[package.metadata.relax]` (prepared, cached, or
    /// compiled now), copies its artifacts into `OUT_DIR/relax/<model>/` and generates
    /// `OUT_DIR/relax/<model>.rs`.
    pub fn try_compile(&self) -> Result<Vec<CompiledModel>> {
        cargo::set_enabled(self.cargo_directives);
        let out_dir = self.path_or_env(&self.out_dir, "OUT_DIR")?;
        let package = self.package()?;
        if package.metadata.models.is_empty() {
            cargo::warning(&format!(
                "relax-build: no models declared in [{}.models] of {}",
                metadata::ROOT_KEY,
                package.resolver.manifest_path.display()
            ));
            return Ok(Vec::new());
        }
        let relax_dir = out_dir.join("relax");
        let mut compiled = Vec::new();
        for model in &package.metadata.models {
            if let (Some(tune), None) = (model.tune, package.resolver.tuning_records(model)) {
                cargo::warning(&format!(
                    "relax-build: model `{}` has tune = {{ trials = {} }} but no tuning records for {}; it is \
                     compiled untuned. Run `cargo relax tune --manifest-path {} --model {}` and commit {}",
                    model.name,
                    tune.trials,
                    package.resolver.cargo_target,
                    package.resolver.manifest_path.display(),
                    model.name,
                    tuning::dir(&package.resolver.prepared_root, &model.name, &package.resolver.cargo_target).display()
                ));
            }
            let inputs = package.resolver.key_inputs(model)?;
            let artifacts = package.resolver.resolve(model, &inputs)?;
            compiled.push(materialize(
                model,
                &package.manifest_dir,
                &artifacts,
                &relax_dir,
            )?);
        }
        let runtime_dirs = package.runtime_library_dirs()?;
        let runtime_dirs: Vec<String> = runtime_dirs
            .iter()
            .map(|dir| dir.to_string_lossy().into_owned())
            .collect();
        cargo::rustc_env(codegen::RUNTIME_DIRS_ENV, &runtime_dirs.join(":"));
        Ok(compiled)
    }

    /// Resolves one model declared in code (see [`metadata::Model::from_source`]) and
    /// copies its artifacts into `OUT_DIR/relax/<model>/` (no prepared folder is used).
    pub fn try_compile_model(&self, model: &Model) -> Result<CompiledModel> {
        cargo::set_enabled(self.cargo_directives);
        let out_dir = self.path_or_env(&self.out_dir, "OUT_DIR")?;
        let (target, host) = self.triples()?;
        let resolver = Resolver::new(ResolverSettings {
            cache: self.cache()?,
            prepared_root: out_dir.join("no-prepared-artifacts"),
            manifest_path: model.manifest_dir.join("Cargo.toml"),
            base_target: base_target(&target, &host),
            cargo_target: target,
            host,
            offline: false,
            manifest_python: None,
        });
        let inputs = resolver.key_inputs(model)?;
        let toolchain = resolver
            .toolchain()
            .map_err(|message| Error::Toolchain { message })?;
        let artifacts = resolver.compile_cached(model, &inputs, toolchain)?;
        materialize(
            model,
            &model.manifest_dir,
            &artifacts,
            &out_dir.join("relax"),
        )
    }

    /// Compiles every model (through the cache) and writes its artifacts to the
    /// prepared folder, so later builds need no Python. Needs a TVM toolchain.
    pub fn prepare(&self) -> Result<Vec<PreparedModel>> {
        cargo::set_enabled(self.cargo_directives);
        let package = self.package()?;
        let resolver = &package.resolver;
        let mut prepared = Vec::new();
        for model in &package.metadata.models {
            let inputs = resolver.key_inputs(model)?;
            let toolchain = resolver
                .toolchain()
                .map_err(|message| Error::Toolchain { message })?;
            let artifacts = resolver.compile_cached(model, &inputs, toolchain)?;
            let dir =
                prepared::write(&resolver.prepared_root, &artifacts.dir, &artifacts.manifest)?;
            prepared.push(PreparedModel {
                name: model.name.clone(),
                dir,
                source: artifacts.source,
            });
        }
        // A later offline build of a cross target needs the target's runtime libraries.
        package.runtime_library_dirs()?;
        Ok(prepared)
    }

    /// Tunes with meta-schedule the models that declare `tune` (or only the one named
    /// `only`) and writes their records to `.relax/tuning/<model>/<target>/`; `trials`
    /// (per task) overrides `tune.trials`. Resumes from records already there. Returns
    /// the folders.
    pub fn tune(&self, only: Option<&str>, trials: Option<u32>) -> Result<Vec<PathBuf>> {
        cargo::set_enabled(self.cargo_directives);
        let package = self.package()?;
        let resolver = &package.resolver;
        let models: Vec<&Model> = package
            .metadata
            .models
            .iter()
            .filter(|model| match only {
                Some(name) => name == model.name,
                None => model.tune.is_some(),
            })
            .collect();
        if only.is_none() && models.is_empty() {
            return Err(Error::ManifestKey {
                path: resolver.manifest_path.clone(),
                key: format!("{}.models", metadata::ROOT_KEY),
                message: "no model declares tune = { trials = N }; add it to the models to tune, or pass --model".to_string(),
            });
        }
        if let (Some(name), true) = (only, models.is_empty()) {
            return Err(Error::ManifestKey {
                path: resolver.manifest_path.clone(),
                key: format!("{}.models.{name}", metadata::ROOT_KEY),
                message: "no such model".to_string(),
            });
        }
        if resolver.cargo_target != resolver.host {
            return Err(Error::UnsupportedTarget {
                target: resolver.cargo_target.clone(),
                message: format!(
                    "tuning measures candidates on this machine ({}); tune for the host target",
                    resolver.host
                ),
            });
        }
        let toolchain = resolver
            .toolchain()
            .map_err(|message| Error::Toolchain { message })?;
        let mut dirs = Vec::new();
        for model in models {
            let declared = model.tune.ok_or_else(|| Error::ManifestKey {
                path: resolver.manifest_path.clone(),
                key: model.key("tune"),
                message: "missing: add tune = { trials = 32 } to the model (builds apply records only to models that declare it)"
                    .to_string(),
            })?;
            let trials = trials.unwrap_or(declared.trials);
            let records = tuning::dir(&resolver.prepared_root, &model.name, &resolver.cargo_target);
            let target = resolver.compile_target(model)?;
            compile::tune(
                model,
                toolchain,
                &target,
                &resolver.cache.driver()?,
                &records,
                trials,
            )?;
            dirs.push(records);
        }
        Ok(dirs)
    }

    /// The state of each model's prepared artifact against the current sources and settings.
    pub fn check_prepared(&self) -> Result<Vec<(String, Prepared)>> {
        cargo::set_enabled(self.cargo_directives);
        let package = self.package()?;
        let resolver = &package.resolver;
        package
            .metadata
            .models
            .iter()
            .map(|model| {
                let inputs = resolver.key_inputs(model)?;
                let state = prepared::check(
                    &resolver.prepared_root,
                    &model.name,
                    &resolver.cargo_target,
                    &inputs,
                );
                Ok((model.name.clone(), state))
            })
            .collect()
    }

    /// Keys, cache and prepared state of each model; looks up the toolchain (to compute
    /// cache keys) unless offline.
    pub fn status(&self) -> Result<(Option<toolchain::Toolchain>, Vec<ModelStatus>)> {
        cargo::set_enabled(self.cargo_directives);
        let package = self.package()?;
        let resolver = &package.resolver;
        let toolchain = if resolver.offline {
            None
        } else {
            resolver.toolchain().ok().cloned()
        };
        let mut statuses = Vec::new();
        for model in &package.metadata.models {
            let inputs = resolver.key_inputs(model)?;
            let cache_key = toolchain
                .as_ref()
                .map(|toolchain| inputs.cache_key(&toolchain.build_hash));
            let cached = match &cache_key {
                Some(key) => resolver.cache.entry_dir(key).is_dir(),
                None => false,
            };
            statuses.push(ModelStatus {
                name: model.name.clone(),
                input_key: inputs.input_key(),
                cache_key,
                cached,
                prepared: prepared::check(
                    &resolver.prepared_root,
                    &model.name,
                    &resolver.cargo_target,
                    &inputs,
                ),
            });
        }
        Ok((toolchain, statuses))
    }

    /// The folders holding `libtvm_ffi.so` and `libtvm_runtime.so` for the configured
    /// target (fetched for a cross target when missing, unless offline).
    pub fn runtime_library_dirs(&self) -> Result<Vec<PathBuf>> {
        cargo::set_enabled(self.cargo_directives);
        self.package()?.runtime_library_dirs()
    }

    /// The cache this configuration uses.
    pub fn cache(&self) -> Result<Cache> {
        cargo::set_enabled(self.cargo_directives);
        Ok(Cache::new(match &self.cache_dir {
            Some(dir) => dir.clone(),
            None => Cache::default_root()?,
        }))
    }

    fn package(&self) -> Result<Package> {
        let manifest_dir = self.path_or_env(&self.manifest_dir, "CARGO_MANIFEST_DIR")?;
        let (target, host) = self.triples()?;
        let manifest_path = manifest_dir.join("Cargo.toml");
        cargo::rerun_if_changed(&manifest_path);
        let mut metadata = metadata::read(&manifest_dir)?;
        for model in &mut metadata.models {
            model.apply_env_overrides()?;
            cargo::rerun_if_changed(&model.source);
            for path in model
                .weights_file()
                .into_iter()
                .chain(model.include.iter().map(PathBuf::as_path))
            {
                cargo::rerun_if_changed(path);
            }
        }
        let prepared_root = self
            .prepared_dir
            .clone()
            .unwrap_or_else(|| prepared::default_root(&manifest_dir));
        if prepared_root.exists() {
            // Only when present: Cargo reruns a build script on every build while a
            // watched path is missing.
            cargo::rerun_if_changed(&prepared_root);
        }
        for model in metadata.models.iter().filter(|model| model.tune.is_some()) {
            // Made (empty) so Cargo can watch it: records written there later by
            // `cargo relax tune` then rerun this build script.
            let records = tuning::dir(&prepared_root, &model.name, &target);
            std::fs::create_dir_all(&records)
                .map_err(io(format!("creating {}", records.display())))?;
            cargo::rerun_if_changed(&records);
        }
        let base_target = base_target(&target, &host);
        let resolver = Resolver::new(ResolverSettings {
            cache: self.cache()?,
            prepared_root,
            manifest_path,
            cargo_target: target,
            host,
            base_target,
            offline: self.offline.unwrap_or_else(env::offline),
            manifest_python: metadata.python.clone(),
        });
        Ok(Package {
            manifest_dir,
            metadata,
            resolver,
        })
    }

    /// The Cargo target (`target()`, else `TARGET`) and host (`host()`, else `HOST`,
    /// else the target).
    fn triples(&self) -> Result<(String, String)> {
        let target = match &self.target {
            Some(target) => target.clone(),
            None => env::cargo_var("TARGET")?,
        };
        let host = match &self.host {
            Some(host) => host.clone(),
            None => std::env::var("HOST").unwrap_or_else(|_| target.clone()),
        };
        Ok((target, host))
    }

    fn path_or_env(&self, configured: &Option<PathBuf>, variable: &'static str) -> Result<PathBuf> {
        match configured {
            Some(path) => Ok(path.clone()),
            None => env::cargo_var(variable).map(PathBuf::from),
        }
    }
}

/// Copies a model's artifacts into `relax_dir/<model>/` and generates `relax_dir/<model>.rs`.
fn materialize(
    model: &Model,
    manifest_dir: &Path,
    artifacts: &Artifacts,
    relax_dir: &Path,
) -> Result<CompiledModel> {
    let model_dir = relax_dir.join(&model.name);
    cache::copy_artifacts(&artifacts.dir, &artifacts.manifest, &model_dir, true)?;
    let signature = compile::read_signature(&model.name, &model_dir.join(cache::SIGNATURE))?;
    let weights = artifacts
        .manifest
        .has_weights()
        .then(|| model_dir.join(cache::WEIGHTS));
    let source = model
        .source
        .strip_prefix(manifest_dir)
        .unwrap_or(&model.source);
    let origin = match model.kind {
        metadata::SourceKind::Python => format!("`{}`, entry `{}`", source.display(), model.entry),
        metadata::SourceKind::Onnx => format!("`{}`", source.display()),
    };
    let library_path = format!("relax/{}/{}", model.name, cache::LIBRARY);
    let weights_path = format!("relax/{}/{}", model.name, cache::WEIGHTS);
    let code = codegen::generate(
        &signature,
        &origin,
        &codegen::Embedded {
            library: &library_path,
            weights: weights.as_ref().map(|_| weights_path.as_str()),
        },
    )?;
    std::fs::create_dir_all(relax_dir).map_err(io(format!("creating {}", relax_dir.display())))?;
    compile::write_atomically(
        &relax_dir.join(format!("{}.rs", model.name)),
        code.as_bytes(),
    )?;
    Ok(CompiledModel {
        name: model.name.clone(),
        library: model_dir.join(cache::LIBRARY),
        weights,
        signature,
        source: artifacts.source,
        input_key: artifacts.manifest.input_key.clone(),
        cache_key: artifacts.manifest.cache_key.clone(),
    })
}

/// The TVM target derived from the Cargo target and rustflags, or why there is none
/// (a model may still give its own `mtriple`).
fn base_target(target: &str, host: &str) -> std::result::Result<serde_json::Value, String> {
    target::tvm_target(target, host, &rustflags()).map_err(|error| match error {
        Error::UnsupportedTarget { message, .. } => message,
        other => other.to_string(),
    })
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
