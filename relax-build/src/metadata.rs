//! `[package.metadata.relax]` in Cargo.toml: parsing and validation.
//!
//! ```toml
//! [package.metadata.relax]                 # package defaults for every model (optional)
//! pipeline = "zero"                        # "zero" (default), "cpu" or "default"
//! tir_pipeline = "default"                 # passed to tvm.compile
//! opt_level = 3                            # tvm.transform.PassContext(opt_level=...)
//! target = { mcpu = "skylake" }            # keys merged over the target derived from Cargo's
//! python = ".venv/bin/python"              # the interpreter to compile with (after RELAX_PYTHON)
//!
//! [package.metadata.relax.models.digits]
//! source = "models/digits.py"              # .py (nn module, TVMScript, function) or .onnx
//! entry = "DigitsMLP"                      # .py only: the attribute to compile
//! weights = "models/digits.safetensors"    # .py: parameter values by name;
//!                                          # .onnx: "embed" or "external" (default: by size)
//! include = ["models/layers"]              # files/folders the source imports
//! tune = { trials = 32 }                   # meta-schedule trials per task for `cargo relax tune`
//! pipeline = "cpu"                         # any package default, per model
//! [package.metadata.relax.models.digits.inputs.forward]
//! x = "float32[batch, 64]"                 # export spec per method, in argument order
//! ```
//!
//! Per model, environment variables override the manifest (`<MODEL>` is the model name
//! in upper case): `RELAX_<MODEL>_PIPELINE`, `RELAX_<MODEL>_TIR_PIPELINE`,
//! `RELAX_<MODEL>_OPT_LEVEL`, and `RELAX_<MODEL>_TARGET` (a JSON object merged over the
//! target, e.g. `{"mcpu": "znver4"}`).

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::env;
use crate::error::{Error, Result};

/// The key path of the relax table, for messages.
pub const ROOT_KEY: &str = "package.metadata.relax";

/// Everything declared in `[package.metadata.relax]`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Metadata {
    pub models: Vec<Model>,
    /// `python = "..."`: the interpreter to compile with (after `RELAX_PYTHON`).
    pub python: Option<PathBuf>,
}

/// What kind of file a model's source is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourceKind {
    /// A Python file: nn module, TVMScript IRModule, or a function returning an IRModule.
    Python,
    /// An ONNX model, imported with `tvm.relax.frontend.onnx.from_onnx`.
    Onnx,
}

/// Where a model's weights come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Weights {
    /// None given: .py sources take none; .onnx sources embed initializers up to 1 MiB
    /// in total and store larger ones externally.
    Auto,
    /// A safetensors file of parameter values by name (.py sources).
    File(PathBuf),
    /// ONNX initializers compiled into the library as constants.
    Embed,
    /// ONNX initializers stored next to the library (safetensors), bound at load.
    External,
}

/// How a model is compiled; package defaults, then the model's keys, then environment.
#[derive(Debug, Clone, PartialEq)]
pub struct CompileOptions {
    pub pipeline: Pipeline,
    pub tir_pipeline: Option<String>,
    pub opt_level: u8,
    /// Keys merged over the target derived from the Cargo target.
    pub target: serde_json::Map<String, serde_json::Value>,
}

impl Default for CompileOptions {
    fn default() -> Self {
        CompileOptions {
            pipeline: Pipeline::default(),
            tir_pipeline: None,
            opt_level: 3,
            target: serde_json::Map::new(),
        }
    }
}

/// One model, validated, with paths made absolute.
#[derive(Debug, Clone, PartialEq)]
pub struct Model {
    pub name: String,
    /// The package root the relative paths below were given against.
    pub manifest_dir: PathBuf,
    pub source: PathBuf,
    pub kind: SourceKind,
    /// Extra files and folders the source imports (walked recursively).
    pub include: Vec<PathBuf>,
    /// The attribute to compile (.py sources; empty for .onnx).
    pub entry: String,
    pub weights: Weights,
    pub options: CompileOptions,
    /// Method name -> arguments in order; empty for TVMScript sources.
    pub inputs: Vec<MethodInputs>,
    /// `tune = { trials = N }`: meta-schedule trials per task for `cargo relax tune`.
    pub tune: Option<Tune>,
}

