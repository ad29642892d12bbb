//! The build-script workflow: resolve every model of the package, copy its artifacts
//! into `OUT_DIR/relax/`, and generate the modules `include_model!` includes.
//!
//! ```text
//! $OUT_DIR/relax/models.txt              the declared models, one a line (include_model! checks names)
//! $OUT_DIR/relax/<model>.rs              the generated module
//! $OUT_DIR/relax/<model>/                library.so, signature.json, weights.safetensors?, manifest.json
//! $OUT_DIR/relax/<model>/files/<name>    files.<name> of the model
//! $OUT_DIR/relax/runtime/                libtvm_ffi.so, libtvm_runtime.so for the target
//! ```
//!
//! The runtime libraries are copied (hard-linked) into `OUT_DIR` so that `cargo run`
//! and `cargo test` find them with no environment variable: the generated code names
//! their folder relative to the executable's (`build/<package>-<hash>/out/relax/runtime`),
//! never by an absolute path of the build machine.

use std::path::{Path, PathBuf};

use crate::artifacts::{self, SIGNATURE, WEIGHTS};
use crate::codegen;
use crate::config::Config;
use crate::error::{io, Result};
use crate::files;
use crate::metadata::{self, Model, SourceKind};
use crate::package::Package;
use crate::resolve::{ArtifactSource, Artifacts, Resolver};
use crate::runtime_libraries;
use crate::signature::Signature;
use crate::target::Bf16Hardware;
use crate::tuning;
use crate::versions::TVM_VERSION;

/// A model ready for `include_model!`: its artifacts in `OUT_DIR`.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct CompiledModel {
    /// The model's name (its key under `[package.metadata.relax.models]`).
    pub name: String,
    /// The exported library, embedded by the generated module.
    pub library: PathBuf,
    /// The weights bound at load time, when the model has any.
    pub weights: Option<PathBuf>,
    /// The generated module (`$OUT_DIR/relax/<model>.rs`).
    pub module: PathBuf,
    /// The key over the model's inputs (what prepared artifacts are checked against).
    pub input_key: String,
    /// The key of its cache entry (inputs and toolchain).
    pub cache_key: String,
    origin: ArtifactSource,
}

impl CompiledModel {
    /// Where the artifacts came from: `prepared` (`.relax/`), `cache`, or `compiled` now.
    pub fn origin(&self) -> &'static str {
        self.origin.as_str()
    }
}

impl Config {
    /// Like [`Config::try_compile`], but prints the error and exits with status 1
    /// (which fails the build).
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
    ///
    /// # Errors
    ///
    /// A bad manifest, a model that fails to import or compile, no usable toolchain when
    /// one is needed, or offline without prepared artifacts; every message names the
    /// model, the manifest key or file, and the fix.
    pub fn try_compile(&self) -> Result<Vec<CompiledModel>> {
        let out_dir = self.path_or_env(&self.out_dir, "OUT_DIR")?;
        let package = Package::open(self)?;
        package.watch();
        let relax_dir = out_dir.join("relax");
        std::fs::create_dir_all(&relax_dir)
            .map_err(io(format!("creating {}", relax_dir.display())))?;
        let resolver = &package.resolver;
        if package.metadata.models.is_empty() {
            resolver.cargo().warning(&format!(
                "relax-build: no models declared in [{}.models] of {}",
                metadata::ROOT_KEY,
                resolver.manifest_path().display()
            ));
        }
        let runtime_hint = runtime_hint(&out_dir);
        let mut compiled = Vec::new();
        for model in &package.metadata.models {
            warn_when_untuned(resolver, model);
            warn_when_bf16_is_slow(resolver, model);
            let inputs = resolver.key_inputs(model)?;
            let artifacts = resolver.resolve(model, &inputs)?;
            compiled.push(materialize(
                resolver,
                model,
                &artifacts,
                &relax_dir,
                runtime_hint.as_deref(),
            )?);
        }
        if !package.metadata.models.is_empty() {
            copy_runtime_libraries(&package, &relax_dir.join("runtime"))?;
        }
        let mut index = package.model_names().join("\n");
        index.push('\n');
        files::write_atomically(&relax_dir.join("models.txt"), index.as_bytes())?;
        Ok(compiled)
    }
}

