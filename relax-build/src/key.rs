//! The content-addressed key of a model: a sha256 over everything that can change
//! its compiled output.
//!
//! Each input is recorded under a label, so that a stale artifact can say what changed:
//!
//! | label | what |
//! |---|---|
//! | `source:<path>` | the model source file's content (path relative to the package root) |
//! | `include:<path>` | each file under the model's `include` files and folders |
//! | `weights` | the weights file's sha256 (a fetched file's declared sha256: it is checked when fetched) |
//! | `manifest` | the manifest entry after defaults and environment overrides (name, entry, weights mode, pipelines, opt level, offload, ONNX preparation, precision, inputs) |
//! | `target` | the resolved TVM target dict |
//! | `driver` | the compile driver's source |
//! | `relax-build` | relax-build's version |
//! | `tvm` | the pinned apache-tvm version |
//! | `tuning:<file>` | each tuning-record file applied (`.relax/tuning/<model>/<target>/`) |
//!
//! The *input key* hashes these and needs no Python, so prepared artifacts are checked
//! with it on machines without TVM. The *cache key* adds the toolchain's build hash
//! (the sha256 of the installed wheels' RECORD files), so a different TVM build never
//! serves stale code from the cache.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::json;
use sha2::{Digest, Sha256};

use crate::driver;
use crate::error::Result;
use crate::files::{hex, sha256_bytes, sha256_file};
use crate::metadata::{FileSource, Model, Weights};
use crate::target::Bf16Hardware;
use crate::tensor_spec::SpecDim;
use crate::versions::TVM_VERSION;

/// The labeled inputs of a model's key.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct KeyInputs {
    parts: BTreeMap<String, String>,
}

impl KeyInputs {
    /// Hashes every input of `model` compiled for `target` with the tuning records in
    /// `tuning` (if any), for a CPU with the bf16 hardware `bf16` (its tiles change a
    /// bf16 model's kernels; bf16 faster than float32, an ONNX model's integer products').
    pub fn of(
        model: &Model,
        target: &serde_json::Value,
        tuning: Option<&Path>,
        bf16: Bf16Hardware,
    ) -> Result<KeyInputs> {
        let mut parts = BTreeMap::new();
        if bf16.tiles && model.options.precision == crate::metadata::Precision::Bf16 {
            parts.insert("matrix_units".to_string(), "amx-bf16".to_string());
        }
        if bf16.faster_than_float32 && model.kind == crate::metadata::SourceKind::Onnx {
            parts.insert("fast_bf16".to_string(), "yes".to_string());
        }
        if let Some(dir) = tuning {
            for file in crate::tuning::record_files(dir) {
                let name = file
                    .file_name()
                    .unwrap_or_default()
                    .to_string_lossy()
                    .into_owned();
                parts.insert(format!("tuning:{name}"), sha256_file(&file)?);
            }
        }
        parts.insert(
            format!("source:{}", model.source_label),
            sha256_file(&model.source)?,
        );
        for file in include_files(model)? {
            parts.insert(
                format!("include:{}", relative(model, &file)),
                sha256_file(&file)?,
            );
        }
        match model.weights_source() {
            Some(FileSource::Local(path)) => {
                parts.insert("weights".to_string(), sha256_file(path)?);
            }
            Some(FileSource::Package(file)) => {
                parts.insert("weights".to_string(), file.sha256.clone());
            }
            None => {}
        }
        let inputs: Vec<_> = model
            .inputs
            .iter()
            .map(|method| {
                let arguments: Vec<_> = method
                    .arguments
                    .iter()
                    .map(|(name, spec)| {
                        let dims: Vec<String> = spec
                            .shape
                            .iter()
                            .map(|dim| match dim {
                                SpecDim::Static(size) => size.to_string(),
                                SpecDim::Symbolic(name) => name.clone(),
                            })
                            .collect();
                        json!([name, spec.dtype, dims])
                    })
                    .collect();
                json!([method.method, arguments])
            })
            .collect();
        let weights = match &model.weights {
            Weights::Auto => "auto",
            Weights::File(_) => "file",
            Weights::Embed => "embed",
            Weights::External => "external",
        };
        let entry = json!({
            "name": model.name,
            "entry": model.entry,
            "weights": weights,
            "pipeline": model.options.pipeline.as_str(),
            "tir_pipeline": model.options.tir_pipeline,
            "opt_level": model.options.opt_level,
            "offload": model.options.offload,
            "onnx_prepare": model.options.onnx_prepare,
            "precision": model.options.precision.as_str(),
            "inputs": inputs,
        });
        parts.insert(
            "manifest".to_string(),
            sha256_bytes(entry.to_string().as_bytes()),
        );
        parts.insert(
            "target".to_string(),
            sha256_bytes(target.to_string().as_bytes()),
        );
        parts.insert("driver".to_string(), driver::fingerprint());
        parts.insert(
            "relax-build".to_string(),
            env!("CARGO_PKG_VERSION").to_string(),
        );
        parts.insert("tvm".to_string(), TVM_VERSION.to_string());
        Ok(KeyInputs { parts })
    }

    /// The key over the inputs alone (no toolchain needed to compute it).
    pub fn input_key(&self) -> String {
        let mut hasher = Sha256::new();
        for (label, value) in &self.parts {
            hasher.update(label.as_bytes());
            hasher.update(b"=");
            hasher.update(value.as_bytes());
            hasher.update(b"\n");
        }
        hex(&hasher.finalize())
    }