/// How `cargo relax tune` tunes a model (a build only applies committed records).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tune {
    /// Meta-schedule trials per task.
    pub trials: u32,
}

impl Model {
    /// The manifest key path of one of this model's keys.
    pub fn key(&self, key: &str) -> String {
        format!("{ROOT_KEY}.models.{}.{key}", self.name)
    }

    /// A model declared in code rather than a manifest: `source` with every default
    /// (used by the conformance runner for `.onnx` files, and by tools).
    pub fn from_source(name: &str, source: &Path, entry: Option<&str>) -> Result<Model> {
        let dir = source.parent().unwrap_or(Path::new("."));
        let file = source.file_name().unwrap_or_default().to_string_lossy();
        let mut text = format!("[package.metadata.relax.models.{name}]\nsource = {file:?}\n");
        if let Some(entry) = entry {
            text.push_str(&format!("entry = {entry:?}\n"));
        }
        let mut metadata = parse(&text, dir, &dir.join("(declared in code)"))?;
        Ok(metadata.models.remove(0))
    }

    /// The `.safetensors` file given in the manifest, if any.
    pub fn weights_file(&self) -> Option<&Path> {
        match &self.weights {
            Weights::File(path) => Some(path),
            _ => None,
        }
    }

    /// The name of a per-model environment variable: `RELAX_<MODEL>_<SUFFIX>`.
    pub fn env_name(&self, suffix: &str) -> String {
        format!("RELAX_{}_{suffix}", self.name.to_ascii_uppercase())
    }

    /// Applies `RELAX_<MODEL>_*` overrides to the compile options.
    pub fn apply_env_overrides(&mut self) -> Result<()> {
        if let Some(pipeline) = self.env_override(
            "PIPELINE",
            Pipeline::parse,
            "a pipeline; use zero, cpu or default",
        )? {
            self.options.pipeline = pipeline;
        }
        if let Some(tir_pipeline) =
            self.env_override("TIR_PIPELINE", |value| Some(value.to_string()), "")?
        {
            self.options.tir_pipeline = Some(tir_pipeline);
        }
        let opt_level = |value: &str| value.parse().ok().filter(|level| *level <= 3);
        if let Some(level) =
            self.env_override("OPT_LEVEL", opt_level, "an opt level; use 0, 1, 2 or 3")?
        {
            self.options.opt_level = level;
        }
        let object = |value: &str| match serde_json::from_str(value) {
            Ok(serde_json::Value::Object(keys)) => Some(keys),
            _ => None,
        };
        let expected = "a JSON object; give target keys like {\"mcpu\": \"skylake\"}";
        if let Some(keys) = self.env_override("TARGET", object, expected)? {
            self.options.target.extend(keys);
        }
        Ok(())
    }

    /// The parsed value of `RELAX_<MODEL>_<suffix>`, if set; `expected` completes
    /// "`<value>` is not ..." when it does not parse.
    fn env_override<T>(
        &self,
        suffix: &str,
        parse: impl Fn(&str) -> Option<T>,
        expected: &str,
    ) -> Result<Option<T>> {
        let name = self.env_name(suffix);
        let Some(value) = env::var(&name) else {
            return Ok(None);
        };
        let value = value.to_string_lossy();
        parse(&value).map(Some).ok_or_else(|| Error::ManifestKey {
            path: PathBuf::from("environment"),
            key: name,
            message: format!("`{value}` is not {expected}"),
        })
    }
}

/// The export spec of one method.
#[derive(Debug, Clone, PartialEq)]
pub struct MethodInputs {
    pub method: String,
    pub arguments: Vec<(String, TensorSpec)>,
}

/// `float32[batch, 64]`: a dtype and dims, static or named.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorSpec {
    pub dtype: String,
    pub shape: Vec<SpecDim>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum SpecDim {
    Static(u64),
    Symbolic(String),
}

