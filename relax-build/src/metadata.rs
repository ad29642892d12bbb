//! `[package.metadata.relax]` in Cargo.toml: parsing and validation.
//!
//! ```toml
//! [package.metadata.relax.models.digits]
//! source = "models/digits.py"            # relative to the package root
//! entry = "DigitsMLP"                     # attribute in the source
//! weights = "models/digits.safetensors"   # optional: parameter values by name
//! pipeline = "zero"                       # optional: "zero" (default) or "default"
//! include = ["models/layers"]             # optional: files/folders the source imports
//! [package.metadata.relax.models.digits.inputs.forward]
//! x = "float32[batch, 64]"                # export spec per method, in argument order
//! ```

use std::path::{Path, PathBuf};

use serde::Deserialize;

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

/// One model, validated, with paths made absolute.
#[derive(Debug, Clone, PartialEq)]
pub struct Model {
    pub name: String,
    /// The package root the relative paths below were given against.
    pub manifest_dir: PathBuf,
    pub source: PathBuf,
    /// Extra files and folders the source imports (walked recursively).
    pub include: Vec<PathBuf>,
    pub entry: String,
    pub weights: Option<PathBuf>,
    pub pipeline: Pipeline,
    /// Method name -> arguments in order; empty for TVMScript sources.
    pub inputs: Vec<MethodInputs>,
}

impl Model {
    /// The manifest key path of one of this model's keys.
    pub fn key(&self, key: &str) -> String {
        format!("{ROOT_KEY}.models.{}.{key}", self.name)
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
    /// CPU backend pipeline `relax.get_default_pipeline(target)`.
    #[default]
    Zero,
    /// `tvm.compile`'s `"default"` pipeline alone: lowering only, no folding or fusion.
    Default,
}

impl Pipeline {
    pub fn as_str(self) -> &'static str {
        match self {
            Pipeline::Zero => "zero",
            Pipeline::Default => "default",
        }
    }
}

/// Dtypes a model input may have.
pub const DTYPES: &[&str] = &[
    "float16", "float32", "float64", "bfloat16", "int8", "int16", "int32", "int64", "uint8",
    "uint16", "uint32", "uint64", "bool",
];

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRelax {
    #[serde(default)]
    models: toml::Table,
    python: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawModel {
    source: Option<String>,
    entry: Option<String>,
    weights: Option<String>,
    #[serde(default)]
    pipeline: Pipeline,
    #[serde(default)]
    include: Vec<String>,
    #[serde(default)]
    inputs: toml::Table,
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
    manifest_dir: &Path,
    model_key: &str,
    key_error: &impl Fn(String, String) -> Error,
) -> Result<Model> {
    let key = |suffix: &str| format!("{model_key}.{suffix}");
    let source = raw.source.ok_or_else(|| {
        key_error(
            key("source"),
            "missing: set it to the model's source file, relative to the package root \
             (e.g. source = \"models/mlp.py\")"
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
    if source_path.extension().and_then(|ext| ext.to_str()) != Some("py") {
        return Err(key_error(
            key("source"),
            format!(
                "`{source}` is not a supported source: expected a Python file (.py) defining a \
                 relax.frontend.nn module, a TVMScript IRModule, or a function returning an IRModule"
            ),
        ));
    }
    let entry = raw.entry.ok_or_else(|| {
        key_error(
            key("entry"),
            format!("missing: name the attribute of `{source}` to compile (a relax.frontend.nn.Module subclass or a TVMScript IRModule)"),
        )
    })?;
    let weights = match raw.weights {
        None => None,
        Some(weights) => {
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
            Some(path)
        }
    };
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
        include,
        entry,
        weights,
        pipeline: raw.pipeline,
        inputs,
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
    fn edit_distance_counts_single_edits() {
        assert_eq!(edit_distance("input", "inputs"), 1);
        assert_eq!(edit_distance("sorce", "source"), 1);
        assert_eq!(edit_distance("abc", "abc"), 0);
    }
}