    /// The cache key: the input key and the toolchain's build hash.
    pub fn cache_key(&self, toolchain_hash: &str) -> String {
        sha256_bytes(format!("{}\ntoolchain={toolchain_hash}\n", self.input_key()).as_bytes())
    }

    /// What differs from `recorded`, one phrase per input (`models/mlp.py changed`).
    pub fn differences(&self, recorded: &KeyInputs) -> Vec<String> {
        let mut changes = Vec::new();
        for (label, value) in &self.parts {
            match recorded.parts.get(label) {
                None => changes.push(format!("{} is new", describe(label))),
                Some(old) if old != value => changes.push(format!("{} changed", describe(label))),
                Some(_) => {}
            }
        }
        for label in recorded.parts.keys() {
            if !self.parts.contains_key(label) {
                changes.push(format!("{} is gone", describe(label)));
            }
        }
        changes
    }
}

fn describe(label: &str) -> String {
    match label.split_once(':') {
        Some((_, path)) => format!("`{path}`"),
        None => match label {
            "manifest" => "the manifest entry".to_string(),
            "target" => "the TVM target".to_string(),
            "driver" => "the compile driver (relax-build)".to_string(),
            "relax-build" => "relax-build's version".to_string(),
            "tvm" => "the pinned TVM version".to_string(),
            other => format!("the {other}"),
        },
    }
}

fn relative(model: &Model, path: &Path) -> String {
    path.strip_prefix(&model.manifest_dir)
        .unwrap_or(path)
        .to_string_lossy()
        .replace('\\', "/")
}

/// Every file under the model's `include` paths, sorted, without Python bytecode caches.
pub fn include_files(model: &Model) -> Result<Vec<std::path::PathBuf>> {
    let mut files = Vec::new();
    for path in &model.include {
        for entry in walkdir::WalkDir::new(path).sort_by_file_name() {
            let entry = entry.map_err(|error| crate::error::Error::Io {
                context: format!("walking {}", path.display()),
                source: error.into(),
            })?;
            let skipped = entry
                .path()
                .components()
                .any(|part| part.as_os_str() == "__pycache__")
                || entry.path().extension().is_some_and(|ext| ext == "pyc");
            if entry.file_type().is_file() && !skipped {
                files.push(entry.into_path());
            }
        }
    }
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs(parts: &[(&str, &str)]) -> KeyInputs {
        KeyInputs {
            parts: parts
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    #[test]
    fn keys_change_with_any_input_and_with_the_toolchain() {
        let a = inputs(&[("source:m.py", "1"), ("target", "t")]);
        let b = inputs(&[("source:m.py", "2"), ("target", "t")]);
        assert_ne!(a.input_key(), b.input_key());
        assert_eq!(a.input_key(), a.clone().input_key());
        assert_ne!(a.cache_key("tvm-build-1"), a.cache_key("tvm-build-2"));
        assert_eq!(a.input_key().len(), 64);
    }

    /// The input key of model `m` declared by `lines` in a manifest in `dir` (its source
    /// file written there), for a CPU with the bf16 hardware `bf16`.
    fn bf16_key(dir: &Path, source: &str, lines: &str, bf16: Bf16Hardware) -> String {
        std::fs::write(dir.join(source), b"x").unwrap();
        let text = format!("[package.metadata.relax.models.m]\nsource = \"{source}\"\n{lines}");
        let manifest = crate::metadata::parse(&text, dir, &dir.join("Cargo.toml"));
        let model = manifest.unwrap().models.remove(0);
        let target = serde_json::json!({"kind": "llvm"});
        KeyInputs::of(&model, &target, None, bf16)
            .unwrap()
            .input_key()
    }

    #[test]
    fn amx_tiles_change_the_key_of_a_bf16_model_only() {
        let dir = tempfile::tempdir().unwrap();
        let key = |precision: &str, tiles: bool| {
            let bf16 = Bf16Hardware {
                instructions: true,
                tiles,
                faster_than_float32: true,
            };
            let lines = format!("precision = \"{precision}\"\n");
            bf16_key(dir.path(), "m.onnx", &lines, bf16)
        };
        assert_ne!(key("bf16", true), key("bf16", false));
        assert_eq!(key("f32", true), key("f32", false));
    }

    #[test]
    fn fast_bf16_changes_the_key_of_an_onnx_model_only() {
        let dir = tempfile::tempdir().unwrap();
        let key = |source: &str, fast: bool| {
            let bf16 = Bf16Hardware {
                instructions: true,
                tiles: false,
                faster_than_float32: fast,
            };
            let entry = if source.ends_with(".py") {
                "entry = \"M\"\n"
            } else {
                ""
            };
            bf16_key(dir.path(), source, entry, bf16)
        };
        assert_ne!(key("m.onnx", true), key("m.onnx", false));
        assert_eq!(key("m.py", true), key("m.py", false));
    }

    #[test]
    fn differences_name_what_changed() {
        let recorded = inputs(&[
            ("source:models/m.py", "1"),
            ("weights", "w"),
            ("include:models/old.py", "x"),
        ]);
        let current = inputs(&[
            ("source:models/m.py", "2"),
            ("weights", "w"),
            ("include:models/new.py", "y"),
        ]);
        assert_eq!(
            current.differences(&recorded),
            [
                "`models/new.py` is new",
                "`models/m.py` changed",
                "`models/old.py` is gone"
            ]
        );
    }
}