/// A model that declares `tune` but has no records for this target builds untuned:
/// say why, and what would change it.
fn warn_when_untuned(resolver: &Resolver, model: &Model) {
    let (Some(tune), None) = (model.tune, resolver.tuning_records(model)) else {
        return;
    };
    let target = resolver.cargo_target();
    let records = tuning::dir(resolver.prepared_root(), &model.name, target);
    let message = if target == resolver.host() {
        format!(
            "relax-build: model `{}` has tune = {{ trials = {} }} but no tuning records for {target}; it is \
             compiled untuned. Run `cargo relax tune --manifest-path {} --model {}` and commit {}",
            model.name,
            tune.trials,
            resolver.manifest_path().display(),
            model.name,
            records.display()
        )
    } else {
        format!(
            "relax-build: model `{}` has tune = {{ trials = {} }} but no tuning records for {target}; it is \
             compiled untuned. Tune it on a device of that target running relax-rpc-server: `cargo relax tune \
             --manifest-path {} --model {} --target {target} --rpc HOST:PORT:KEY`, and commit {}",
            model.name,
            tune.trials,
            resolver.manifest_path().display(),
            model.name,
            records.display()
        )
    };
    resolver.cargo().warning(&message);
}

/// A model with `precision = "bf16"` built for a CPU without bf16 dot products runs its
/// dense layers and convolutions on a portable tile, slower than float32, and on an Intel
/// CPU without AMX's tiles `vdpbf16ps` is slower than float32 too: say so, once per
/// build.
fn warn_when_bf16_is_slow(resolver: &Resolver, model: &Model) {
    if model.options.precision != metadata::Precision::Bf16 {
        return;
    }
    let target = resolver.cargo_target();
    let host = (target == resolver.host()).then(Bf16Hardware::of_host);
    let Some(why) = bf16_slow(target, host) else {
        return;
    };
    resolver.cargo().warning(&format!(
        "relax-build: model `{}` has precision = \"bf16\", but {why}. Remove the key to keep \
         float32.",
        model.name
    ));
}

/// Why a bf16 model built for `target` would run slower than float32, if it would: a
/// target other than x86-64 (relax-runtime has no bf16 tile for aarch64 yet), or a build
/// for this machine (`host`: its CPU's bf16 hardware) whose CPU lacks AVX512-BF16 or runs
/// it slower than float32. A cross build for another x86-64 CPU cannot tell, and says
/// nothing.
fn bf16_slow(target: &str, host: Option<Bf16Hardware>) -> Option<String> {
    const PORTABLE: &str = "its dense layers and convolutions will run relax-runtime's \
                            portable bf16 tile there, slower than float32 (on a CPU with \
                            AVX512-BF16 the same library runs `vdpbf16ps`)";
    if !target.starts_with("x86_64") {
        return Some(format!(
            "relax-runtime has no bf16 tile for {target} yet: {PORTABLE}"
        ));
    }
    match host {
        Some(cpu) if !cpu.instructions => {
            Some(format!("this machine's CPU has no AVX512-BF16: {PORTABLE}"))
        }
        Some(cpu) if !cpu.faster_than_float32 => Some(
            "this machine's CPU runs AVX512-BF16's `vdpbf16ps` slower than float32 and has no \
             AMX tiles (an Intel CPU before Sapphire Rapids, or AMX refused by the kernel): its \
             dense layers and convolutions will run slower than in float32 here"
                .to_string(),
        ),
        _ => None,
    }
}

/// The runtime-library folder relative to the executable's folder, when `OUT_DIR` has
/// Cargo's layout (`<profile dir>/build/<package>-<hash>/out`).
fn runtime_hint(out_dir: &Path) -> Option<String> {
    let parts: Vec<String> = out_dir
        .components()
        .rev()
        .take(3)
        .map(|part| part.as_os_str().to_string_lossy().into_owned())
        .collect();
    match parts.as_slice() {
        [out, package, build] if out == "out" && build == "build" => {
            Some(format!("build/{package}/out/relax/runtime"))
        }
        _ => None,
    }
}

/// Links (or copies) the target's runtime libraries into `dir`, or warns that run time
/// will need `RELAX_RUNTIME_DIR` when the build knows of none.
fn copy_runtime_libraries(package: &Package, dir: &Path) -> Result<()> {
    let dirs = package.runtime_library_dirs()?;
    if !dirs
        .iter()
        .any(|dir| runtime_libraries::find(std::slice::from_ref(dir), "libtvm_ffi.so").is_some())
    {
        package.resolver.cargo().warning(
            "relax-build: no TVM runtime libraries are known to this build (all models were prepared or cached \
             and no toolchain was probed); at run time set RELAX_RUNTIME_DIR, or bundle them with `cargo relax bundle`",
        );
        return Ok(());
    }
    std::fs::create_dir_all(dir).map_err(io(format!("creating {}", dir.display())))?;
    for library in runtime_libraries::LIBRARIES {
        if let Some(source) = runtime_libraries::find(&dirs, library) {
            files::place_copy(&source, &dir.join(library), true)?;
        }
    }
    Ok(())
}

