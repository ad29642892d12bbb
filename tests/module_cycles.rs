//! No import cycles among modules, at any level, in any crate of the repository (the
//! examples and fixture apps included) nor in relax-build's Python driver: the modules
//! of each folder (the top-level modules of a crate, the files inside `src/kernels/`,
//! the driver's `onnx_ops/` package...) must form a tree of references, so that a small
//! piece two of them need lives in a leaf both import.
//!
//! References are `crate::`, `super::` and `self::` paths in Rust (use trees expanded,
//! inline modules followed) and relative or `relax_driver.` imports in Python, inside
//! functions too.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module's path from its crate's (or package folder's) root.
type Module = Vec<String>;

/// The `.rs` or `.py` files under `dir`, skipping build output.
fn files(dir: &Path, extension: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.expect("a directory entry").path();
            let name = path.file_name().unwrap_or_default().to_string_lossy();
            if path.is_dir() && name != "target" && name != "__pycache__" {
                pending.push(path);
            } else if path.extension().is_some_and(|found| found == extension) {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}

/// `src/a/b.rs` is `[a, b]`, `src/a/mod.rs` (or `pkg/__init__.py`) `[a]`, `lib.rs` and
/// `main.rs` the root.
fn module_of(root: &Path, file: &Path) -> Module {
    let relative = file.strip_prefix(root).expect("a file under its root");
    let mut parts: Module = relative
        .with_extension("")
        .iter()
        .map(|part| part.to_string_lossy().into_owned())
        .collect();
    let last = parts.last().map(String::as_str);
    if matches!(last, Some("mod" | "__init__"))
        || (parts.len() == 1 && matches!(last, Some("lib" | "main")))
    {
        parts.pop();
    }
    parts
}

/// Rust source with comments, string and char literals blanked out.
fn strip_rust(source: &str) -> String {
    let chars: Vec<char> = source.chars().collect();
    let mut out = String::with_capacity(source.len());
    let mut index = 0;
    while index < chars.len() {
        let rest = &chars[index..];
        if rest.starts_with(&['/', '/']) {
            while index < chars.len() && chars[index] != '\n' {
                index += 1;
            }
        } else if rest.starts_with(&['/', '*']) {
            let mut depth = 0;
            while index < chars.len() {
                if chars[index..].starts_with(&['/', '*']) {
                    depth += 1;
                    index += 2;
                } else if chars[index..].starts_with(&['*', '/']) {
                    depth -= 1;
                    index += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    index += 1;
                }
            }
        } else if rest[0] == 'r'
            && matches!(rest.get(1), Some('"' | '#'))
            && (index == 0 || !is_ident(chars[index - 1]))
        {
            // A raw string: r"...", r#"..."#.
            let hashes = rest[1..].iter().take_while(|&&c| c == '#').count();
            if rest.get(1 + hashes) != Some(&'"') {
                out.push(rest[0]);
                index += 1;
                continue;
            }
            index += 2 + hashes;
            let closing: Vec<char> = std::iter::once('"')
                .chain(std::iter::repeat_n('#', hashes))
                .collect();
            while index < chars.len() && !chars[index..].starts_with(&closing) {
                index += 1;
            }
            index += closing.len();
            out.push_str("\"\"");
        } else if rest[0] == '"' {
            index += 1;
            while index < chars.len() && chars[index] != '"' {
                index += if chars[index] == '\\' { 2 } else { 1 };
            }
            index += 1;
            out.push_str("\"\"");
        } else if rest[0] == '\'' && (rest.get(2) == Some(&'\'') || rest.get(1) == Some(&'\\')) {
            // A char literal ('a', '\n', '\u{..}'), not a lifetime.
            index += 1;
            while index < chars.len() && chars[index] != '\'' {
                index += if chars[index] == '\\' { 2 } else { 1 };
            }
            index += 1;
        } else {
            out.push(rest[0]);
            index += 1;
        }
    }
    out
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// Parses a path or use tree at the start of `text` (`a::b`, `a::{b, c::d}`) into paths.
fn parse_tree(text: &[char]) -> Vec<Vec<String>> {
    let mut segments = Vec::new();
    let mut index = 0;
    loop {
        while text.get(index).is_some_and(|c| c.is_whitespace()) {
            index += 1;
        }
        if text.get(index) == Some(&'{') {
            // Split the braces' contents at top-level commas.
            let (mut depth, start) = (0, index + 1);
            let mut parts = Vec::new();
            let mut part_start = start;
            while index < text.len() {
                match text[index] {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            parts.push(&text[part_start..index]);
                            break;
                        }
                    }
                    ',' if depth == 1 => {
                        parts.push(&text[part_start..index]);
                        part_start = index + 1;
                    }
                    _ => {}
                }
                index += 1;
            }
            return parts
                .into_iter()
                .flat_map(parse_tree)
                .map(|tail| segments.iter().cloned().chain(tail).collect())
                .collect();
        }
        let start = index;
        while text.get(index).is_some_and(|&c| is_ident(c)) {
            index += 1;
        }
        if index == start {
            break;
        }
        segments.push(text[start..index].iter().collect::<String>());
        if text.get(index..index + 2) == Some(&[':', ':']) {
            index += 2;
        } else {
            break;
        }
    }
    if segments.is_empty() {
        Vec::new()
    } else {
        vec![segments]
    }
}

