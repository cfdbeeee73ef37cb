//! The crate's modules import one another one way only: no import circle (see
//! docs/architecture.md, "The pipeline"). Reads `src/` and fails with the modules of any circle.
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Module name (`store`, `h1::body`) → the crate modules it names outside its tests.
fn imports() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = vec![];
    let mut dirs = vec![src.clone()];
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
        let rel = f.strip_prefix(&src).unwrap().with_extension("");
        let name = rel.to_string_lossy().replace("/mod", "").replace('/', "::");
        if name == "lib" {
            continue;
        }
        let text = std::fs::read_to_string(&f).unwrap();
        // Unit tests may reach anywhere.
        let code = text.split("#[cfg(test)]").next().unwrap_or("");
        let mut deps = BTreeSet::new();
        for line in code.lines().map(str::trim).filter(|l| !l.starts_with("//")) {
            for part in line.split("crate::").skip(1) {
                let path: Vec<&str> = part
                    .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
                    .next()
                    .unwrap_or("")
                    .split("::")
                    .collect();
                let Some(first) = path.first().filter(|s| !s.is_empty()) else {
                    continue;
                };
                // A submodule counts as itself when it is a file (`h1::body`).
                let dep = match path.get(1) {
                    Some(sub) if src.join(first).join(format!("{sub}.rs")).exists() => {
                        format!("{first}::{sub}")
                    }
                    _ => first.to_string(),
                };
                if dep != name {
                    deps.insert(dep);
                }
            }
        }
        graph.insert(name, deps);
    }
    graph
}

#[test]
fn no_import_circle() {
    let graph = imports();
    assert!(graph.contains_key("pipeline") && graph.contains_key("store"));
    // Depth-first search; a module met again while on the path closes a circle.
    fn visit<'a>(
        n: &'a str,
        g: &'a BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<&'a str>,
        done: &mut BTreeSet<&'a str>,
    ) {
        if done.contains(n) {
            return;
        }
        if let Some(i) = path.iter().position(|m| *m == n) {
            panic!("import circle: {} → {n}", path[i..].join(" → "));
        }
        path.push(n);
        for d in g.get(n).into_iter().flatten() {
            visit(d, g, path, done);
        }
        path.pop();
        done.insert(n);
    }
    let mut done = BTreeSet::new();
    for n in graph.keys() {
        visit(n, &graph, &mut vec![], &mut done);
    }
}

#[test]
fn the_dispatcher_names_every_stage() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let pipeline = std::fs::read_to_string(src.join("pipeline.rs")).unwrap();
    for stage in ["recv", "lookup", "hit", "miss", "fetch", "deliver", "synth"] {
        assert!(src.join(format!("{stage}.rs")).exists(), "{stage}.rs");
        assert!(
            pipeline.contains(&format!("{stage}::")),
            "pipeline calls {stage}"
        );
    }
}