/// Copies a model's artifacts and files into `relax_dir/<model>/` and generates
/// `relax_dir/<model>.rs`.
pub(crate) fn materialize(
    resolver: &Resolver,
    model: &Model,
    artifacts: &Artifacts,
    relax_dir: &Path,
    runtime_hint: Option<&str>,
) -> Result<CompiledModel> {
    let model_dir = relax_dir.join(&model.name);
    artifacts::copy_artifacts(&artifacts.dir, &artifacts.manifest, &model_dir, true)?;
    let signature_path = model_dir.join(SIGNATURE);
    let signature = Signature::read(&model.name, &signature_path)?;
    let signature_json = compact_json(&signature_path)?;
    let mut extra_files = Vec::new();
    for file in &model.files {
        let local = resolver.local_file(&file.source)?;
        let destination = model_dir.join("files");
        std::fs::create_dir_all(&destination)
            .map_err(io(format!("creating {}", destination.display())))?;
        files::place_copy(&local, &destination.join(&file.name), true)?;
        extra_files.push((
            file.name.clone(),
            format!("relax/{}/files/{}", model.name, file.name),
        ));
    }
    let weights = artifacts
        .manifest
        .has_weights()
        .then(|| model_dir.join(WEIGHTS));
    let source = &model.source_label;
    let origin = match model.kind {
        SourceKind::Python => format!(
            "{}, entry {}",
            codegen::code_span(source),
            codegen::code_span(&model.entry)
        ),
        SourceKind::Onnx | SourceKind::TorchProgram => codegen::code_span(source),
    };
    let library_path = format!("relax/{}/{}", model.name, artifacts::LIBRARY);
    let weights_path = format!("relax/{}/{}", model.name, WEIGHTS);
    let code = codegen::generate(
        &signature,
        &codegen::Embedded {
            origin: &origin,
            cargo_target: resolver.cargo_target(),
            signature_json: &signature_json,
            library: &library_path,
            library_sha256: artifacts.manifest.library_sha256(),
            weights: weights.as_ref().map(|_| weights_path.as_str()),
            files: &extra_files,
            tvm_version: TVM_VERSION,
            runtime_hint,
            state: &model.state,
        },
    )?;
    let module = relax_dir.join(format!("{}.rs", model.name));
    files::write_atomically(&module, code.as_bytes())?;
    Ok(CompiledModel {
        name: model.name.clone(),
        library: model_dir.join(artifacts::LIBRARY),
        weights,
        module,
        input_key: artifacts.manifest.input_key.clone(),
        cache_key: artifacts.manifest.cache_key.clone(),
        origin: artifacts.source,
    })
}

/// A JSON file's content on one line, as the generated code embeds it.
fn compact_json(path: &Path) -> Result<String> {
    let text = std::fs::read_to_string(path).map_err(io(format!("reading {}", path.display())))?;
    let value: serde_json::Value =
        serde_json::from_str(&text).map_err(|error| crate::error::Error::Io {
            context: format!("reading {}", path.display()),
            source: std::io::Error::other(error),
        })?;
    Ok(value.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bf16_build_says_when_it_will_run_slower_than_float32() {
        const X86: &str = "x86_64-unknown-linux-gnu";
        let cpu = |instructions, tiles, faster_than_float32| Bf16Hardware {
            instructions,
            tiles,
            faster_than_float32,
        };
        let aarch64 = bf16_slow("aarch64-unknown-linux-gnu", None).unwrap();
        assert!(
            aarch64.contains("no bf16 tile for aarch64-unknown-linux-gnu"),
            "{aarch64}"
        );
        let without = bf16_slow(X86, Some(cpu(false, false, false))).unwrap();
        assert!(without.contains("no AVX512-BF16"), "{without}");
        let intel = bf16_slow(X86, Some(cpu(true, false, false))).unwrap();
        assert!(intel.contains("no AMX tiles"), "{intel}");
        assert_eq!(bf16_slow(X86, Some(cpu(true, false, true))), None);
        assert_eq!(bf16_slow(X86, Some(cpu(true, true, true))), None);
        // A cross build for another x86-64 CPU cannot tell.
        assert_eq!(bf16_slow(X86, None), None);
    }

    #[test]
    fn the_runtime_hint_is_relative_to_the_profile_folder() {
        assert_eq!(
            runtime_hint(Path::new("/w/target/release/build/app-0a1b2c/out")).as_deref(),
            Some("build/app-0a1b2c/out/relax/runtime")
        );
        assert_eq!(runtime_hint(Path::new("/tmp/custom-out")), None);
    }
}
