//! The shape of the crate, checked from its files: no import cycles between top-level modules,
//! and every setting folder has the same shape (traits in `mod.rs`, its run loop in `sim.rs`, its
//! environments and algorithms in files of its own folder, as the registry reports them).

use dpbandits::config::Setting;
use dpbandits::registry::{ENVIRONMENTS, POLICIES};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Top-level module of a file below `src/` (`lib.rs` is the crate root, skipped).
fn top_module(file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src()).unwrap();
    let first = rel.components().next()?.as_os_str().to_str()?.to_string();
    if first == "lib.rs" {
        return None;
    }
    Some(first.trim_end_matches(".rs").to_string())
}

/// Every `crate::name` a file's code mentions (comments and doc links excluded).
fn crate_refs(text: &str) -> BTreeSet<String> {
    let mut refs = BTreeSet::new();
    for line in text.lines() {
        let code = line.split("//").next().unwrap_or("");
        let mut rest = code;
        while let Some(i) = rest.find("crate::") {
            let tail = &rest[i + 7..];
            let name: String = tail
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                refs.insert(name);
            }
            rest = tail;
        }
        // `use crate::{a, b::c}` groups
        if let Some(i) = code.find("crate::{") {
            for part in code[i + 8..].split([',', '}']) {
                let name: String = part
                    .trim()
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if !name.is_empty() {
                    refs.insert(name);
                }
            }
        }
    }
    refs
}

#[test]
fn no_import_cycles_between_top_level_modules() {
    let mut files = vec![];
    rust_files(&src(), &mut files);
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in &files {
        let Some(m) = top_module(f) else { continue };
        let text = std::fs::read_to_string(f).unwrap();
        // unit tests may reach anywhere; only the library's own code counts
        let code = text.split("#[cfg(test)]").next().unwrap_or("");
        let deps = graph.entry(m.clone()).or_default();
        for r in crate_refs(code) {
            if r != m && !["Result", "Error"].contains(&r.as_str()) {
                deps.insert(r);
            }
        }
    }
    // Depth-first search for a cycle.
    fn visit(
        n: &str,
        g: &BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<String, u8>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        match state.get(n) {
            Some(2) => return None,
            Some(1) => {
                let i = path.iter().position(|p| p == n).unwrap();
                let mut c = path[i..].to_vec();
                c.push(n.to_string());
                return Some(c);
            }
            _ => {}
        }
        state.insert(n.to_string(), 1);
        path.push(n.to_string());
        for d in g.get(n).into_iter().flatten() {
            if let Some(c) = visit(d, g, state, path) {
                return Some(c);
            }
        }
        path.pop();
        state.insert(n.to_string(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for n in graph.keys() {
        if let Some(c) = visit(n, &graph, &mut state, &mut vec![]) {
            panic!("import cycle: {}\ngraph: {graph:#?}", c.join(" -> "));
        }
    }
    // The leaves stay leaves.
    for leaf in ["config", "error", "rng"] {
        let deps: Vec<&String> = graph[leaf]
            .iter()
            .filter(|d| !["error", "rng"].contains(&d.as_str()))
            .collect();
        assert!(deps.is_empty(), "{leaf} imports {deps:?}");
    }
    for m in [
        "finite",
        "linear",
        "contextual",
        "bai",
        "privacy",
        "sim",
        "config",
    ] {
        assert!(
            !graph[m].contains("registry") && !graph[m].contains("experiment"),
            "{m} imports the registry or the experiment layer: {:?}",
            graph[m]
        );
    }
}

#[test]
fn every_setting_folder_has_the_same_shape() {
    let folders = [
        (Setting::FiniteArmed, "finite"),
        (Setting::Linear, "linear"),
        (Setting::Contextual, "contextual"),
        (Setting::Bai, "bai"),
    ];
    for (setting, folder) in folders {
        let dir = src().join(folder);
        for f in ["mod.rs", "sim.rs"] {
            assert!(dir.join(f).is_file(), "{folder}/{f} is missing");
        }
        let mod_rs = std::fs::read_to_string(dir.join("mod.rs")).unwrap();
        assert!(
            mod_rs.contains("pub trait"),
            "{folder}/mod.rs declares no trait"
        );
        let inside = |source: &str| source.contains(&format!("/src/{folder}/"));
        let algs: Vec<_> = POLICIES.iter().filter(|e| e.setting() == setting).collect();
        let envs: Vec<_> = ENVIRONMENTS
            .iter()
            .filter(|e| e.info.setting == setting)
            .collect();
        assert!(
            !algs.is_empty() && !envs.is_empty(),
            "{folder}: empty setting"
        );
        for e in algs {
            assert!(
                inside(e.info.source),
                "{}: {} not in {folder}/",
                e.kind(),
                e.info.source
            );
        }
        for e in envs {
            assert!(
                inside(e.info.source),
                "{}: {} not in {folder}/",
                e.info.kind,
                e.info.source
            );
        }
    }
}