/// The modules a Rust file refers to, resolved to paths from its crate's root.
fn rust_references(module: &Module, source: &str) -> Vec<Module> {
    let chars: Vec<char> = strip_rust(source).chars().collect();
    let mut references = Vec::new();
    // Inline modules (`mod tests { .. }`) open at a brace depth.
    let (mut depth, mut inline): (usize, Vec<(String, usize)>) = (0, Vec::new());
    let mut index = 0;
    while index < chars.len() {
        let c = chars[index];
        let at_word = index == 0 || !(is_ident(chars[index - 1]) || chars[index - 1] == ':');
        if c == '{' {
            depth += 1;
        } else if c == '}' {
            depth = depth.saturating_sub(1);
            if inline.last().is_some_and(|(_, open)| *open == depth) {
                inline.pop();
            }
        } else if at_word && chars[index..].starts_with(&['m', 'o', 'd', ' ']) {
            let rest: String = chars[index + 4..chars.len().min(index + 80)]
                .iter()
                .collect();
            let name: String = rest
                .trim_start()
                .chars()
                .take_while(|&c| is_ident(c))
                .collect();
            let after = rest.trim_start()[name.len()..].trim_start();
            if after.starts_with('{') {
                inline.push((name, depth));
            }
        } else if at_word && is_ident(c) {
            for tree in parse_tree(&chars[index..]) {
                let mut base: Module = module.clone();
                base.extend(inline.iter().map(|(name, _)| name.clone()));
                let mut segments = tree.into_iter().peekable();
                match segments.peek().map(String::as_str) {
                    Some("crate") => {
                        segments.next();
                        base.clear();
                    }
                    Some("self") => {
                        segments.next();
                    }
                    Some("super") => {
                        while segments.peek().map(String::as_str) == Some("super") {
                            segments.next();
                            base.pop();
                        }
                    }
                    _ => continue,
                }
                base.extend(segments.filter(|segment| segment != "self" && segment != "*"));
                references.push(base);
            }
            while index < chars.len() && (is_ident(chars[index]) || chars[index] == ':') {
                index += 1;
            }
            continue;
        }
        index += 1;
    }
    references
}

