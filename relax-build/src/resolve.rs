//! Where a model's artifacts come from: a fresh prepared artifact, the cache, or a
//! compile with the toolchain, in that order.
//!
//! Offline (`RELAX_OFFLINE=1`, `CARGO_NET_OFFLINE=true`), only prepared artifacts are
//! used, and neither Python nor the network is touched. Otherwise a stale or tampered
//! prepared artifact is reported as a warning and the model is compiled; the
//! toolchain is looked up only when a model needs it.

use std::cell::OnceCell;
use std::path::PathBuf;

use crate::cache::{self, ArtifactManifest, Cache};
use crate::cargo;
use crate::compile;
use crate::error::{Error, Result};
use crate::key::KeyInputs;
use crate::metadata::Model;
use crate::prepared::{self, Prepared};
use crate::target::{self, CrossCompiler};
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
    pub manifest_python: Option<PathBuf>,
}

/// Resolves the artifacts of each model of one package for one target.
pub struct Resolver {
    pub cache: Cache,
    pub prepared_root: PathBuf,
    pub manifest_path: PathBuf,
    pub cargo_target: String,
    pub host: String,
    base_target: std::result::Result<serde_json::Value, String>,
    cross_compiler: Option<CrossCompiler>,
    pub offline: bool,
    pub manifest_python: Option<PathBuf>,
    toolchain: OnceCell<std::result::Result<Toolchain, String>>,
    /// `mcpu = "native"` resolved (it runs rustc), once per build.
    native_cpu: OnceCell<String>,
}

impl Resolver {
    pub fn new(settings: ResolverSettings) -> Resolver {
        Resolver {
            cross_compiler: target::cross_compiler(&settings.cargo_target, &settings.host),
            cache: settings.cache,
            prepared_root: settings.prepared_root,
            manifest_path: settings.manifest_path,
            cargo_target: settings.cargo_target,
            host: settings.host,
            base_target: settings.base_target,
            offline: settings.offline,
            manifest_python: settings.manifest_python,
            toolchain: OnceCell::new(),
            native_cpu: OnceCell::new(),
        }
    }

    /// The toolchain, found (or provisioned) on first use; its failure is kept as text.
    pub fn toolchain(&self) -> std::result::Result<&Toolchain, String> {
        self.toolchain
            .get_or_init(|| {
                toolchain::find_or_provision(self.manifest_python.as_deref(), &self.cache)
                    .map_err(|error| error.to_string())
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    /// The toolchain, if it was needed by this build.
    pub fn resolved_toolchain(&self) -> Option<&Toolchain> {
        self.toolchain.get().and_then(|result| result.as_ref().ok())
    }

    /// The command that prepares artifacts for this package and target.
    pub fn prepare_command(&self) -> String {
        format!(
            "cargo relax prepare --manifest-path {} --target {}",
            self.manifest_path.display(),
            self.cargo_target
        )
    }

    /// The TVM target of one model: the derived target with the model's keys merged
    /// over (for a Cargo target without a derived one, the model's keys must name an
    /// `mtriple`).
    pub fn model_target(&self, model: &Model) -> Result<serde_json::Value> {
        let mut target = match &self.base_target {
            Ok(base) => base.clone(),
            Err(_) if model.options.target.contains_key("mtriple") => {
                serde_json::json!({"kind": "llvm"})
            }
            Err(message) => {
                return Err(Error::UnsupportedTarget {
                    target: self.cargo_target.clone(),
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
        let cpu = target::native_cpu(&self.cargo_target, &self.host)?;
        Ok(self.native_cpu.get_or_init(|| cpu).clone())
    }

    /// The folder of `model`'s tuning records for this target, if the model declares
    /// `tune` and the folder holds records.
    pub fn tuning_records(&self, model: &Model) -> Option<PathBuf> {
        let dir = tuning::dir(&self.prepared_root, &model.name, &self.cargo_target);
        (model.tune.is_some() && tuning::has_records(&dir)).then_some(dir)
    }

    /// What to compile `model` for: Cargo target, TVM target, cross compiler, records.
    pub fn compile_target(&self, model: &Model) -> Result<compile::CompileTarget<'_>> {
        Ok(compile::CompileTarget {
            cargo: &self.cargo_target,
            tvm: self.model_target(model)?,
            cross_compiler: self.cross_compiler.as_ref(),
            tuning_records: self.tuning_records(model),
        })
    }

    /// The key inputs of `model` for this target.
    pub fn key_inputs(&self, model: &Model) -> Result<KeyInputs> {
        KeyInputs::of(
            model,
            &self.model_target(model)?,
            self.tuning_records(model).as_deref(),
        )
    }

    /// The artifacts of `model`: prepared, cached, or compiled now.
    pub fn resolve(&self, model: &Model, inputs: &KeyInputs) -> Result<Artifacts> {
        let state = prepared::check(&self.prepared_root, &model.name, &self.cargo_target, inputs);
        let prepared_dir = prepared::dir(&self.prepared_root, &model.name, &self.cargo_target);
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
        if self.offline {
            return Err(Error::Model {
                model: model.name.clone(),
                key: None,
                message: format!(
                    "{}, and offline builds (RELAX_OFFLINE=1 or CARGO_NET_OFFLINE=true) use only prepared artifacts.\n\
                     Fix: run `{}` on a machine with Python (or build online), then commit {}",
                    describe(problem.as_ref()),
                    self.prepare_command(),
                    self.prepared_root.display()
                ),
                detail: String::new(),
            });
        }
        if let Some(problem) = &problem {
            cargo::warning(&format!(
                "relax-build: model `{}`: {}; compiling it instead (run `{}` to refresh it)",
                model.name,
                describe(Some(problem)),
                self.prepare_command()
            ));
        }
        let toolchain = self.toolchain().map_err(|message| Error::Toolchain {
            message: format!(
                "model `{}`: {}, and no TVM toolchain is usable to compile it.\n{message}\n\
                 Or: run `{}` on a machine with TVM and commit {}",
                model.name,
                describe(problem.as_ref()),
                self.prepare_command(),
                self.prepared_root.display()
            ),
        })?;
        self.compile_cached(model, inputs, toolchain)
    }

    /// The cache entry of `model`, compiling it if there is none.
    pub fn compile_cached(
        &self,
        model: &Model,
        inputs: &KeyInputs,
        toolchain: &Toolchain,
    ) -> Result<Artifacts> {
        let cache_key = inputs.cache_key(&toolchain.build_hash);
        let mut compiled = false;
        let manifest = self.cache.get_or_insert(&cache_key, |dir| {
            compiled = true;
            let target = self.compile_target(model)?;
            compile::compile(model, toolchain, &target, &self.cache.driver()?, dir)?;
            Ok(ArtifactManifest {
                model: model.name.clone(),
                target: self.cargo_target.clone(),
                input_key: inputs.input_key(),
                cache_key: cache_key.clone(),
                inputs: inputs.clone(),
                tvm_version: toolchain.tvm_version.clone(),
                toolchain_hash: toolchain.build_hash.clone(),
                artifacts: cache::hash_artifacts(dir)?,
            })
        })?;
        Ok(Artifacts {
            dir: self.cache.entry_dir(&cache_key),
            manifest,
            source: if compiled {
                ArtifactSource::Compiled
            } else {
                ArtifactSource::Cache
            },
        })
    }
}
