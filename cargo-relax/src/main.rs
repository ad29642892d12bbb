//! `cargo relax`: prepare offline model artifacts, and inspect or clean relax-build's cache.
//!
//! Install with `cargo install --path cargo-relax`, then run `cargo relax --help`.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

mod add;
mod cargo;
mod out_dir;
mod progress;
mod rpc;

use clap::{Args, Parser, Subcommand};
use relax_build::tooling::{self, ArtifactSource, Prepared};
use relax_build::Config;

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
    /// Inspect a model file and declare it in the package's Cargo.toml, the way `cargo add`
    /// adds a dependency: writes [package.metadata.relax.models.NAME] with the inputs
    /// found (an ONNX graph's, a TVMScript module's functions'; an nn.Module's from
    /// --input), then prints the methods `include_model!` will generate.
    Add {
        /// The model's name (its `include_model!` name).
        name: String,
        /// The model source: .onnx, or .py (with --entry).
        path: PathBuf,
        /// The attribute of a .py source to compile (an nn.Module class, an IRModule, ...).
        #[arg(long, value_name = "ATTRIBUTE")]
        entry: Option<String>,
        /// The parameters' values (.safetensors, by parameter name) of an nn.Module.
        #[arg(long, value_name = "PATH")]
        weights: Option<PathBuf>,
        /// An nn.Module method's input: METHOD.ARGUMENT=SPEC, e.g. forward.x="float32[batch, 64]" (repeatable).
        #[arg(long = "input", value_name = "METHOD.ARG=SPEC")]
        inputs: Vec<String>,
        #[command(flatten)]
        package: PackageArgs,
    },
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
    /// Tune models with TVM meta-schedule on this machine and write the records to
    /// .relax/tuning/<model>/<target>/ (commit them: every build applies them).
    ///
    /// Shows meta-schedule's progress table (tasks, trials, best latency). Interrupted runs
    /// resume from the records already written.
    Tune {
        #[command(flatten)]
        package: PackageArgs,
        /// Only this model (default: every model).
        #[arg(long, value_name = "NAME")]
        model: Option<String>,
        /// Trials per task (default: the model's tune = { trials = N }).
        #[arg(long, value_name = "N")]
        trials: Option<u32>,
        /// Cargo target triple (default: this machine's; another needs --rpc).
        #[arg(long, value_name = "TRIPLE")]
        target: Option<String>,
        /// Measure the candidates on a device running relax-rpc-server, registered with
        /// the tracker at HOST:PORT under KEY (records go to the --target's folder).
        #[arg(long, value_name = "HOST:PORT:KEY")]
        rpc: Option<String>,
        /// How long to wait for a free device of the key at the tracker, in seconds.
        #[arg(long, value_name = "SECONDS", default_value_t = 60)]
        wait: u64,
    },
    /// Show the TVM toolchain, the cache, and per model its keys and whether it is cached and prepared.
    Info {
        #[command(flatten)]
        package: PackageArgs,
        /// Cargo target triple (default: this machine's).
        #[arg(long, value_name = "TRIPLE")]
        target: Option<String>,
    },
    /// Copy a built executable and the TVM runtime libraries for its target into dist/<bin>-<target>/.
    ///
    /// Build first (`cargo build --release --target TRIPLE -p PKG`); the bundle runs from any
    /// folder with no environment variables (the executable finds the libraries next to it).
    Bundle {
        #[command(flatten)]
        package: PackageArgs,
        /// Cargo target triple the executable was built for (default: this machine's).
        #[arg(long, value_name = "TRIPLE")]
        target: Option<String>,
        /// Bundle the release build (default: the debug build).
        #[arg(long)]
        release: bool,
        /// The binary to bundle (default: the package's only binary).
        #[arg(long, value_name = "NAME")]
        bin: Option<String>,
        /// Where to create <bin>-<target>/ (default: dist/ in the workspace root).
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
    },
    /// Compile the package's models for a device's target and time them on the device,
    /// which runs `relax-rpc-server` (directly, or registered with a tracker).
    ///
    /// Prints a latency table per model: each function on inputs of its declared shapes
    /// (symbolic dims from --dim, else 1), median, fastest and slowest of --repeat runs.
    Bench {
        #[command(flatten)]
        package: PackageArgs,
        /// The device: HOST:PORT:KEY (a tracker, and the key the device registered) or
        /// HOST:PORT (the device's server itself).
        #[arg(long, value_name = "HOST:PORT:KEY")]
        rpc: String,
        /// The device's Cargo target triple (default: this machine's).
        #[arg(long, value_name = "TRIPLE")]
        target: Option<String>,
        /// Only this model (default: every model).
        #[arg(long, value_name = "NAME")]
        model: Option<String>,
        /// The size of a symbolic dim of the inputs, NAME=N (repeatable; others are 1).
        #[arg(long = "dim", value_name = "NAME=N")]
        dims: Vec<String>,
        /// Timed runs per function.
        #[arg(long, default_value_t = 10)]
        repeat: u32,
        /// Untimed runs first.
        #[arg(long, default_value_t = 2)]
        warmup: u32,
        /// How long to wait for a free device of the key at the tracker, in seconds.
        #[arg(long, value_name = "SECONDS", default_value_t = 60)]
        wait: u64,
    },
    /// Run TVM's RPC tracker (from the managed toolchain) and print the devices that
    /// register with it, until interrupted.
    Tracker {
        /// The address to listen on. Anything but loopback lets whoever reaches it
        /// register a device under your key (and be sent your models) or ask for your
        /// boards: prefer SSH tunnels (docs/remote.md, Security).
        #[arg(long, default_value = "127.0.0.1")]
        host: String,
        /// The port to listen on.
        #[arg(long, default_value_t = 9190)]
        port: u16,
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
        Command_::Add {
            name,
            path,
            entry,
            weights,
            inputs,
            package,
        } => {
            let manifest_dir = package.select()?.manifest_dir;
            let request = add::AddRequest {
                manifest_dir: &manifest_dir,
                name: &name,
                source: &path,
                entry: entry.as_deref(),
                weights: weights.as_deref(),
                inputs: &inputs,
            };
            for line in add::add(&config(&manifest_dir, &host_triple()?)?, &request)? {
                println!("{line}");
            }
            Ok(ExitCode::SUCCESS)
        }
        Command_::Prepare {
            package,
            targets,
            check,
        } => {
            let manifest_dir = package.select()?.manifest_dir;
            if check {
                // Without --target: every target that has prepared artifacts (and the host).
                let targets = if targets.is_empty() {
                    let mut found =
                        tooling::prepared_targets(&config(&manifest_dir, &host_triple()?)?)
                            .map_err(|error| error.to_string())?;
                    let host = host_triple()?;
                    if !found.contains(&host) {
                        found.insert(0, host);
                    }
                    found
                } else {
                    targets
                };
                check_prepared(&manifest_dir, &targets)
            } else {
                let targets = if targets.is_empty() {
                    vec![host_triple()?]
                } else {
                    targets
                };
                prepare(&manifest_dir, &targets)
            }
        }
        Command_::Tune {
            package,
            model,
            trials,
            target,
            rpc: device,
            wait,
        } => {
            let device = device.map(|text| rpc::Device::parse(&text)).transpose()?;
            let device = match device {
                None => None,
                Some(rpc::Device {
                    host,
                    port,
                    key: Some(key),
                }) => Some(tooling::RpcDevice {
                    host,
                    port,
                    key,
                    wait_seconds: wait,
                }),
                Some(rpc::Device { key: None, .. }) => return Err(
                    "tune --rpc needs a tracker: HOST:PORT:KEY (meta-schedule asks the tracker \
                                for the device of KEY for each candidate)"
                        .to_string(),
                ),
            };
            let selected = package.select()?;
            let target = match target {
                Some(target) => target,
                None => host_triple()?,
            };
            let mut config = config(&selected.manifest_dir, &target)?;
            // A generated source exists once the package's build script has run.
            if tooling::tune_needs_out_dir(&config, model.as_deref())
                .map_err(|error| error.to_string())?
            {
                eprintln!(
                    "running the build script of `{}`, which generates a model to tune",
                    selected.name
                );
                let manifest_path = selected.manifest_dir.join("Cargo.toml");
                config =
                    config.out_dir(out_dir::build_script_out_dir(&manifest_path, &selected.id)?);
            }
            // Meta-schedule draws its own table: one line per model instead of a bar.
            let started = std::time::Instant::now();
            let dirs = tooling::tune_reporting(
                &config,
                model.as_deref(),
                trials,
                device.as_ref(),
                &|step, steps, what| {
                    eprintln!("[{step}/{steps}] {what} (after {:.0?})", started.elapsed());
                },
            )
            .map_err(|error| error.to_string())?;
            eprintln!("tuned in {:.0?}", started.elapsed());
            for dir in dirs {
                println!("tuning records: {}", dir.display());
            }
            Ok(ExitCode::SUCCESS)
        }
        Command_::Info { package, target } => {
            let manifest_dir = package.select()?.manifest_dir;
            let target = match target {
                Some(target) => target,
                None => host_triple()?,
            };
            info(&manifest_dir, &target)
        }
        Command_::Bundle {
            package,
            target,
            release,
            bin,
            out,
        } => bundle(&package.select()?, target, release, bin, out),
        Command_::Bench {
            package,
            rpc: device,
            target,
            model,
            dims,
            repeat,
            warmup,
            wait,
        } => {
            let device = rpc::Device::parse(&device)?;
            let dims = rpc::parse_dims(&dims)?;
            if repeat == 0 {
                return Err("--repeat must be at least 1".to_string());
            }
            let selected = package.select()?;
            let target = match target {
                Some(target) => target,
                None => host_triple()?,
            };
            let config = config(&selected.manifest_dir, &target)?;
            let models = rpc::compiled_models(&config, model.as_deref())?;
            let request = rpc::BenchRequest {
                device: &device,
                dims,
                warmup,
                repeat,
                wait_seconds: wait,
            };
            rpc::bench(&config, &models, &request, &target)?;
            Ok(ExitCode::SUCCESS)
        }
        Command_::Tracker { host, port } => rpc::tracker(&host, port),
        Command_::Clean => {
            let cache = tooling::cache(&Config::new().cargo_directives(false))
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
        let progress = progress::Progress::new(&format!("preparing for {target}"));
        let prepared =
            tooling::prepare_reporting(&config(manifest_dir, target)?, &|step, steps, what| {
                progress.step(step, steps, what)
            });
        progress.finish();
        let prepared = prepared.map_err(|error| error.to_string())?;
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
    let mut stale_models = 0;
    let mut stale_targets: Vec<&String> = Vec::new();
    for target in targets {
        for (model, state) in tooling::check_prepared(&config(manifest_dir, target)?)
            .map_err(|error| error.to_string())?
        {
            let problem = match state {
                Prepared::Fresh(_) => {
                    println!("ok     `{model}` ({target})");
                    continue;
                }
                Prepared::Missing => "not prepared".to_string(),
                Prepared::Stale(changes) => changes.join(", "),
                Prepared::Tampered(reason) => format!("refused, {reason}"),
            };
            println!("stale  `{model}` ({target}): {problem}");
            stale_models += 1;
            if !stale_targets.contains(&target) {
                stale_targets.push(target);
            }
        }
    }
    if stale_models == 0 {
        return Ok(ExitCode::SUCCESS);
    }
    let flags: String = stale_targets
        .iter()
        .map(|target| format!(" --target {target}"))
        .collect();
    eprintln!(
        "error: {stale_models} prepared artifact(s) do not match the current sources and settings; run `cargo relax prepare --manifest-path {}{flags}` and commit {}",
        manifest_dir.join("Cargo.toml").display(),
        manifest_dir.join(".relax").display()
    );
    Ok(ExitCode::FAILURE)
}

fn info(manifest_dir: &Path, target: &str) -> Result<ExitCode, String> {
    let config = config(manifest_dir, target)?;
    let cache = tooling::cache(&config).map_err(|error| error.to_string())?;
    let (toolchain, models) = tooling::status(&config).map_err(|error| error.to_string())?;
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
        "cache: {} ({}; trimmed to {}, see RELAX_CACHE_SIZE)",
        cache.root().display(),
        human_size(cache.size()),
        human_size(cache.size_limit())
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

/// The package a command works on, as `cargo metadata` describes it.
struct SelectedPackage {
    manifest_dir: PathBuf,
    name: String,
    /// Cargo's package ID (as `cargo metadata` and build messages give it).
    id: String,
    binaries: Vec<String>,
    target_directory: PathBuf,
    workspace_root: PathBuf,
}

impl PackageArgs {
    /// The package named by -p or --manifest-path, else the one around the current folder.
    fn select(&self) -> Result<SelectedPackage, String> {
        let mut arguments = vec!["metadata", "--format-version", "1", "--no-deps"];
        let manifest_path = self
            .manifest_path
            .as_ref()
            .map(|path| path.to_string_lossy().into_owned());
        if let Some(path) = &manifest_path {
            arguments.extend(["--manifest-path", path]);
        }
        let metadata: serde_json::Value = serde_json::from_str(&cargo_output(&arguments)?)
            .map_err(|error| format!("cargo metadata printed invalid JSON: {error}"))?;
        let packages = metadata["packages"].as_array().cloned().unwrap_or_default();
        let manifest_of = |package: &serde_json::Value| {
            PathBuf::from(package["manifest_path"].as_str().unwrap_or_default())
        };
        let chosen = if let Some(name) = &self.package {
            packages
                .iter()
                .find(|package| package["name"] == name.as_str())
                .ok_or_else(|| format!("no package `{name}` in this workspace"))?
        } else {
            let anchor = match &self.manifest_path {
                Some(path) => std::fs::canonicalize(path)
                    .map_err(|error| format!("--manifest-path {}: {error}", path.display()))?
                    .parent()
                    .expect("a file has a folder")
                    .to_path_buf(),
                None => std::env::current_dir().map_err(|error| error.to_string())?,
            };
            packages
                .iter()
                .filter(|package| anchor.starts_with(manifest_of(package).parent().unwrap()))
                .max_by_key(|package| manifest_of(package).components().count())
                .ok_or(
                    "the current folder is in no package; pass -p NAME or --manifest-path PATH",
                )?
        };
        let binaries = chosen["targets"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|target| {
                target["kind"]
                    .as_array()
                    .is_some_and(|kinds| kinds.iter().any(|kind| kind == "bin"))
            })
            .filter_map(|target| target["name"].as_str().map(str::to_string))
            .collect();
        Ok(SelectedPackage {
            manifest_dir: manifest_of(chosen)
                .parent()
                .expect("a manifest has a folder")
                .to_path_buf(),
            name: chosen["name"].as_str().unwrap_or_default().to_string(),
            id: chosen["id"].as_str().unwrap_or_default().to_string(),
            binaries,
            target_directory: PathBuf::from(
                metadata["target_directory"].as_str().unwrap_or("target"),
            ),
            workspace_root: PathBuf::from(metadata["workspace_root"].as_str().unwrap_or(".")),
        })
    }
}

fn bundle(
    package: &SelectedPackage,
    target: Option<String>,
    release: bool,
    bin: Option<String>,
    out: Option<PathBuf>,
) -> Result<ExitCode, String> {
    let host = host_triple()?;
    let explicit_target = target.is_some();
    let target = target.unwrap_or_else(|| host.clone());
    let bin = match bin {
        Some(bin) => bin,
        None => match package.binaries.as_slice() {
            [only] => only.clone(),
            [] => {
                return Err(format!(
                    "package `{}` has no binary to bundle",
                    package.name
                ))
            }
            several => {
                return Err(format!(
                    "package `{}` has several binaries ({}); choose one with --bin",
                    package.name,
                    several.join(", ")
                ))
            }
        },
    };
    let profile = if release { "release" } else { "debug" };
    let mut build_dir = package.target_directory.clone();
    if explicit_target {
        build_dir.push(&target);
    }
    let executable = build_dir.join(profile).join(&bin);
    if !executable.is_file() {
        return Err(format!(
            "{} does not exist; build it first: cargo build{}{} -p {}",
            executable.display(),
            if release { " --release" } else { "" },
            if explicit_target {
                format!(" --target {target}")
            } else {
                String::new()
            },
            package.name
        ));
    }
    let runtime_dirs = tooling::runtime_library_dirs(&config(&package.manifest_dir, &target)?)
        .map_err(|error| error.to_string())?;
    let mut files = vec![(executable.clone(), bin.clone())];
    for library in ["libtvm_ffi.so", "libtvm_runtime.so"] {
        let source = runtime_dirs
            .iter()
            .map(|dir| dir.join(library))
            .find(|path| path.is_file())
            .ok_or_else(|| missing_runtime(library, &target, &runtime_dirs))?;
        files.push((source, library.to_string()));
    }
    let bundle_dir = out
        .unwrap_or_else(|| package.workspace_root.join("dist"))
        .join(format!("{bin}-{target}"));
    // Made under a temporary name and renamed when complete: a failure leaves nothing.
    let partial = bundle_dir.with_extension("partial");
    let _ = std::fs::remove_dir_all(&partial);
    std::fs::create_dir_all(&partial)
        .map_err(|error| format!("creating {}: {error}", partial.display()))?;
    let copied = copy_bundle(&files, &partial, &target).and_then(|total| {
        std::fs::write(partial.join("README.md"), bundle_readme(&bin, &target))
            .map_err(|error| error.to_string())?;
        if bundle_dir.exists() {
            std::fs::remove_dir_all(&bundle_dir)
                .map_err(|error| format!("removing {}: {error}", bundle_dir.display()))?;
        }
        std::fs::rename(&partial, &bundle_dir)
            .map_err(|error| format!("renaming into {}: {error}", bundle_dir.display()))?;
        Ok(total)
    });
    let total = match copied {
        Ok(total) => total,
        Err(message) => {
            let _ = std::fs::remove_dir_all(&partial);
            return Err(message);
        }
    };
    println!(
        "bundled {} ({}) in {}",
        bin,
        human_size(total),
        bundle_dir.display()
    );
    for (_, name) in &files {
        let size = std::fs::metadata(bundle_dir.join(name))
            .map(|metadata| metadata.len())
            .unwrap_or(0);
        println!("  {name:<20} {}", human_size(size));
    }
    Ok(ExitCode::SUCCESS)
}

/// Copies `files` (source, name) into `dir`, checking each one's ELF machine; returns
/// the total size.
fn copy_bundle(files: &[(PathBuf, String)], dir: &Path, target: &str) -> Result<u64, String> {
    let expected = tooling::target_machine(target);
    let mut total = 0;
    for (source, name) in files {
        let bytes = std::fs::read(source)
            .map_err(|error| format!("reading {}: {error}", source.display()))?;
        if let (Some((machine, machine_name)), Some(found)) =
            (expected, tooling::machine_of(&bytes))
        {
            if found != machine {
                return Err(format!(
                    "{} is {} code, but {target} needs {machine_name}",
                    source.display(),
                    tooling::machine_name(found)
                ));
            }
        }
        // `copy` keeps the executable's permissions.
        std::fs::copy(source, dir.join(name))
            .map_err(|error| format!("copying {}: {error}", source.display()))?;
        total += bytes.len() as u64;
    }
    Ok(total)
}

/// What to do when the runtime libraries for `target` are nowhere this build can see.
fn missing_runtime(library: &str, target: &str, searched: &[PathBuf]) -> String {
    let searched = if searched.is_empty() {
        "no folder is known (no TVM toolchain was found or probed, and nothing is prepared)"
            .to_string()
    } else {
        format!(
            "searched {}",
            searched
                .iter()
                .map(|dir| dir.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )
    };
    format!(
        "cannot bundle: {library} for {target} was not found ({searched}).
         Fix: run `cargo relax prepare --target {target}` (it provisions TVM if needed and keeps the          runtime libraries in .relax/runtime/{target}/), or set {} to a folder holding libtvm_ffi.so and          libtvm_runtime.so built for {target}",
        format_args!("RELAX_RUNTIME_DIR_{}", target.replace('-', "_").to_ascii_uppercase())
    )
}

fn bundle_readme(bin: &str, target: &str) -> String {
    format!(
        "# {bin} for {target}\n\n\
         Made by `cargo relax bundle`. Run `./{bin}` from any folder; no environment variables are needed.\n\n\
         - `{bin}`: the executable; its TVM Relax models are compiled into it.\n\
         - `libtvm_ffi.so`, `libtvm_runtime.so`: Apache TVM's runtime (Apache-2.0), which the executable\n  \
         loads from its own folder. Keep the three files together.\n\n\
         To use other runtime libraries, set RELAX_RUNTIME_DIR to a folder holding both.\n"
    )
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
    let output = cargo::command()
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
