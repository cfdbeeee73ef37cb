//! The shape of the code, checked: `crates/proxy/src` is layered folders that import downwards
//! only (the order is [`LAYERS`], written out in `src/lib.rs` and docs/architecture.md), and no
//! crate of the workspace has an import circle between its files. Reads the sources; fails with
//! the import that breaks the rule.
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The folders of `crates/proxy/src`, top to bottom. A folder may import itself and the
/// folders after it, never one before it. The root files (`error`, `outcome`, `headers`) are
/// leaves below every folder: they import no folder.
const LAYERS: [&str; 10] = [
    "server",
    "transport",
    "pipeline",
    "admin",
    "policy",
    "origin",
    "body",
    "caching",
    "net",
    "telemetry",
];
const LEAVES: [&str; 4] = ["error", "outcome", "headers", "interim"];

/// The protocols' homes: folders whose parts sit in different layers ([`PLACED`]).
const PROTOCOLS: [&str; 2] = ["http1", "http2"];

/// A protocol's home: one folder whose parts each sit in the layer of what they do (a part not
/// listed, and the folder's own `mod.rs`, sit in the last one named here for it).
const PLACED: [(&str, &str); 9] = [
    ("http1::server", "transport"),
    ("http1::client", "origin"),
    ("http1::body", "body"),
    ("http1::upload", "body"),
    ("http1::numbers", "net"),
    ("http1", "net"),
    ("http2::server::stream", "body"),
    ("http2::server", "transport"),
    ("http2", "net"),
];

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The module a source file is, as a path (`["transport", "h1", "write"]`; `mod.rs` and
/// `lib.rs`/`main.rs` name their folder).
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

/// Whether `path` names a module of the crate in `src`.
fn is_module(src: &Path, path: &[String]) -> bool {
    let base = path.iter().fold(src.to_path_buf(), |p, s| p.join(s));
    base.with_extension("rs").exists() || base.join("mod.rs").exists()
}

/// Module (`http1::server::write`) → the modules of the same crate it names outside its unit
/// tests, each the longest module path a `crate::` or `super::` path starts with.
fn imports(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = vec![];
    let mut dirs = vec![src.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                files.push(p);
            }
        }
    }
    let mut graph = BTreeMap::new();
    for f in files {
        let me = module_of(src, &f);
        let text = std::fs::read_to_string(&f).unwrap();
        // Unit tests may reach anywhere.
        let code = text.split("#[cfg(test)]").next().unwrap_or("");
        let mut deps = BTreeSet::new();
        for line in code.lines().map(str::trim).filter(|l| !l.starts_with("//")) {
            for (prefix, base) in [("crate::", vec![]), ("super::", parent(&me))] {
                for (i, _) in line.match_indices(prefix) {
                    // Not the tail of a longer path (`super::super::`, `rampart_x::crate::`).
                    if line[..i].ends_with("::")
                        || line[..i].ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
                    {
                        continue;
                    }
                    let rest = &line[i + prefix.len()..];
                    // `crate::{a, b::c}` names each member of the group.
                    let members: Vec<&str> = match rest.strip_prefix('{') {
                        Some(group) => group
                            .split('}')
                            .next()
                            .unwrap_or("")
                            .split(',')
                            .map(str::trim)
                            .collect(),
                        None => vec![rest],
                    };
                    for member in members {
                        let path: Vec<String> = member
                            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
                            .next()
                            .unwrap_or("")
                            .split("::")
                            .filter(|s| !s.is_empty())
                            .map(str::to_owned)
                            .collect();
                        let mut full = base.clone();
                        full.extend(path);
                        while !full.is_empty() && !is_module(src, &full) {
                            full.pop();
                        }
                        if !full.is_empty() && full != me {
                            deps.insert(full.join("::"));
                        }
                    }
                }
            }
        }
        graph.insert(me.join("::"), deps);
    }
    graph.remove("");
    graph
}

