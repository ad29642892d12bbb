//! `cargo relax`: prepare offline model artifacts, and inspect or clean relax-build's cache.
//!
//! Install with `cargo install --path cargo-relax`, then run `cargo relax --help`.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use clap::{Args, Parser, Subcommand};
use relax_build::{ArtifactSource, Config, Prepared};

#[derive(Parser)]
#[command(
    name = "cargo relax",
    bin_name = "cargo relax",
    about = "Prepare offline artifacts of the TVM Relax models declared in Cargo.toml, and manage relax-build's cache.",
    long_about = "Models are declared in [package.metadata.relax.models.<name>] of a package's Cargo.toml and \
                  compiled by relax-build at `cargo build` time. `cargo relax prepare` compiles them ahead of time \
                  into .relax/ next to Cargo.toml: commit that folder, and builds (offline ones too, with \
                  RELAX_OFFLINE=1) need neither Python, TVM nor the network."
)]
struct Cli {
    #[command(subcommand)]
    command: Command_,
}

#[derive(Subcommand)]
enum Command_ {
    /// Compile every model of a package into .relax/<model>/<target>/ (or check that folder with --check).
    Prepare {
        #[command(flatten)]
        package: PackageArgs,
        /// Cargo target triples to prepare for (repeatable; default: this machine's).
        #[arg(long = "target", value_name = "TRIPLE")]
        targets: Vec<String>,
        /// Do not compile: exit with status 1 and name each model whose prepared artifact is missing or stale.
        #[arg(long)]
        check: bool,
    },
    /// Show the TVM toolchain, the cache, and per model its keys and whether it is cached and prepared.
    Info {
        #[command(flatten)]
        package: PackageArgs,
        /// Cargo target triple (default: this machine's).
        #[arg(long, value_name = "TRIPLE")]
        target: Option<String>,
    },
    /// Delete relax-build's artifact cache (RELAX_CACHE_DIR, default ~/.cache/relax-cargo/cache).
    Clean,
}

#[derive(Args)]
struct PackageArgs {
    /// The package's Cargo.toml (default: the package in the current folder).
    #[arg(long, value_name = "PATH")]
    manifest_path: Option<PathBuf>,
    /// The package, by name, in the current workspace.
    #[arg(
        short = 'p',
        long = "package",
        value_name = "NAME",
        conflicts_with = "manifest_path"
    )]
    package: Option<String>,
}

