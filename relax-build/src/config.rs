//! [`Config`]: the settings of a compile, each defaulting to what Cargo gives a build
//! script. What it does with them lives with each workflow: `Config::compile` and
//! `Config::try_compile` in `build_script.rs`, the tools' workflows in `tooling.rs`.

use std::path::PathBuf;

use crate::cache::Cache;
use crate::cargo::Cargo;
use crate::env;
use crate::error::Result;
use crate::prepared;

/// Options for compiling a package's models; every setting defaults to what Cargo
/// gives a build script.
///
/// ```no_run
/// // build.rs
/// # fn main() {
/// relax_build::Config::new()
///     .offline(true) // only the prepared artifacts in .relax/, no Python
///     .compile();
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Config {
    pub(crate) manifest_dir: Option<PathBuf>,
    pub(crate) out_dir: Option<PathBuf>,
    pub(crate) target: Option<String>,
    pub(crate) host: Option<String>,
    pub(crate) cache_dir: Option<PathBuf>,
    pub(crate) prepared_dir: Option<PathBuf>,
    pub(crate) offline: Option<bool>,
    pub(crate) cargo_directives: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config::new()
    }
}

impl Config {
    /// Every setting at its default; Cargo directives on.
    pub fn new() -> Config {
        Config {
            manifest_dir: None,
            out_dir: None,
            target: None,
            host: None,
            cache_dir: None,
            prepared_dir: None,
            offline: None,
            cargo_directives: true,
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

    /// Whether to print `cargo::` directives (default: yes; turn off outside build
    /// scripts, where warnings then go to stderr).
    pub fn cargo_directives(mut self, enabled: bool) -> Config {
        self.cargo_directives = enabled;
        self
    }

    /// The directive printer these settings ask for.
    pub(crate) fn cargo(&self) -> Cargo {
        Cargo::new(self.cargo_directives)
    }

    /// The configured value, else the variable Cargo sets for build scripts.
    pub(crate) fn path_or_env(
        &self,
        configured: &Option<PathBuf>,
        variable: &'static str,
    ) -> Result<PathBuf> {
        match configured {
            Some(path) => Ok(path.clone()),
            None => env::cargo_var(variable).map(PathBuf::from),
        }
    }

    /// The Cargo target (`target()`, else `TARGET`) and host (`host()`, else `HOST`,
    /// else the target).
    pub(crate) fn triples(&self) -> Result<(String, String)> {
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

    /// The cache these settings use.
    pub(crate) fn cache(&self) -> Result<Cache> {
        let cargo = self.cargo();
        let root = match &self.cache_dir {
            Some(dir) => dir.clone(),
            None => Cache::default_root(cargo)?,
        };
        Ok(Cache::new(root, cargo).with_size_limit(Cache::size_limit_from_env(cargo)?))
    }

    /// The prepared folder of the package in `manifest_dir`.
    pub(crate) fn prepared_root(&self, manifest_dir: &std::path::Path) -> PathBuf {
        self.prepared_dir
            .clone()
            .unwrap_or_else(|| prepared::default_root(manifest_dir))
    }

    /// Offline as configured, else from the environment.
    pub(crate) fn is_offline(&self) -> bool {
        self.offline.unwrap_or_else(|| env::offline(self.cargo()))
    }
}