/// The Relax pipeline a model is compiled with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Pipeline {
    /// `relax.get_pipeline("zero")` as a pre-pass (constant folding, fusion), then the
    /// target's backend pipeline `relax.get_default_pipeline(target)`.
    #[default]
    Zero,
    /// The backend pipeline `relax.get_default_pipeline(target)` alone.
    Cpu,
    /// `tvm.compile`'s `"default"` pipeline alone: lowering only, no folding or fusion.
    Default,
}

impl Pipeline {
    pub fn as_str(self) -> &'static str {
        match self {
            Pipeline::Zero => "zero",
            Pipeline::Cpu => "cpu",
            Pipeline::Default => "default",
        }
    }

    pub fn parse(text: &str) -> Option<Pipeline> {
        [Pipeline::Zero, Pipeline::Cpu, Pipeline::Default]
            .into_iter()
            .find(|pipeline| pipeline.as_str() == text)
    }
}

/// Dtypes a model input may have.
pub const DTYPES: &[&str] = &[
    "float16", "float32", "float64", "bfloat16", "int8", "int16", "int32", "int64", "uint8",
    "uint16", "uint32", "uint64", "bool",
];

/// Compile options as written in the manifest (all optional).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawOptions {
    pipeline: Option<Pipeline>,
    tir_pipeline: Option<String>,
    opt_level: Option<u8>,
    target: Option<toml::Table>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRelax {
    #[serde(default)]
    models: toml::Table,
    python: Option<String>,
    pipeline: Option<Pipeline>,
    tir_pipeline: Option<String>,
    opt_level: Option<u8>,
    target: Option<toml::Table>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawModel {
    source: Option<String>,
    entry: Option<String>,
    weights: Option<String>,
    pipeline: Option<Pipeline>,
    tir_pipeline: Option<String>,
    opt_level: Option<u8>,
    target: Option<toml::Table>,
    #[serde(default)]
    include: Vec<String>,
    #[serde(default)]
    inputs: toml::Table,
    tune: Option<Tune>,
}

/// Reads and validates `[package.metadata.relax]` of the manifest in `manifest_dir`.
pub fn read(manifest_dir: &Path) -> Result<Metadata> {
    let path = manifest_dir.join("Cargo.toml");
    let text = std::fs::read_to_string(&path).map_err(|error| Error::Manifest {
        path: path.clone(),
        message: format!("cannot read it: {error}"),
    })?;
    parse(&text, manifest_dir, &path)
}

/// Parses a manifest's text; `manifest_dir` resolves relative paths.
pub fn parse(text: &str, manifest_dir: &Path, manifest_path: &Path) -> Result<Metadata> {
    let document: toml::Table = toml::from_str(text).map_err(|error| Error::Manifest {
        path: manifest_path.to_path_buf(),
        message: format!("not valid TOML: {error}"),
    })?;
    let relax = document
        .get("package")
        .and_then(|package| package.get("metadata"))
        .and_then(|metadata| metadata.get("relax"));
    let Some(relax) = relax else {
        return Ok(Metadata::default());
    };
    let key_error = |key: String, message: String| Error::ManifestKey {
        path: manifest_path.to_path_buf(),
        key,
        message,
    };
    let raw: RawRelax = deserialize(relax.clone(), ROOT_KEY, &key_error)?;
    let defaults = merge_options(
        CompileOptions::default(),
        RawOptions {
            pipeline: raw.pipeline,
            tir_pipeline: raw.tir_pipeline,
            opt_level: raw.opt_level,
            target: raw.target,
        },
        ROOT_KEY,
        &key_error,
    )?;
    let mut models = Vec::new();
    for (name, value) in raw.models {
        let model_key = format!("{ROOT_KEY}.models.{name}");
        if !is_identifier(&name) {
            return Err(key_error(
                model_key,
                format!(
                    "`{name}` is not a valid model name: it becomes a Rust module name, so use \
                     lowercase letters, digits and `_`, starting with a letter (e.g. `{}`)",
                    suggest_identifier(&name)
                ),
            ));
        }
        let raw: RawModel = deserialize(value, &model_key, &key_error)?;
        models.push(validate_model(
            name,
            raw,
            &defaults,
            manifest_dir,
            &model_key,
            &key_error,
        )?);
    }
    let python = raw.python.map(|python| {
        let path = PathBuf::from(&python);
        if python.contains('/') {
            manifest_dir.join(path)
        } else {
            path
        }
    });
    Ok(Metadata { models, python })
}

fn merge_options(
    mut options: CompileOptions,
    raw: RawOptions,
    key: &str,
    key_error: &impl Fn(String, String) -> Error,
) -> Result<CompileOptions> {
    if let Some(pipeline) = raw.pipeline {
        options.pipeline = pipeline;
    }
    if let Some(tir_pipeline) = raw.tir_pipeline {
        options.tir_pipeline = Some(tir_pipeline);
    }
    if let Some(level) = raw.opt_level {
        if level > 3 {
            return Err(key_error(
                format!("{key}.opt_level"),
                format!("{level} is not an opt level; use 0, 1, 2 or 3"),
            ));
        }
        options.opt_level = level;
    }
    if let Some(target) = raw.target {
        let json = serde_json::to_value(&target).expect("TOML tables convert to JSON");
        if let serde_json::Value::Object(keys) = json {
            options.target.extend(keys);
        }
    }
    Ok(options)
}

fn deserialize<T: serde::de::DeserializeOwned>(
    value: toml::Value,
    key: &str,
    key_error: &impl Fn(String, String) -> Error,
) -> Result<T> {
    serde_path_to_error::deserialize(value).map_err(|error| {
        let inner = error.path().to_string();
        let path = if inner == "." || inner.is_empty() {
            key.to_string()
        } else {
            format!("{key}.{inner}")
        };
        key_error(path, with_suggestion(error.into_inner().to_string()))
    })
}

/// Adds "did you mean `x`?" to serde's "unknown field `y`, expected one of ..." message.
fn with_suggestion(message: String) -> String {
    let Some(rest) = message.strip_prefix("unknown field `") else {
        return message;
    };
    let Some((unknown, expected)) = rest.split_once('`') else {
        return message;
    };
    let closest = expected
        .split('`')
        .skip(1)
        .step_by(2)
        .map(|candidate| (edit_distance(unknown, candidate), candidate))
        .min();
    match closest {
        Some((distance, candidate)) if distance <= 2 => {
            format!("{message}; did you mean `{candidate}`?")
        }
        _ => message,
    }
}

/// Levenshtein distance between two short strings.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut current = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let substitution = previous[j] + usize::from(ca != *cb);
            current.push(substitution.min(previous[j + 1] + 1).min(current[j] + 1));
        }
        previous = current;
    }
    previous[b.len()]
}