/// The modules a Python file refers to, resolved to paths from the driver's folder.
fn python_references(module: &Module, is_package: bool, source: &str) -> Vec<Module> {
    // Join parenthesized import lists onto one line.
    let mut lines = Vec::new();
    let mut pending = String::new();
    for line in source.lines() {
        let line = line.split('#').next().unwrap_or_default().trim();
        if !pending.is_empty() {
            pending.push(' ');
            pending.push_str(line);
            if line.contains(')') {
                lines.push(std::mem::take(&mut pending).replace(['(', ')'], " "));
            }
        } else if line.starts_with("from ") && line.contains('(') && !line.contains(')') {
            pending = line.to_string();
        } else {
            lines.push(line.replace(['(', ')'], " "));
        }
    }
    let package: Module = if is_package {
        module.clone()
    } else {
        module[..module.len().saturating_sub(1)].to_vec()
    };
    let mut references = Vec::new();
    for line in lines {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["from", from, "import", names @ ..] => {
                let dots = from.chars().take_while(|&c| c == '.').count();
                let mut base = if dots > 0 {
                    package[..package.len().saturating_sub(dots - 1)].to_vec()
                } else if from.starts_with("relax_driver") {
                    Vec::new()
                } else {
                    continue;
                };
                base.extend(
                    from[dots..]
                        .split('.')
                        .filter(|part| !part.is_empty())
                        .map(String::from),
                );
                for name in names.join(" ").split(',') {
                    let name = name.split_whitespace().next().unwrap_or_default();
                    if !name.is_empty() && name != "*" {
                        references.push(base.iter().cloned().chain([name.to_string()]).collect());
                    }
                }
                references.push(base);
            }
            ["import", names @ ..] => {
                for name in names.join(" ").split(',') {
                    let name = name.split_whitespace().next().unwrap_or_default();
                    if name.starts_with("relax_driver") {
                        references.push(name.split('.').map(String::from).collect());
                    }
                }
            }
            _ => {}
        }
    }
    references
}

/// The cycles among sibling modules, one line per strongly connected set of siblings.
fn cycles(modules: &BTreeSet<Module>, references: &[(Module, Module)]) -> Vec<String> {
    // parent -> child -> children it refers to
    let mut graphs: BTreeMap<Module, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for (from, to) in references {
        let common = from.iter().zip(to).take_while(|(a, b)| a == b).count();
        if common >= from.len() || common >= to.len() {
            continue;
        }
        let parent = from[..common].to_vec();
        let target: Module = to[..=common].to_vec();
        if !modules.contains(&target) {
            continue; // an item of the parent module, not a sibling
        }
        graphs
            .entry(parent)
            .or_default()
            .entry(from[common].clone())
            .or_default()
            .insert(to[common].clone());
    }
    let mut found = Vec::new();
    for (parent, graph) in &graphs {
        let reaches = |start: &String| {
            let mut seen = BTreeSet::new();
            let mut stack = vec![start.clone()];
            while let Some(node) = stack.pop() {
                for next in graph.get(&node).into_iter().flatten() {
                    if seen.insert(next.clone()) {
                        stack.push(next.clone());
                    }
                }
            }
            seen
        };
        let mut reported = BTreeSet::new();
        for node in graph.keys() {
            if reported.contains(node) || !reaches(node).contains(node) {
                continue;
            }
            let set: BTreeSet<String> = reaches(node)
                .into_iter()
                .filter(|other| reaches(other).contains(node))
                .collect();
            reported.extend(set.iter().cloned());
            let edges: Vec<String> = set
                .iter()
                .flat_map(|a| {
                    graph[a]
                        .iter()
                        .filter(|b| set.contains(*b))
                        .map(move |b| format!("{a} -> {b}"))
                })
                .collect();
            found.push(format!(
                "in `{}`: {}",
                if parent.is_empty() {
                    "the root".to_string()
                } else {
                    parent.join("::")
                },
                edges.join(", ")
            ));
        }
    }
    found
}

/// The cycles of the Rust crate whose sources are in `src`.
fn rust_cycles(src: &Path) -> Vec<String> {
    let files = files(src, "rs");
    let modules: BTreeSet<Module> = files.iter().map(|file| module_of(src, file)).collect();
    let references: Vec<(Module, Module)> = files
        .iter()
        .flat_map(|file| {
            let module = module_of(src, file);
            let source = std::fs::read_to_string(file).expect("a readable source file");
            rust_references(&module, &source)
                .into_iter()
                .map(move |target| (module.clone(), target))
        })
        .collect();
    cycles(&modules, &references)
}

