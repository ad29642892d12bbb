//! `cargo relax add NAME PATH`: inspects a model file and writes its manifest entry, the
//! way `cargo add` writes a dependency (the rest of the manifest, comments and
//! formatting included, stays as it was).

use std::path::{Component, Path, PathBuf};

use relax_build::tooling::{self, Dim, Function, Model};
use relax_build::Config;
use toml_edit::{DocumentMut, InlineTable, Item, Table, Value};

/// What `cargo relax add` was asked for.
pub struct AddRequest<'a> {
    pub manifest_dir: &'a Path,
    pub name: &'a str,
    pub source: &'a Path,
    pub entry: Option<&'a str>,
    /// The weights file (nn modules with parameters).
    pub weights: Option<&'a Path>,
    /// `METHOD.ARG=SPEC` pairs (nn modules need them).
    pub inputs: &'a [String],
}

/// Inspects the model, writes its entry into the package's Cargo.toml, and returns what
/// to print: the generated methods and the steps left.
pub fn add(config: &Config, request: &AddRequest<'_>) -> Result<Vec<String>, String> {
    let manifest_path = request.manifest_dir.join("Cargo.toml");
    let text = std::fs::read_to_string(&manifest_path)
        .map_err(|error| format!("reading {}: {error}", manifest_path.display()))?;
    let mut document: DocumentMut = text
        .parse()
        .map_err(|error| format!("{} is not valid TOML: {error}", manifest_path.display()))?;
    if models_table(&mut document)?.contains_key(request.name) {
        return Err(format!(
            "{} already declares a model `{}` ([package.metadata.relax.models.{}]); pick another name or edit it",
            manifest_path.display(),
            request.name,
            request.name
        ));
    }
    let source = relative_source(request.manifest_dir, request.source)?;
    let is_python = source.ends_with(".py");
    if is_python && request.entry.is_none() {
        return Err(format!(
            "{source} is a Python source: pass --entry ATTRIBUTE, the nn.Module class, IRModule or \
             function in it to compile"
        ));
    }
    let mut entry = Table::new();
    entry.insert("source", toml_edit::value(source.clone()));
    if let Some(attribute) = request.entry {
        entry.insert("entry", toml_edit::value(attribute));
    }
    if let Some(weights) = request.weights {
        entry.insert(
            "weights",
            toml_edit::value(relative_source(request.manifest_dir, weights)?),
        );
    }
    let given = parse_inputs(request.inputs)?;
    if !given.is_empty() {
        entry.insert("inputs", Item::Table(inputs_table(&given)));
    }
    // The entry as relax-build reads it, inspected by the driver (TVM imports the model).
    let model = Model::from_entry(request.name, request.manifest_dir, &entry.to_string())
        .map_err(|error| error.to_string())?;
    let functions = tooling::inspect(config, &model).map_err(|error| {
        let message = error.to_string();
        if is_python && given.is_empty() && message.contains(".inputs") {
            format!("{message}\n(with `cargo relax add`, give each input as --input METHOD.ARGUMENT=SPEC, e.g. --input 'forward.x=float32[batch, 64]')")
        } else {
            message
        }
    })?;
    if given.is_empty() {
        let found = found_inputs(&functions);
        if !found.is_empty() {
            entry.insert("inputs", Item::Table(inputs_table(&found)));
        }
    }
    models_table(&mut document)?.insert(request.name, Item::Table(entry));
    write_atomically(&manifest_path, &document.to_string())?;

    let mut report = vec![format!(
        "added [package.metadata.relax.models.{}] to {}",
        request.name,
        manifest_path.display()
    )];
    report.push(format!(
        "relax_runtime::include_model!(\"{}\") declares, on `{}::Model`:",
        request.name, request.name
    ));
    for summary in
        tooling::method_summaries(request.name, &functions).map_err(|error| error.to_string())?
    {
        report.push(format!("    {summary}"));
    }
    report.extend(missing_steps(&document, request.manifest_dir));
    Ok(report)
}

/// `[package.metadata.relax.models]`, made (as implicit tables) when missing.
fn models_table(document: &mut DocumentMut) -> Result<&mut Table, String> {
    let package = document
        .get_mut("package")
        .and_then(Item::as_table_mut)
        .ok_or("the manifest has no [package] table (a workspace root? use -p PACKAGE)")?;
    let mut table = package;
    for key in ["metadata", "relax", "models"] {
        let item = table.entry(key).or_insert_with(|| {
            let mut implicit = Table::new();
            implicit.set_implicit(true);
            Item::Table(implicit)
        });
        table = item
            .as_table_mut()
            .ok_or_else(|| format!("`{key}` in the manifest is not a table"))?;
    }
    Ok(table)
}

/// The source path as the manifest writes it: relative to the package, `/`-separated.
fn relative_source(manifest_dir: &Path, source: &Path) -> Result<String, String> {
    let absolute =
        std::fs::canonicalize(source).map_err(|error| format!("{}: {error}", source.display()))?;
    if !absolute.is_file() {
        return Err(format!("{} is not a file", source.display()));
    }
    let base = std::fs::canonicalize(manifest_dir)
        .map_err(|error| format!("{}: {error}", manifest_dir.display()))?;
    let relative = relative_path(&base, &absolute);
    let parts: Vec<String> = relative
        .components()
        .map(|component| component.as_os_str().to_string_lossy().into_owned())
        .collect();
    Ok(parts.join("/"))
}

/// `path` relative to `base` (both absolute), with `..` where it leaves `base`.
fn relative_path(base: &Path, path: &Path) -> PathBuf {
    let base: Vec<Component<'_>> = base.components().collect();
    let path: Vec<Component<'_>> = path.components().collect();
    let common = base.iter().zip(&path).take_while(|(a, b)| a == b).count();
    let mut relative = PathBuf::new();
    for _ in common..base.len() {
        relative.push("..");
    }
    for component in &path[common..] {
        relative.push(component.as_os_str());
    }
    relative
}