fn validate_model(
    name: String,
    raw: RawModel,
    defaults: &CompileOptions,
    manifest_dir: &Path,
    model_key: &str,
    key_error: &impl Fn(String, String) -> Error,
) -> Result<Model> {
    let key = |suffix: &str| format!("{model_key}.{suffix}");
    let source = raw.source.ok_or_else(|| {
        key_error(
            key("source"),
            "missing: set it to the model's source file, relative to the package root \
             (e.g. source = \"models/mlp.py\" or \"models/mlp.onnx\")"
                .to_string(),
        )
    })?;
    let source_path = manifest_dir.join(&source);
    if !source_path.is_file() {
        return Err(key_error(
            key("source"),
            format!(
                "file `{source}` not found (looked for {})",
                source_path.display()
            ),
        ));
    }
    let kind = match source_path.extension().and_then(|ext| ext.to_str()) {
        Some("py") => SourceKind::Python,
        Some("onnx") => SourceKind::Onnx,
        _ => {
            return Err(key_error(
                key("source"),
                format!(
                    "`{source}` is not a supported source: expected a Python file (.py) defining a \
                     relax.frontend.nn module, a TVMScript IRModule or a function returning an IRModule, \
                     or an ONNX model (.onnx)"
                ),
            ))
        }
    };
    let entry = match (kind, raw.entry) {
        (SourceKind::Python, Some(entry)) => entry,
        (SourceKind::Python, None) => {
            return Err(key_error(
                key("entry"),
                format!("missing: name the attribute of `{source}` to compile (a relax.frontend.nn.Module subclass or a TVMScript IRModule)"),
            ))
        }
        (SourceKind::Onnx, Some(_)) => {
            return Err(key_error(
                key("entry"),
                "an ONNX model has no entry to choose (its graph is the function `main`); remove the key".to_string(),
            ))
        }
        (SourceKind::Onnx, None) => String::new(),
    };
    let weights = match (kind, raw.weights) {
        (_, None) => Weights::Auto,
        (SourceKind::Onnx, Some(mode)) => match mode.as_str() {
            "embed" => Weights::Embed,
            "external" => Weights::External,
            other => {
                return Err(key_error(
                    key("weights"),
                    format!("`{other}`: for an ONNX model, weights is \"embed\" (initializers compiled in) or \"external\" (stored next to the library); the values come from the graph"),
                ))
            }
        },
        (SourceKind::Python, Some(weights)) => {
            let path = manifest_dir.join(&weights);
            if !path.is_file() {
                return Err(key_error(
                    key("weights"),
                    format!("file `{weights}` not found (looked for {})", path.display()),
                ));
            }
            if path.extension().and_then(|ext| ext.to_str()) != Some("safetensors") {
                return Err(key_error(
                    key("weights"),
                    format!("`{weights}` is not a .safetensors file; save the parameters with safetensors (by parameter name)"),
                ));
            }
            Weights::File(path)
        }
    };
    let options = merge_options(
        defaults.clone(),
        RawOptions {
            pipeline: raw.pipeline,
            tir_pipeline: raw.tir_pipeline,
            opt_level: raw.opt_level,
            target: raw.target,
        },
        model_key,
        key_error,
    )?;
    let mut include = Vec::new();
    for (index, path) in raw.include.iter().enumerate() {
        let full = manifest_dir.join(path);
        if !full.exists() {
            return Err(key_error(
                key(&format!("include[{index}]")),
                format!(
                    "`{path}` not found (looked for {}); list files or folders the source imports",
                    full.display()
                ),
            ));
        }
        include.push(full);
    }
    let mut inputs = Vec::new();
    for (method, arguments) in raw.inputs {
        let method_key = key(&format!("inputs.{method}"));
        let toml::Value::Table(arguments) = arguments else {
            return Err(key_error(
                method_key,
                "expected a table of argument = \"dtype[dims]\", e.g. { x = \"float32[batch, 64]\" }".to_string(),
            ));
        };
        let mut parsed = Vec::new();
        for (argument, spec) in arguments {
            let argument_key = format!("{method_key}.{argument}");
            let toml::Value::String(spec) = spec else {
                return Err(key_error(
                    argument_key,
                    format!("expected a string like \"float32[batch, 64]\", found {spec}"),
                ));
            };
            let spec =
                parse_tensor_spec(&spec).map_err(|message| key_error(argument_key, message))?;
            parsed.push((argument, spec));
        }
        inputs.push(MethodInputs {
            method,
            arguments: parsed,
        });
    }
    Ok(Model {
        name,
        manifest_dir: manifest_dir.to_path_buf(),
        source: source_path,
        kind,
        include,
        entry,
        weights,
        options,
        inputs,
        tune: raw.tune,
    })
}