/// The cycles of the Python packages under `root`.
fn python_cycles(root: &Path) -> Vec<String> {
    let files = files(root, "py");
    let modules: BTreeSet<Module> = files.iter().map(|file| module_of(root, file)).collect();
    let references: Vec<(Module, Module)> = files
        .iter()
        .flat_map(|file| {
            let module = module_of(root, file);
            let is_package = file.file_name().is_some_and(|name| name == "__init__.py");
            let source = std::fs::read_to_string(file).expect("a readable source file");
            python_references(&module, is_package, &source)
                .into_iter()
                .map(move |target| (module.clone(), target))
        })
        .collect();
    cycles(&modules, &references)
}

fn repository() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn no_crate_of_the_repository_has_a_module_cycle() {
    let root = repository();
    let mut crates: Vec<PathBuf> = Vec::new();
    for parent in [root.clone(), root.join("examples"), root.join("fixtures")] {
        for entry in std::fs::read_dir(&parent).expect("a folder of crates") {
            let dir = entry.expect("a directory entry").path();
            if dir.join("Cargo.toml").is_file() && dir.join("src").is_dir() {
                crates.push(dir.join("src"));
            }
        }
    }
    for crate_dir in [
        "relax-kernels",
        "relax-perf-map",
        "relax-runtime",
        "relax-build",
        "cargo-relax",
    ] {
        assert!(
            crates.contains(&root.join(crate_dir).join("src")),
            "{crate_dir} was not found among {crates:?}"
        );
    }
    let mut found = Vec::new();
    for src in &crates {
        found.extend(
            rust_cycles(src)
                .into_iter()
                .map(|cycle| format!("{}: {cycle}", src.display())),
        );
    }
    let driver = root.join("relax-build/driver");
    found.extend(
        python_cycles(&driver)
            .into_iter()
            .map(|cycle| format!("{}: {cycle}", driver.display())),
    );
    assert!(found.is_empty(), "module cycles:\n{}", found.join("\n"));
}

/// Writes `files` (path, contents) under a new temporary folder.
fn tree(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("a temporary folder");
    for (path, contents) in files {
        let path = dir.path().join(path);
        std::fs::create_dir_all(path.parent().expect("a parent")).expect("a folder");
        std::fs::write(path, contents).expect("a file");
    }
    dir
}

#[test]
fn the_check_finds_cycles_at_every_level_and_ignores_items_and_comments() {
    let crate_dir = tree(&[
        ("lib.rs", "mod a; mod b; mod k;"),
        ("a.rs", "use crate::b::thing;\npub struct A;"),
        ("b.rs", "pub fn thing() { let _ = crate::a::A; }"),
        ("k/mod.rs", "mod conv; mod blocked; mod leaf; pub struct Shared;"),
        ("k/conv.rs", "use super::{blocked::run, leaf};\nuse super::Shared;"),
        (
            "k/blocked.rs",
            "// use super::conv::x;\nconst S: &str = \"super::conv::x\";\nmod tests { use super::super::conv::helper; }",
        ),
        ("k/leaf.rs", "use crate::k::Shared;"),
    ]);
    let found = rust_cycles(crate_dir.path());
    assert_eq!(found.len(), 2, "{found:#?}");
    assert!(
        found[0].contains("the root") && found[0].contains("a -> b"),
        "{found:#?}"
    );
    assert!(
        found[1].contains("in `k`") && found[1].contains("blocked -> conv"),
        "{found:#?}"
    );

    let package = tree(&[
        ("relax_driver/__init__.py", ""),
        ("relax_driver/build.py", "from .offload import run\n"),
        (
            "relax_driver/offload.py",
            "def f():\n    from . import build\n",
        ),
        (
            "relax_driver/ops/__init__.py",
            "from .common import (\n    x,\n    y)\n",
        ),
        (
            "relax_driver/ops/common.py",
            "from relax_driver.files import read  # files is a leaf\n",
        ),
        ("relax_driver/files.py", ""),
    ]);
    let found = python_cycles(package.path());
    assert_eq!(found.len(), 1, "{found:#?}");
    assert!(
        found[0].contains("build -> offload") && found[0].contains("offload -> build"),
        "{found:#?}"
    );
}
