//! One package's declared models, and how to resolve them for one target.

use std::path::PathBuf;

use crate::config::Config;
use crate::error::{Error, Result};
use crate::metadata::{self, Metadata, Model};
use crate::resolve::{Resolver, ResolverSettings};
use crate::runtime_libraries;
use crate::target;
use crate::tuning;

/// A package's manifest, read and checked, with a resolver for the configured target.
pub struct Package {
    pub metadata: Metadata,
    pub resolver: Resolver,
}

impl Package {
    /// Reads the manifest of the package `config` names and applies the per-model
    /// environment overrides.
    pub fn open(config: &Config) -> Result<Package> {
        let cargo = config.cargo();
        let manifest_dir = config.path_or_env(&config.manifest_dir, "CARGO_MANIFEST_DIR")?;
        let (cargo_target, host) = config.triples()?;
        let manifest_path = manifest_dir.join("Cargo.toml");
        let out_dir = config
            .out_dir
            .clone()
            .or_else(|| std::env::var_os("OUT_DIR").map(PathBuf::from));
        let mut metadata = metadata::read(&manifest_dir, out_dir.as_deref())?;
        for model in &mut metadata.models {
            model.apply_env_overrides(cargo)?;
        }
        let base_target = target::tvm_target(&cargo_target, &host, &crate::env::rustflags())
            .map_err(|error| match error {
                Error::UnsupportedTarget { message, .. } => message,
                other => other.to_string(),
            });
        let resolver = Resolver::new(ResolverSettings {
            cache: config.cache()?,
            prepared_root: config.prepared_root(&manifest_dir),
            manifest_path,
            cargo_target,
            host,
            base_target,
            offline: config.is_offline(),
            manifest_python: metadata.python.clone(),
            cargo,
        });
        Ok(Package { metadata, resolver })
    }

    /// The model named `name`, or an error listing the declared ones.
    pub fn model(&self, name: &str) -> Result<&Model> {
        self.metadata
            .models
            .iter()
            .find(|model| model.name == name)
            .ok_or_else(|| Error::ManifestKey {
                path: self.resolver.manifest_path().to_path_buf(),
                key: format!("{}.models.{name}", metadata::ROOT_KEY),
                message: format!("no such model; declared: {}", self.model_names().join(", ")),
            })
    }

    /// The declared models' names.
    pub fn model_names(&self) -> Vec<String> {
        self.metadata
            .models
            .iter()
            .map(|model| model.name.clone())
            .collect()
    }

    /// Tells Cargo what to watch: the manifest, every file a model reads, the prepared
    /// folder, and each tuned model's records folder.
    ///
    /// A watched path that does not exist makes Cargo rerun the build script on every
    /// build, so the prepared folder is watched only when present; a host build of a
    /// model that declares `tune` but has no records yet watches the folder the records
    /// will be written to (and warns each time), so that `cargo relax tune` takes effect.
    pub fn watch(&self) {
        let cargo = self.resolver.cargo();
        cargo.rerun_if_changed(self.resolver.manifest_path());
        for model in &self.metadata.models {
            for path in model.local_files() {
                cargo.rerun_if_changed(path);
            }
        }
        let prepared = self.resolver.prepared_root();
        if prepared.exists() {
            cargo.rerun_if_changed(prepared);
        }
        if self.resolver.cargo_target() == self.resolver.host() {
            for model in self
                .metadata
                .models
                .iter()
                .filter(|model| model.tune.is_some())
            {
                let records = tuning::dir(prepared, &model.name, self.resolver.cargo_target());
                cargo.rerun_if_changed(&records);
            }
        }
    }

    /// The folders of the target's TVM runtime libraries (see [`runtime_libraries::dirs`]);
    /// a cross target's are fetched when missing, unless offline.
    pub fn runtime_library_dirs(&self) -> Result<Vec<PathBuf>> {
        let resolver = &self.resolver;
        runtime_libraries::dirs(&runtime_libraries::Lookup {
            cargo_target: resolver.cargo_target(),
            host: resolver.host(),
            prepared_root: resolver.prepared_root(),
            toolchain: resolver.resolved_toolchain(),
            find_toolchain: &|| resolver.toolchain().ok(),
            known_dirs: &|| resolver.known_runtime_library_dirs(),
            fetch: !resolver.offline(),
            cargo: resolver.cargo(),
        })
    }
}