/// (method, [(argument, spec)]) in the order given.
type Inputs = Vec<(String, Vec<(String, String)>)>;

/// `forward.x=float32[batch, 64]` pairs, grouped by method.
fn parse_inputs(pairs: &[String]) -> Result<Inputs, String> {
    let mut inputs: Inputs = Vec::new();
    for pair in pairs {
        let (key, spec) = pair.split_once('=').ok_or_else(|| {
            format!(
                "--input {pair}: expected METHOD.ARGUMENT=SPEC, e.g. forward.x=float32[batch, 64]"
            )
        })?;
        let (method, argument) = key.split_once('.').ok_or_else(|| {
            format!("--input {pair}: expected METHOD.ARGUMENT before `=`, e.g. forward.x")
        })?;
        tooling::parse_tensor_spec(spec.trim())
            .map_err(|error| format!("--input {pair}: {error}"))?;
        let position = match inputs.iter().position(|(name, _)| name == method) {
            Some(position) => position,
            None => {
                inputs.push((method.to_string(), Vec::new()));
                inputs.len() - 1
            }
        };
        inputs[position]
            .1
            .push((argument.to_string(), spec.trim().to_string()));
    }
    Ok(inputs)
}

/// The inputs the inspection found, as specs (symbolic dims by name).
fn found_inputs(functions: &[Function]) -> Inputs {
    functions
        .iter()
        .filter(|function| !function.inputs.is_empty())
        .map(|function| {
            let arguments = function
                .inputs
                .iter()
                .map(|input| {
                    let dims: Vec<String> = input
                        .shape
                        .iter()
                        .map(|dim| match dim {
                            Dim::Static(size) => size.to_string(),
                            Dim::Symbolic(name) => name.clone(),
                        })
                        .collect();
                    (
                        input.name.clone(),
                        format!("{}[{}]", input.dtype, dims.join(", ")),
                    )
                })
                .collect();
            (function.name.clone(), arguments)
        })
        .collect()
}

/// `inputs.<method> = { arg = "spec", ... }` as a dotted table of inline tables.
fn inputs_table(inputs: &Inputs) -> Table {
    let mut table = Table::new();
    table.set_dotted(true);
    for (method, arguments) in inputs {
        let mut inline = InlineTable::new();
        for (argument, spec) in arguments {
            inline.insert(argument, Value::from(spec.as_str()));
        }
        table.insert(method, toml_edit::value(inline));
    }
    table
}

/// What the package still lacks to build the model: the dependencies and build.rs.
fn missing_steps(document: &DocumentMut, manifest_dir: &Path) -> Vec<String> {
    let has = |table: &str, crate_name: &str| {
        document
            .get(table)
            .and_then(Item::as_table_like)
            .is_some_and(|dependencies| dependencies.contains_key(crate_name))
    };
    let mut steps = Vec::new();
    if !has("build-dependencies", "relax-build") {
        steps.push("next: cargo add --build relax-build".to_string());
    }
    if !has("dependencies", "relax-runtime") {
        steps.push("next: cargo add relax-runtime".to_string());
    }
    if !manifest_dir.join("build.rs").is_file() {
        steps
            .push("next: write build.rs: fn main() { relax_build::compile_models(); }".to_string());
    }
    steps
}

/// Writes `path` through a temporary file in the same folder, renamed over it.
fn write_atomically(path: &Path, text: &str) -> Result<(), String> {
    let temporary = path.with_extension(format!("toml.{}.tmp", std::process::id()));
    std::fs::write(&temporary, text)
        .map_err(|error| format!("writing {}: {error}", temporary.display()))?;
    std::fs::rename(&temporary, path).map_err(|error| {
        let _ = std::fs::remove_file(&temporary);
        format!("replacing {}: {error}", path.display())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_written_relative_to_the_package() {
        let base = Path::new("/work/app");
        assert_eq!(
            relative_path(base, Path::new("/work/app/models/a.onnx")),
            PathBuf::from("models/a.onnx")
        );
        assert_eq!(
            relative_path(base, Path::new("/work/shared/b.onnx")),
            PathBuf::from("../shared/b.onnx")
        );
    }

    #[test]
    fn inputs_are_grouped_by_method_and_checked() {
        let inputs = parse_inputs(&[
            "forward.x=float32[batch, 64]".to_string(),
            "forward.mask=int64[batch]".to_string(),
        ])
        .unwrap();
        assert_eq!(inputs.len(), 1);
        assert_eq!(inputs[0].1.len(), 2);
        assert_eq!(
            inputs_table(&inputs).to_string(),
            "forward = { x = \"float32[batch, 64]\", mask = \"int64[batch]\" }\n"
        );
        assert!(parse_inputs(&["x=float32[4]".to_string()])
            .unwrap_err()
            .contains("METHOD.ARGUMENT"));
        assert!(parse_inputs(&["forward.x=[4]".to_string()])
            .unwrap_err()
            .contains("dtype is missing"));
    }

    #[test]
    fn the_models_table_is_added_next_to_what_the_manifest_has() {
        let mut document: DocumentMut = "[package]\nname = \"app\" # kept\n\n[dependencies]\n"
            .parse()
            .unwrap();
        let models = models_table(&mut document).unwrap();
        let mut entry = Table::new();
        entry.insert("source", toml_edit::value("m.onnx"));
        models.insert("m", Item::Table(entry));
        let text = document.to_string();
        assert!(text.contains("name = \"app\" # kept"), "{text}");
        assert!(
            text.contains("[package.metadata.relax.models.m]\nsource = \"m.onnx\""),
            "{text}"
        );
    }
}