/// The module `super` names from `me` (a folder's `mod.rs` is the folder itself, so its
/// `super` is one folder up, like a file's).
fn parent(me: &[String]) -> Vec<String> {
    let mut p = me.to_vec();
    p.pop();
    p
}

/// Panics with the circle's modules if the graph has one.
fn assert_no_circle(crate_name: &str, graph: &BTreeMap<String, BTreeSet<String>>) {
    fn visit<'a>(
        n: &'a str,
        g: &'a BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<&'a str>,
        done: &mut BTreeSet<&'a str>,
        crate_name: &str,
    ) {
        if done.contains(n) {
            return;
        }
        if let Some(i) = path.iter().position(|m| *m == n) {
            panic!(
                "import circle in {crate_name}: {} → {n}",
                path[i..].join(" → ")
            );
        }
        path.push(n);
        for d in g.get(n).into_iter().flatten() {
            visit(d, g, path, done, crate_name);
        }
        path.pop();
        done.insert(n);
    }
    let mut done = BTreeSet::new();
    for n in graph.keys() {
        visit(n, graph, &mut vec![], &mut done, crate_name);
    }
}

/// The layer index of a module: its folder's place in [`LAYERS`] (a protocol's part: the layer
/// [`PLACED`] gives it), the leaves after them all.
fn layer(module: &str) -> usize {
    let placed = PLACED
        .iter()
        .find(|(m, _)| module == *m || module.starts_with(&format!("{m}::")));
    if let Some((_, l)) = placed {
        return LAYERS.iter().position(|x| x == l).unwrap();
    }
    let top = module.split("::").next().unwrap();
    LAYERS.iter().position(|l| *l == top).unwrap_or_else(|| {
        assert!(
            LEAVES.contains(&top),
            "`{top}` is neither a folder of LAYERS nor a root leaf: place it"
        );
        LAYERS.len()
    })
}

#[test]
fn folders_import_downwards_only() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let graph = imports(&src);
    assert!(graph.contains_key("pipeline") && graph.contains_key("caching::writer"));
    let mut wrong = vec![];
    for (module, deps) in &graph {
        let top = module.split("::").next().unwrap();
        for dep in deps {
            let dep_top = dep.split("::").next().unwrap();
            let leaf_to_leaf = LEAVES.contains(&top) && LEAVES.contains(&dep_top);
            // A protocol's part and the folder of its layer may import each other's files
            // (the circle test still holds between files).
            let protocol = PROTOCOLS.contains(&top) || PROTOCOLS.contains(&dep_top);
            let beside = protocol && layer(dep) == layer(module);
            // Inside a protocol's folder its parts keep their layers' order too.
            let apart = dep_top != top || (protocol && !beside);
            if apart && !leaf_to_leaf && !beside && layer(dep) <= layer(module) {
                wrong.push(format!("{module} → {dep}"));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports that run up the layers ({}): {wrong:#?}",
        LAYERS.join(" > ")
    );
    // Every folder is placed, and lib.rs states the same order.
    let lib = std::fs::read_to_string(src.join("lib.rs")).unwrap();
    assert!(lib.contains(&LAYERS.join(" > ")), "lib.rs states the order");
    for e in std::fs::read_dir(&src).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_stem().unwrap().to_string_lossy().into_owned();
        if name != "lib" {
            layer(&name);
        }
    }
}

#[test]
fn no_import_circle_in_any_crate() {
    let mut crates = vec![];
    for e in std::fs::read_dir(workspace().join("crates")).unwrap() {
        let src = e.unwrap().path().join("src");
        if src.is_dir() {
            crates.push(src);
        }
    }
    assert!(crates.len() >= 8, "{crates:?}");
    for src in crates {
        let name = src.parent().unwrap().file_name().unwrap().to_string_lossy();
        assert_no_circle(&name, &imports(&src));
    }
}

#[test]
fn the_dispatcher_names_every_stage() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/pipeline");
    let pipeline = std::fs::read_to_string(dir.join("mod.rs")).unwrap();
    let dispatcher = pipeline.split("#[cfg(test)]").next().unwrap();
    for stage in [
        "recv",
        "lookup",
        "hit",
        "miss",
        "fetch",
        "store",
        "deliver",
        "websocket",
        "refresh",
        "respond",
    ] {
        assert!(dir.join(format!("{stage}.rs")).exists(), "{stage}.rs");
        assert!(
            dispatcher.contains(&format!("{stage}::")),
            "the dispatcher calls {stage}"
        );
    }
    let respond = std::fs::read_to_string(dir.join("respond.rs")).unwrap();
    assert!(
        respond.contains("synth::error"),
        "respond makes errors responses"
    );
    // Every transition is decided in the dispatcher: no other file matches on a `Step`.
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_none_or(|x| x != "rs") || p.ends_with("mod.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&p).unwrap();
        let code = text.split("#[cfg(test)]").next().unwrap();
        let arm = code.lines().find(|l| {
            let l = l.trim_start();
            l.starts_with("Step::") && l.contains("=>")
        });
        assert!(
            arm.is_none(),
            "{} matches on a Step ({}): transitions belong in the dispatcher",
            p.display(),
            arm.unwrap_or_default()
        );
    }
}