/// Parses `float32[batch, 64]` (a scalar is `float32[]`).
pub fn parse_tensor_spec(text: &str) -> std::result::Result<TensorSpec, String> {
    let usage = "expected \"<dtype>[<dims>]\" like \"float32[batch, 64]\"";
    let (dtype, rest) = text
        .trim()
        .split_once('[')
        .ok_or_else(|| format!("{usage}, found \"{text}\" (no `[`)"))?;
    let dims = rest
        .strip_suffix(']')
        .ok_or_else(|| format!("{usage}, found \"{text}\" (no closing `]`)"))?;
    let dtype = dtype.trim();
    if !DTYPES.contains(&dtype) {
        return Err(format!(
            "{usage}, found \"{text}\": unknown dtype `{dtype}`; use one of {}",
            DTYPES.join(", ")
        ));
    }
    let mut shape = Vec::new();
    if !dims.trim().is_empty() {
        for dim in dims.split(',') {
            let dim = dim.trim();
            if let Ok(size) = dim.parse::<u64>() {
                shape.push(SpecDim::Static(size));
            } else if is_dim_name(dim) {
                shape.push(SpecDim::Symbolic(dim.to_string()));
            } else {
                return Err(format!(
                    "{usage}, found \"{text}\": dim `{dim}` is neither a size nor a name"
                ));
            }
        }
    }
    Ok(TensorSpec {
        dtype: dtype.to_string(),
        shape,
    })
}

