//! The shape of the source, checked on every run (no cluster needed): no
//! crate's modules import each other in a circle, and no source file grows
//! past what one reader holds at once.
//!
//! A circle is read at the level of a crate's top-level modules (`work`,
//! `controller`, `tools`, …): `a` imports `b` when a non-test line of `a`'s
//! files names `crate::b`. Doc comments and test modules do not count.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The crates whose modules are checked.
const CRATES: [&str; 6] = ["api", "operator", "mcp-frontend", "cli", "miner", "telemetry"];
/// Longest source file, in lines (the style's "~500", with a little slack).
const MAX_LINES: usize = 520;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("the workspace")
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(dir) = todo.pop() {
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("reading {}: {e}", dir.display())) {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                todo.push(path);
            } else if path.extension().is_some_and(|ext| ext == "rs") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// The top-level module a file of `src` belongs to (`None`: the crate root or a binary).
fn module_of(src: &Path, file: &Path) -> Option<String> {
    let relative = file.strip_prefix(src).ok()?;
    let first = relative.components().next()?.as_os_str().to_str()?;
    let module = first.strip_suffix(".rs").unwrap_or(first);
    // `testing` is compiled for tests only (fixtures), as test modules are.
    (!matches!(module, "lib" | "main" | "bin" | "testing")).then(|| module.to_string())
}

/// The code of a file that is not a test: up to its `#[cfg(test)] mod tests`
/// block, without comments; nothing for a file of tests.
fn code_of(file: &Path) -> String {
    let name = file.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    if name == "tests.rs"
        || name.ends_with("_tests.rs")
        || file.components().any(|c| c.as_os_str() == "tests")
    {
        return String::new();
    }
    let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("reading {}: {e}", file.display()));
    let mut code = String::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        if line.trim() == "#[cfg(test)]"
            && lines.peek().is_some_and(|next| next.trim_start().starts_with("mod tests"))
        {
            break;
        }
        code.push_str(line.split("//").next().unwrap_or_default());
        code.push('\n');
    }
    code
}

/// Which top-level modules each module of `krate` imports.
fn imports(krate: &str) -> BTreeMap<String, BTreeSet<String>> {
    let src = workspace().join(krate).join("src");
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in rust_files(&src) {
        let Some(module) = module_of(&src, &file) else { continue };
        let code = code_of(&file);
        let named = code.match_indices("crate::").filter_map(|(at, _)| {
            let rest = &code[at + "crate::".len()..];
            let end = rest.find(|c: char| !(c.is_alphanumeric() || c == '_')).unwrap_or(rest.len());
            (end > 0).then(|| rest[..end].to_string())
        });
        let entry = graph.entry(module.clone()).or_default();
        entry.extend(named.filter(|other| *other != module && other != "testing"));
    }
    graph
}

/// Every circle of `graph` (its strongly connected parts of more than one module).
fn circles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<BTreeSet<String>> {
    // Reachability by search from each module: the graphs are small.
    let reach = |from: &str| {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.to_string()];
        while let Some(module) = todo.pop() {
            for next in graph.get(&module).into_iter().flatten() {
                if graph.contains_key(next) && seen.insert(next.clone()) {
                    todo.push(next.clone());
                }
            }
        }
        seen
    };
    let reaches: BTreeMap<&String, BTreeSet<String>> = graph.keys().map(|m| (m, reach(m))).collect();
    let mut found: Vec<BTreeSet<String>> = Vec::new();
    for (module, reached) in &reaches {
        let circle: BTreeSet<String> = reached
            .iter()
            .filter(|other| reaches.get(other).is_some_and(|back| back.contains(*module)))
            .cloned()
            .collect();
        if !circle.is_empty() && !found.contains(&circle) {
            found.push(circle);
        }
    }
    found
}

#[test]
fn no_crate_has_an_import_circle() {
    let mut all = Vec::new();
    let mut modules = 0;
    for krate in CRATES {
        let graph = imports(krate);
        modules += graph.len();
        for circle in circles(&graph) {
            let edges: Vec<String> = circle
                .iter()
                .flat_map(|m| {
                    graph[m].iter().filter(|to| circle.contains(*to)).map(move |to| format!("{m} → {to}"))
                })
                .collect();
            all.push(format!("{krate}: {}", edges.join(", ")));
        }
    }
    assert!(modules > 60, "the crates' modules were found: {modules}");
    assert!(all.is_empty(), "modules importing each other in a circle:\n{}", all.join("\n"));
}

#[test]
fn the_circle_finder_finds_a_circle() {
    let graph: BTreeMap<String, BTreeSet<String>> = [
        ("controller", vec!["kinds"]),
        ("kinds", vec!["tools"]),
        ("tools", vec!["controller", "work"]),
        ("work", vec![]),
    ]
    .into_iter()
    .map(|(m, to)| (m.to_string(), to.into_iter().map(String::from).collect()))
    .collect();
    let found = circles(&graph);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0], ["controller", "kinds", "tools"].into_iter().map(String::from).collect());
}

#[test]
fn no_source_file_is_over_the_limit() {
    let root = workspace();
    let mut over = Vec::new();
    for krate in CRATES.iter().chain(&["tests/cluster-tests", "tests/node-agent", "examples/sum-numbers"]) {
        for file in rust_files(&root.join(krate)) {
            if file.components().any(|c| c.as_os_str() == "target") {
                continue;
            }
            let lines = std::fs::read_to_string(&file).map(|text| text.lines().count()).unwrap_or(0);
            if lines > MAX_LINES {
                over.push(format!("{} ({lines} lines)", file.strip_prefix(&root).unwrap_or(&file).display()));
            }
        }
    }
    assert!(over.is_empty(), "source files over {MAX_LINES} lines:\n{}", over.join("\n"));
}