/// The forms a file of the workspace may be named by in docs/architecture.md: its path from the
/// repository (`crates/cache/src/disk/mod.rs`), from its crate (`src/disk/mod.rs`), or from
/// its crate's `src` or `tests` folder (`disk/mod.rs`); a top-level file of `src` or `tests`
/// only by the first two (`lib.rs` alone would name every crate's).
fn names_of(file: &Path) -> (Vec<String>, String, String) {
    let root = workspace();
    let rel = file
        .strip_prefix(&root)
        .unwrap()
        .to_string_lossy()
        .into_owned();
    let parts: Vec<&str> = rel.split('/').collect();
    // crates/<crate>/<src|tests>/...
    let in_crate = parts[2..].join("/");
    let in_dir = parts[3..].join("/");
    let mut names = vec![rel.clone(), in_crate];
    if parts.len() > 4 {
        names.push(in_dir);
    }
    let folder = parts[..parts.len() - 1].join("/") + "/";
    let name = (*parts.last().unwrap()).to_owned();
    (names, folder, name)
}

/// Every source file under `crates/*/src` and every test file under `crates/*/tests` is named
/// in docs/architecture.md: in backticks by one of [`names_of`]'s forms, or on a line of the
/// file index that names its folder (`crates/x/src/dir/`) and then the file (`` `f.rs` ``).
#[test]
fn every_file_is_on_the_map() {
    let map = std::fs::read_to_string(workspace().join("docs/architecture.md")).unwrap();
    let mut files = vec![];
    for e in std::fs::read_dir(workspace().join("crates")).unwrap() {
        let krate = e.unwrap().path();
        for sub in ["src", "tests"] {
            let mut dirs = vec![krate.join(sub)];
            while let Some(d) = dirs.pop() {
                let Ok(rd) = std::fs::read_dir(&d) else {
                    continue;
                };
                for e in rd {
                    let p = e.unwrap().path();
                    let name = p.file_name().unwrap().to_string_lossy().into_owned();
                    if p.is_dir() && name != "node_modules" && name != "target" {
                        dirs.push(p);
                    } else if p.extension().is_some_and(|x| x == "rs") {
                        files.push(p);
                    }
                }
            }
        }
    }
    assert!(files.len() > 200, "{} files", files.len());
    let mut missing = vec![];
    for f in &files {
        let (names, folder, name) = names_of(f);
        let named = names.iter().any(|n| map.contains(&format!("`{n}`")))
            || map.lines().any(|l| {
                l.find(&format!("`{folder}`"))
                    .is_some_and(|i| l[i..].contains(&format!("`{name}`")))
            });
        if !named {
            missing.push(names[0].clone());
        }
    }
    missing.sort();
    assert!(
        missing.is_empty(),
        "files docs/architecture.md does not name (describe each with its folder and run \
         scripts/file-index.py for the index): {missing:#?}"
    );
}