/// A symbolic dim's name: `[A-Za-z_][A-Za-z0-9_]*`.
fn is_dim_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Lowercase snake_case identifier: `[a-z][a-z0-9_]*`.
fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_lowercase())
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

fn suggest_identifier(name: &str) -> String {
    let mut suggestion: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect();
    if !suggestion.starts_with(|c: char| c.is_ascii_lowercase()) {
        suggestion.insert(0, 'm');
    }
    suggestion
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_manifest(text: &str) -> Result<Metadata> {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
        parse(text, dir, &dir.join("Cargo.toml"))
    }

    #[test]
    fn tensor_specs_parse_static_and_symbolic_dims() {
        let spec = parse_tensor_spec("float32[batch, 64]").unwrap();
        assert_eq!(spec.dtype, "float32");
        assert_eq!(
            spec.shape,
            vec![SpecDim::Symbolic("batch".to_string()), SpecDim::Static(64)]
        );
        assert_eq!(parse_tensor_spec("int64[]").unwrap().shape, Vec::new());
    }

    #[test]
    fn tensor_spec_errors_say_what_is_wrong() {
        assert!(parse_tensor_spec("float32")
            .unwrap_err()
            .contains("(no `[`)"));
        assert!(parse_tensor_spec("float32[1, 2")
            .unwrap_err()
            .contains("(no closing `]`)"));
        assert!(parse_tensor_spec("float32[1, 2x]")
            .unwrap_err()
            .contains("dim `2x` is neither a size nor a name"));
        assert!(parse_tensor_spec("f32[1]")
            .unwrap_err()
            .contains("unknown dtype `f32`"));
    }

    #[test]
    fn a_package_without_relax_metadata_has_no_models() {
        let metadata = parse_manifest("[package]\nname = \"app\"\n").unwrap();
        assert!(metadata.models.is_empty());
    }

    #[test]
    fn model_names_must_be_rust_identifiers() {
        let error =
            parse_manifest("[package.metadata.relax.models.My-Model]\nsource = \"src/lib.rs\"\n")
                .unwrap_err();
        assert!(
            error.to_string().contains(
                "`package.metadata.relax.models.My-Model`: `My-Model` is not a valid model name"
            ),
            "{error}"
        );
        assert!(error.to_string().contains("(e.g. `my_model`)"), "{error}");
    }

    #[test]
    fn unknown_keys_get_a_suggestion() {
        let error =
            parse_manifest("[package.metadata.relax.models.m]\nentyr = \"M\"\n").unwrap_err();
        assert!(
            error.to_string().contains("unknown field `entyr`"),
            "{error}"
        );
        assert!(
            error.to_string().contains("did you mean `entry`?"),
            "{error}"
        );
    }

    #[test]
    fn unknown_keys_at_the_top_are_errors_too() {
        let error = parse_manifest("[package.metadata.relax]\nmodel = {}\n").unwrap_err();
        assert!(
            error
                .to_string()
                .contains("`package.metadata.relax.model`: unknown field `model`"),
            "{error}"
        );
    }

    #[test]
    fn package_defaults_apply_and_models_override_them() {
        let metadata = parse_manifest(
            "[package.metadata.relax]\npipeline = \"cpu\"\nopt_level = 2\ntarget = { mcpu = \"skylake\" }\n\
             [package.metadata.relax.models.a]\nsource = \"src/driver.py\"\nentry = \"A\"\n\
             [package.metadata.relax.models.b]\nsource = \"src/driver.py\"\nentry = \"B\"\npipeline = \"default\"\n\
             target = { mattr = [\"+avx2\"] }\n",
        )
        .unwrap();
        let (a, b) = (&metadata.models[0].options, &metadata.models[1].options);
        assert_eq!((a.pipeline, a.opt_level), (Pipeline::Cpu, 2));
        assert_eq!((b.pipeline, b.opt_level), (Pipeline::Default, 2));
        assert_eq!(
            serde_json::Value::Object(b.target.clone()),
            serde_json::json!({"mcpu": "skylake", "mattr": ["+avx2"]})
        );
    }

    #[test]
    fn environment_overrides_name_the_variable_when_wrong() {
        let mut model = parse_manifest(
            "[package.metadata.relax.models.envtest]\nsource = \"src/driver.py\"\nentry = \"E\"\n",
        )
        .unwrap()
        .models
        .remove(0);
        // Variables unique to this test (model `envtest`), so parallel tests are unaffected.
        std::env::set_var("RELAX_ENVTEST_PIPELINE", "cpu");
        std::env::set_var("RELAX_ENVTEST_TARGET", "{\"mcpu\": \"znver4\"}");
        std::env::set_var("RELAX_ENVTEST_OPT_LEVEL", "1");
        model.apply_env_overrides().unwrap();
        assert_eq!(model.options.pipeline, Pipeline::Cpu);
        assert_eq!(model.options.opt_level, 1);
        assert_eq!(model.options.target["mcpu"], "znver4");
        std::env::set_var("RELAX_ENVTEST_OPT_LEVEL", "9");
        let error = model.apply_env_overrides().unwrap_err();
        assert_eq!(
            error.to_string(),
            "environment: `RELAX_ENVTEST_OPT_LEVEL`: `9` is not an opt level; use 0, 1, 2 or 3"
        );
        std::env::remove_var("RELAX_ENVTEST_OPT_LEVEL");
        std::env::set_var("RELAX_ENVTEST_TARGET", "skylake");
        let error = model.apply_env_overrides().unwrap_err();
        assert!(
            error
                .to_string()
                .contains("`RELAX_ENVTEST_TARGET`: `skylake` is not a JSON object"),
            "{error}"
        );
    }

    #[test]
    fn sources_must_be_python_or_onnx() {
        let error = parse_manifest(
            "[package.metadata.relax.models.m]\nsource = \"tests/golden/pair.rs\"\n",
        )
        .unwrap_err();
        assert!(
            error.to_string().contains("expected a Python file (.py)"),
            "{error}"
        );
    }

    #[test]
    fn onnx_weights_take_embed_or_external() {
        let onnx = "source = \"../examples/onnx-classifier/models/digits.onnx\"\n";
        let parse_weights = |weights: &str| {
            parse_manifest(&format!(
                "[package.metadata.relax.models.m]\n{onnx}weights = \"{weights}\"\n"
            ))
            .map(|metadata| metadata.models[0].weights.clone())
        };
        assert_eq!(parse_weights("embed").unwrap(), Weights::Embed);
        assert_eq!(parse_weights("external").unwrap(), Weights::External);
        let error = parse_weights("model.safetensors").unwrap_err();
        assert!(
            error
                .to_string()
                .contains("`model.safetensors`: for an ONNX model, weights is \"embed\""),
            "{error}"
        );
    }

    #[test]
    fn edit_distance_counts_single_edits() {
        assert_eq!(edit_distance("input", "inputs"), 1);
        assert_eq!(edit_distance("sorce", "source"), 1);
        assert_eq!(edit_distance("abc", "abc"), 0);
    }
}