fn main() -> ExitCode {
    // `cargo relax ...` runs `cargo-relax relax ...`.
    let mut arguments: Vec<String> = std::env::args().collect();
    if arguments.get(1).map(String::as_str) == Some("relax") {
        arguments.remove(1);
    }
    let cli = Cli::parse_from(arguments);
    match run(cli.command) {
        Ok(code) => code,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}

fn run(command: Command_) -> Result<ExitCode, String> {
    match command {
        Command_::Prepare {
            package,
            targets,
            check,
        } => {
            let manifest_dir = package.manifest_dir()?;
            let targets = if targets.is_empty() {
                vec![host_triple()?]
            } else {
                targets
            };
            if check {
                check_prepared(&manifest_dir, &targets)
            } else {
                prepare(&manifest_dir, &targets)
            }
        }
        Command_::Info { package, target } => {
            let manifest_dir = package.manifest_dir()?;
            let target = match target {
                Some(target) => target,
                None => host_triple()?,
            };
            info(&manifest_dir, &target)
        }
        Command_::Clean => {
            let cache = Config::new()
                .cargo_directives(false)
                .cache()
                .map_err(|error| error.to_string())?;
            let size = cache.size();
            cache.clean().map_err(|error| error.to_string())?;
            println!("removed {} ({})", cache.root().display(), human_size(size));
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn config(manifest_dir: &Path, target: &str) -> Result<Config, String> {
    Ok(Config::new()
        .manifest_dir(manifest_dir)
        .target(target)
        .host(host_triple()?)
        .cargo_directives(false))
}

fn prepare(manifest_dir: &Path, targets: &[String]) -> Result<ExitCode, String> {
    for target in targets {
        let prepared = config(manifest_dir, target)?
            .prepare()
            .map_err(|error| error.to_string())?;
        for model in prepared {
            let how = match model.source {
                ArtifactSource::Cache => "from the cache",
                _ => "compiled",
            };
            println!(
                "prepared `{}` for {target} ({how}): {}",
                model.name,
                model.dir.display()
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn check_prepared(manifest_dir: &Path, targets: &[String]) -> Result<ExitCode, String> {
    let mut stale = Vec::new();
    for target in targets {
        for (model, state) in config(manifest_dir, target)?
            .check_prepared()
            .map_err(|error| error.to_string())?
        {
            match state {
                Prepared::Fresh(_) => println!("ok     `{model}` ({target})"),
                Prepared::Missing => {
                    println!("stale  `{model}` ({target}): not prepared");
                    stale.push(target.clone());
                }
                Prepared::Stale(changes) => {
                    println!("stale  `{model}` ({target}): {}", changes.join(", "));
                    stale.push(target.clone());
                }
                Prepared::Tampered(reason) => {
                    println!("stale  `{model}` ({target}): refused, {reason}");
                    stale.push(target.clone());
                }
            }
        }
    }
    if stale.is_empty() {
        return Ok(ExitCode::SUCCESS);
    }
    stale.dedup();
    let targets: String = stale
        .iter()
        .map(|target| format!(" --target {target}"))
        .collect();
    eprintln!(
        "error: {} prepared artifact(s) do not match the current sources and settings; run `cargo relax prepare --manifest-path {}{targets}` and commit {}",
        stale.len(),
        manifest_dir.join("Cargo.toml").display(),
        manifest_dir.join(".relax").display()
    );
    Ok(ExitCode::FAILURE)
}

fn info(manifest_dir: &Path, target: &str) -> Result<ExitCode, String> {
    let config = config(manifest_dir, target)?;
    let cache = config.cache().map_err(|error| error.to_string())?;
    let (toolchain, models) = config.status().map_err(|error| error.to_string())?;
    match &toolchain {
        Some(toolchain) => println!(
            "toolchain: {} ({}), apache-tvm {}, build {}",
            toolchain.python.display(),
            toolchain.origin,
            toolchain.tvm_version,
            &toolchain.build_hash[..12]
        ),
        None => {
            println!("toolchain: none usable (offline, or no Python with TVM); cache keys unknown")
        }
    }
    println!(
        "cache: {} ({})",
        cache.root().display(),
        human_size(cache.size())
    );
    println!(
        "package: {} (target {target})",
        manifest_dir.join("Cargo.toml").display()
    );
    if models.is_empty() {
        println!("no models declared in [package.metadata.relax.models]");
    }
    for model in models {
        let prepared = match &model.prepared {
            Prepared::Fresh(_) => "prepared".to_string(),
            Prepared::Missing => "not prepared".to_string(),
            Prepared::Stale(changes) => format!("prepared but stale ({})", changes.join(", ")),
            Prepared::Tampered(reason) => format!("prepared but refused ({reason})"),
        };
        let cached = match (&model.cache_key, model.cached) {
            (Some(key), true) => format!("cached as {}", &key[..12]),
            (Some(key), false) => format!("not cached (key {})", &key[..12]),
            (None, _) => "cache key unknown".to_string(),
        };
        println!(
            "model `{}`: input key {}, {cached}, {prepared}",
            model.name,
            &model.input_key[..12]
        );
    }
    Ok(ExitCode::SUCCESS)
}

impl PackageArgs {
    /// The folder of the selected package's Cargo.toml.
    fn manifest_dir(&self) -> Result<PathBuf, String> {
        if let Some(path) = &self.manifest_path {
            let path = std::fs::canonicalize(path)
                .map_err(|error| format!("--manifest-path {}: {error}", path.display()))?;
            return Ok(path.parent().expect("a file has a parent").to_path_buf());
        }
        let metadata = cargo_output(&["metadata", "--format-version", "1", "--no-deps"])?;
        let metadata: serde_json::Value = serde_json::from_str(&metadata)
            .map_err(|error| format!("cargo metadata printed invalid JSON: {error}"))?;
        let packages = metadata["packages"].as_array().cloned().unwrap_or_default();
        let manifest_of =
            |package: &serde_json::Value| package["manifest_path"].as_str().map(PathBuf::from);
        let chosen = match &self.package {
            Some(name) => packages
                .iter()
                .find(|package| package["name"] == name.as_str())
                .and_then(manifest_of)
                .ok_or_else(|| format!("no package `{name}` in this workspace"))?,
            None => {
                let current = std::env::current_dir().map_err(|error| error.to_string())?;
                packages
                    .iter()
                    .filter_map(manifest_of)
                    .filter(|manifest| current.starts_with(manifest.parent().unwrap()))
                    .max_by_key(|manifest| manifest.components().count())
                    .ok_or(
                        "the current folder is in no package; pass -p NAME or --manifest-path PATH",
                    )?
            }
        };
        Ok(chosen
            .parent()
            .expect("a manifest has a folder")
            .to_path_buf())
    }
}

fn host_triple() -> Result<String, String> {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_string());
    let output = Command::new(&rustc)
        .arg("-vV")
        .output()
        .map_err(|error| format!("running `{rustc} -vV`: {error}"))?;
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .find_map(|line| line.strip_prefix("host: "))
        .map(str::to_string)
        .ok_or_else(|| format!("`{rustc} -vV` printed no host triple"))
}

fn cargo_output(arguments: &[&str]) -> Result<String, String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let output = Command::new(&cargo)
        .args(arguments)
        .output()
        .map_err(|error| format!("running cargo: {error}"))?;
    if !output.status.success() {
        return Err(format!(
            "`cargo {}` failed: {}",
            arguments.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

fn human_size(bytes: u64) -> String {
    match bytes {
        bytes if bytes >= 1 << 30 => format!("{:.1} GiB", bytes as f64 / (1u64 << 30) as f64),
        bytes if bytes >= 1 << 20 => format!("{:.1} MiB", bytes as f64 / (1u64 << 20) as f64),
        bytes if bytes >= 1 << 10 => format!("{:.1} KiB", bytes as f64 / (1u64 << 10) as f64),
        bytes => format!("{bytes} B"),
    }
}
