//! The shape of the crate, checked from its files: no import cycles between top-level modules,
//! nor between any two files (see [`files::graph`] for what counts as an edge), and every
//! setting folder has the same shape (traits in `mod.rs`, its run loop in `sim.rs`, its
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

/// The file-level import graph of the library's code, for [`no_import_cycles_between_files`].
mod files {
    use std::collections::{BTreeMap, BTreeSet};
    use std::path::Path;

    #[derive(Debug, Clone, PartialEq)]
    enum Tok {
        Ident(String),
        PathSep,
        Open(char),
        Close(char),
        Punct(char),
    }

    /// `(token, line)`s of Rust source, without comments and literals (a string that is a whole
    /// `crate::` path, as in `#[serde(with = "crate::snapshot::with::square")]`, is kept as a path).
    fn lex(text: &str) -> Vec<(Tok, usize)> {
        let c: Vec<char> = text.chars().collect();
        let (mut i, mut line, mut out) = (0, 1, vec![]);
        let ident = |ch: char| ch.is_alphanumeric() || ch == '_';
        while i < c.len() {
            let ch = c[i];
            let next = c.get(i + 1).copied().unwrap_or(' ');
            if ch == '\n' {
                line += 1;
                i += 1;
            } else if ch.is_whitespace() {
                i += 1;
            } else if ch == '/' && next == '/' {
                while i < c.len() && c[i] != '\n' {
                    i += 1;
                }
            } else if ch == '/' && next == '*' {
                let mut depth = 0;
                while i < c.len() {
                    if c[i] == '/' && c.get(i + 1) == Some(&'*') {
                        depth += 1;
                        i += 2;
                    } else if c[i] == '*' && c.get(i + 1) == Some(&'/') {
                        depth -= 1;
                        i += 2;
                        if depth == 0 {
                            break;
                        }
                    } else {
                        line += usize::from(c[i] == '\n');
                        i += 1;
                    }
                }
            } else if ch == '"' || ((ch == 'r' || ch == 'b') && (next == '"' || next == '#')) {
                // (raw) (byte) string
                let raw = ch == 'r' || (ch == 'b' && next == 'r');
                while c[i] != '"' && c[i] != '#' {
                    i += 1;
                }
                let mut hashes = 0;
                while c[i] == '#' {
                    hashes += 1;
                    i += 1;
                }
                i += 1; // opening quote
                let start = i;
                loop {
                    if !raw && c[i] == '\\' {
                        i += 2;
                        continue;
                    }
                    if c[i] == '"' && (0..hashes).all(|h| c.get(i + 1 + h) == Some(&'#')) {
                        break;
                    }
                    line += usize::from(c[i] == '\n');
                    i += 1;
                }
                let s: String = c[start..i].iter().collect();
                i += 1 + hashes;
                if s.starts_with("crate::") && s.chars().all(|ch| ident(ch) || ch == ':') {
                    for (k, seg) in s.split("::").enumerate() {
                        if k > 0 {
                            out.push((Tok::PathSep, line));
                        }
                        out.push((Tok::Ident(seg.to_string()), line));
                    }
                    out.push((Tok::Punct('"'), line));
                }
            } else if ch == '\'' {
                // a char literal, or a lifetime (whose name is lexed as an identifier)
                if next == '\\' {
                    i += 2;
                    while c[i] != '\'' {
                        i += 1;
                    }
                    i += 1;
                } else if c.get(i + 2) == Some(&'\'') {
                    i += 3;
                } else {
                    i += 1;
                }
            } else if ch.is_ascii_digit() {
                while i < c.len()
                    && (ident(c[i])
                        || c[i] == '.' && c.get(i + 1).is_some_and(|d| d.is_ascii_digit()))
                {
                    i += 1;
                }
            } else if ident(ch) {
                let start = i;
                while i < c.len() && ident(c[i]) {
                    i += 1;
                }
                out.push((Tok::Ident(c[start..i].iter().collect()), line));
            } else if ch == ':' && next == ':' {
                out.push((Tok::PathSep, line));
                i += 2;
            } else {
                out.push((
                    match ch {
                        '{' | '(' | '[' => Tok::Open(ch),
                        '}' | ')' | ']' => Tok::Close(ch),
                        _ => Tok::Punct(ch),
                    },
                    line,
                ));
                i += 1;
            }
        }
        out
    }

    fn is_ident(t: Option<&(Tok, usize)>, s: &str) -> bool {
        matches!(t, Some((Tok::Ident(x), _)) if x == s)
    }

    /// Index after the balanced group opening at `i`.
    fn skip_group(t: &[(Tok, usize)], mut i: usize) -> usize {
        let mut depth = 0;
        while i < t.len() {
            match t[i].0 {
                Tok::Open(_) => depth += 1,
                Tok::Close(_) => {
                    depth -= 1;
                    if depth == 0 {
                        return i + 1;
                    }
                }
                _ => {}
            }
            i += 1;
        }
        i
    }

    /// The tokens without the items under `#[cfg(test)]`, and the names of the test modules
    /// declared as files (`#[cfg(test)] mod tests;`).
    fn without_tests(t: Vec<(Tok, usize)>) -> (Vec<(Tok, usize)>, BTreeSet<String>) {
        let (mut out, mut test_mods, mut i) = (vec![], BTreeSet::new(), 0);
        let cfg_test = |i: usize| {
            let want = [
                Tok::Punct('#'),
                Tok::Open('['),
                Tok::Ident("cfg".into()),
                Tok::Open('('),
                Tok::Ident("test".into()),
                Tok::Close(')'),
                Tok::Close(']'),
            ];
            t.len() >= i + want.len() && want.iter().zip(&t[i..]).all(|(w, (x, _))| w == x)
        };
        while i < t.len() {
            if !cfg_test(i) {
                out.push(t[i].clone());
                i += 1;
                continue;
            }
            i += 7;
            while matches!(t.get(i), Some((Tok::Punct('#'), _))) {
                i = skip_group(&t, i + 1);
            }
            if is_ident(t.get(i), "pub") {
                i += 1;
                if matches!(t.get(i), Some((Tok::Open('('), _))) {
                    i = skip_group(&t, i);
                }
            }
            if is_ident(t.get(i), "mod") && matches!(t.get(i + 2), Some((Tok::Punct(';'), _))) {
                if let Some((Tok::Ident(name), _)) = t.get(i + 1) {
                    test_mods.insert(name.clone());
                }
                i += 3;
                continue;
            }
            while i < t.len() {
                match t[i].0 {
                    Tok::Punct(';') => {
                        i += 1;
                        break;
                    }
                    Tok::Open('{') => {
                        i = skip_group(&t, i);
                        break;
                    }
                    Tok::Open(_) => i = skip_group(&t, i),
                    _ => i += 1,
                }
            }
        }
        (out, test_mods)
    }

    /// The paths of a `use` tree starting at `i` (after `use`), prefixed by `prefix`.
    fn use_tree(
        t: &[(Tok, usize)],
        i: &mut usize,
        prefix: Vec<String>,
        out: &mut Vec<Vec<String>>,
    ) {
        let mut path = prefix;
        while *i < t.len() {
            match &t[*i].0 {
                Tok::Ident(s) => {
                    if s != "self" || path.is_empty() {
                        path.push(s.clone());
                    }
                    *i += 1;
                    if matches!(t.get(*i), Some((Tok::PathSep, _))) {
                        *i += 1;
                        continue;
                    }
                    if is_ident(t.get(*i), "as") {
                        *i += 2;
                    }
                    out.push(path);
                    return;
                }
                Tok::Open('{') => {
                    *i += 1;
                    while *i < t.len() && t[*i].0 != Tok::Close('}') {
                        let before = *i;
                        use_tree(t, i, path.clone(), out);
                        if *i == before || t[*i].0 == Tok::Punct(',') {
                            *i += 1;
                        }
                    }
                    *i += 1;
                    return;
                }
                Tok::Punct('*') => {
                    *i += 1;
                    out.push(path);
                    return;
                }
                Tok::PathSep => *i += 1,
                _ => return,
            }
        }
    }

    /// One path a file mentions: its segments as written, the module it is written in (file
    /// module plus inline modules), whether it is part of a `pub use`, and its line.
    struct Mention {
        segs: Vec<String>,
        inline: Vec<String>,
        re_export: bool,
        line: usize,
    }

    /// Every path of a file's (non-test) code, its `mod x;` children and its test modules.
    fn mentions(text: &str) -> (Vec<Mention>, BTreeSet<String>, BTreeSet<String>) {
        let (t, test_mods) = without_tests(lex(text));
        let (mut out, mut children) = (vec![], BTreeSet::new());
        let mut inline: Vec<(String, usize)> = vec![];
        let mut depth = 0usize;
        let mut i = 0;
        while i < t.len() {
            match &t[i].0 {
                Tok::Open('{') => depth += 1,
                Tok::Close('}') => {
                    depth -= 1;
                    if inline.last().is_some_and(|(_, d)| *d > depth) {
                        inline.pop();
                    }
                }
                Tok::Ident(kw) if kw == "mod" => {
                    if let Some((Tok::Ident(name), _)) = t.get(i + 1) {
                        match t.get(i + 2).map(|x| &x.0) {
                            Some(Tok::Punct(';')) if inline.is_empty() => {
                                children.insert(name.clone());
                            }
                            Some(Tok::Open('{')) => inline.push((name.clone(), depth + 1)),
                            _ => {}
                        }
                    }
                }
                // a `use` item (not `impl Trait + use<..>`)
                Tok::Ident(kw)
                    if kw == "use"
                        && matches!(
                            t.get(i + 1),
                            Some((Tok::Ident(_) | Tok::PathSep | Tok::Open('{'), _))
                        ) =>
                {
                    let re_export = is_ident(i.checked_sub(1).and_then(|j| t.get(j)), "pub")
                        || (matches!(t.get(i.wrapping_sub(1)), Some((Tok::Close(')'), _)))
                            && (2..6)
                                .any(|k| is_ident(i.checked_sub(k).and_then(|j| t.get(j)), "pub")));
                    let line = t[i].1;
                    let mut j = i + 1;
                    let mut paths = vec![];
                    while j < t.len() && t[j].0 != Tok::Punct(';') {
                        use_tree(&t, &mut j, vec![], &mut paths);
                        // past a `,` (or a token the tree did not take)
                        if j < t.len() && t[j].0 != Tok::Punct(';') {
                            j += 1;
                        }
                    }
                    for segs in paths {
                        out.push(Mention {
                            segs,
                            inline: inline.iter().map(|x| x.0.clone()).collect(),
                            re_export,
                            line,
                        });
                    }
                    i = j;
                    continue;
                }
                Tok::Ident(first)
                    if !matches!(t.get(i.wrapping_sub(1)), Some((Tok::PathSep, _)))
                        && matches!(t.get(i + 1), Some((Tok::PathSep, _))) =>
                {
                    let mut segs = vec![first.clone()];
                    let mut j = i + 1;
                    while let (Some((Tok::PathSep, _)), Some((Tok::Ident(s), _))) =
                        (t.get(j), t.get(j + 1))
                    {
                        segs.push(s.clone());
                        j += 2;
                    }
                    out.push(Mention {
                        segs,
                        inline: inline.iter().map(|x| x.0.clone()).collect(),
                        re_export: false,
                        line: t[i].1,
                    });
                    i = j;
                    continue;
                }
                _ => {}
            }
            i += 1;
        }
        (out, children, test_mods)
    }

    /// A file's module path (`finite/kl_ucb.rs` and `finite/kl_ucb/mod.rs` -> `[finite, kl_ucb]`;
    /// `lib.rs` -> `[]`).
    fn module_of(rel: &Path) -> Vec<String> {
        let mut m: Vec<String> = rel
            .iter()
            .map(|s| s.to_str().unwrap().trim_end_matches(".rs").to_string())
            .collect();
        // `lib.rs` and `mod.rs` are their folder's module; a binary's root `main.rs` too.
        if matches!(m.last().map(String::as_str), Some("mod" | "lib")) || m.as_slice() == ["main"] {
            m.pop();
        }
        m
    }

    /// An edge of the graph: the file it points at, and where and how it is written.
    pub struct Edge {
        pub to: String,
        pub line: usize,
        pub path: String,
    }

    /// Every function of the library code in `text` (items under `#[cfg(test)]` left out):
    /// `(name, first line, lines)`, from its `fn` to the closing brace of its body.
    pub fn functions(text: &str) -> Vec<(String, usize, usize)> {
        let (t, _) = without_tests(lex(text));
        let mut out = vec![];
        let mut i = 0;
        while i < t.len() {
            if !is_ident(t.get(i), "fn") {
                i += 1;
                continue;
            }
            let Some((Tok::Ident(name), line)) = t.get(i + 1).cloned() else {
                i += 1;
                continue;
            };
            let mut j = i + 2;
            while j < t.len() {
                match t[j].0 {
                    Tok::Punct(';') => break,
                    Tok::Open('{') => {
                        let end = skip_group(&t, j);
                        let last = t[end - 1].1;
                        out.push((name.clone(), line, last + 1 - line));
                        break;
                    }
                    Tok::Open(_) => j = skip_group(&t, j),
                    _ => j += 1,
                }
            }
            i += 2;
        }
        out
    }

    /// The graph `file -> files it references` of the library's non-test code, files named by
    /// their path below `src/`.
    ///
    /// A path is resolved to the file of its longest prefix that is a module: `crate::a::b::C`
    /// to `a/b.rs` (or `a/b/mod.rs`) if that is a module, else to `a.rs` / `a/mod.rs`; so an item
    /// a parent `mod.rs` re-exports (`crate::finite::KlUcb`) is an edge to that `mod.rs` only.
    /// `super::`, `self::`, `use crate::a::{b, c::D}` groups and paths through a file's own
    /// child modules (`blocks::Foo` in `finite/mod.rs`) are resolved the same way.
    ///
    /// Not edges: a parent declaring its children (`mod x;`), and a `pub use` (or
    /// `pub(crate) use`) of a file's own descendants: a `mod.rs` re-exporting its folder's items
    /// is the folder's interface, not a dependency of the `mod.rs`'s code (else every child
    /// that imports a sibling's item through the parent would close a cycle through the
    /// parent). A private `use child::X` in a `mod.rs`, or any other mention of a child's item
    /// in its code, is an edge. Items under `#[cfg(test)]` and test module files are left out.
    pub fn graph(src: &Path) -> BTreeMap<String, Vec<Edge>> {
        graph_of(src, "lib.rs")
    }

    /// [`graph`] of the crate whose root file is `root` (`lib.rs`, or `main.rs` of a binary).
    pub fn graph_of(src: &Path, root: &str) -> BTreeMap<String, Vec<Edge>> {
        // The module tree from the root, following `mod x;` outside #[cfg(test)].
        let mut files: BTreeMap<Vec<String>, String> = BTreeMap::new();
        let mut parsed = BTreeMap::new();
        let mut todo = vec![(root.to_string(), vec![])];
        while let Some((rel, module)) = todo.pop() {
            let text = std::fs::read_to_string(src.join(&rel)).unwrap();
            let (ms, children, _tests) = mentions(&text);
            let dir = if rel == root || rel.ends_with("/mod.rs") {
                Path::new(&rel).parent().unwrap().to_path_buf()
            } else {
                Path::new(&rel).with_extension("")
            };
            for child in children {
                let flat = dir.join(format!("{child}.rs"));
                let nested = dir.join(&child).join("mod.rs");
                let f = if src.join(&flat).is_file() {
                    flat
                } else {
                    nested
                };
                assert!(src.join(&f).is_file(), "{rel}: mod {child}; has no file");
                let mut m = module.clone();
                m.push(child);
                todo.push((f.to_str().unwrap().replace('\\', "/"), m));
            }
            assert_eq!(module, module_of(Path::new(&rel)), "{rel}");
            files.insert(module.clone(), rel.clone());
            parsed.insert(rel, (module, ms));
        }
        let mut graph = BTreeMap::new();
        for (rel, (module, ms)) in &parsed {
            let mut edges: Vec<Edge> = vec![];
            let children: BTreeSet<&str> = files
                .keys()
                .filter(|m| m.len() == module.len() + 1 && m.starts_with(module))
                .map(|m| m.last().unwrap().as_str())
                .collect();
            for m in ms {
                let mut cur: Vec<String> = module.clone();
                cur.extend(m.inline.iter().cloned());
                let abs: Vec<String> = match m.segs[0].as_str() {
                    "crate" => m.segs[1..].to_vec(),
                    "self" => cur.iter().chain(&m.segs[1..]).cloned().collect(),
                    "super" => {
                        let ups = m.segs.iter().take_while(|s| *s == "super").count();
                        let mut base = cur.clone();
                        base.truncate(base.len().saturating_sub(ups));
                        base.extend(m.segs[ups..].iter().cloned());
                        base
                    }
                    s if m.inline.is_empty() && children.contains(s) => {
                        cur.iter().chain(&m.segs).cloned().collect()
                    }
                    _ => continue,
                };
                let target = (0..=abs.len())
                    .rev()
                    .find_map(|k| files.get(&abs[..k]).map(|f| (k, f)));
                let Some((k, to)) = target else { continue };
                if to == rel || (m.re_export && abs[..k].starts_with(module)) {
                    continue;
                }
                if !edges.iter().any(|e| &e.to == to) {
                    edges.push(Edge {
                        to: to.clone(),
                        line: m.line,
                        path: m.segs.join("::"),
                    });
                }
            }
            graph.insert(rel.clone(), edges);
        }
        graph
    }

    /// Every cycle of the graph, one per strongly connected component of two or more files
    /// (Tarjan), each written `a.rs -> b.rs -> a.rs` with the line and path of every edge.
    pub fn cycles(g: &BTreeMap<String, Vec<Edge>>) -> Vec<String> {
        struct T<'a> {
            g: &'a BTreeMap<String, Vec<Edge>>,
            index: BTreeMap<&'a str, usize>,
            low: BTreeMap<&'a str, usize>,
            stack: Vec<&'a str>,
            on: BTreeSet<&'a str>,
            sccs: Vec<Vec<&'a str>>,
        }
        fn connect<'a>(t: &mut T<'a>, v: &'a str) {
            let n = t.index.len();
            t.index.insert(v, n);
            t.low.insert(v, n);
            t.stack.push(v);
            t.on.insert(v);
            for e in t.g.get(v).into_iter().flatten() {
                let w = e.to.as_str();
                if !t.index.contains_key(w) {
                    connect(t, w);
                    let lw = t.low[w];
                    let lv = t.low.get_mut(v).unwrap();
                    *lv = (*lv).min(lw);
                } else if t.on.contains(w) {
                    let iw = t.index[w];
                    let lv = t.low.get_mut(v).unwrap();
                    *lv = (*lv).min(iw);
                }
            }
            if t.low[v] == t.index[v] {
                let mut scc = vec![];
                while let Some(w) = t.stack.pop() {
                    t.on.remove(w);
                    scc.push(w);
                    if w == v {
                        break;
                    }
                }
                if scc.len() > 1 {
                    t.sccs.push(scc);
                }
            }
        }
        let mut t = T {
            g,
            index: BTreeMap::new(),
            low: BTreeMap::new(),
            stack: vec![],
            on: BTreeSet::new(),
            sccs: vec![],
        };
        for v in g.keys() {
            if !t.index.contains_key(v.as_str()) {
                connect(&mut t, v);
            }
        }
        // One cycle through the smallest file of each component: breadth-first back to it.
        t.sccs
            .iter()
            .map(|scc| {
                let inside: BTreeSet<&str> = scc.iter().copied().collect();
                let start = *inside.iter().next().unwrap();
                let mut prev: BTreeMap<&str, (&str, &Edge)> = BTreeMap::new();
                let mut queue = std::collections::VecDeque::from([start]);
                'bfs: while let Some(v) = queue.pop_front() {
                    for e in &g[v] {
                        let w = e.to.as_str();
                        if !inside.contains(w) || prev.contains_key(w) {
                            continue;
                        }
                        prev.insert(w, (v, e));
                        if w == start {
                            break 'bfs;
                        }
                        queue.push_back(w);
                    }
                }
                let mut steps = vec![];
                let mut w = start;
                loop {
                    let (v, e) = prev[w];
                    steps.push(format!("{v} -> {w} ({v}:{} `{}`)", e.line, e.path));
                    w = v;
                    if w == start {
                        break;
                    }
                }
                steps.reverse();
                format!(
                    "{} files [{}]:\n    {}",
                    scc.len(),
                    inside.iter().copied().collect::<Vec<_>>().join(", "),
                    steps.join("\n    ")
                )
            })
            .collect()
    }
}

#[test]
fn no_import_cycles_between_files() {
    let g = files::graph(&src());
    assert!(
        g.len() > 50 && g.contains_key("finite/blocks.rs"),
        "{:?}",
        g.keys()
    );
    let edges: usize = g.values().map(Vec::len).sum();
    assert!(edges > 100, "{edges} edges: the resolver lost the paths");
    let cycles = files::cycles(&g);
    assert!(
        cycles.is_empty(),
        "import cycles between files of src/ (move the shared item into the file that owns it, \
         or into a small leaf file):\n  {}",
        cycles.join("\n  ")
    );
}

/// The file-level test sees the kinds of cycle it is for.
#[test]
fn the_file_cycle_test_catches_mutual_imports() {
    let dir = std::env::temp_dir().join(format!("dpbandits-cycles-{}", std::process::id()));
    let write = |rel: &str, text: &str| {
        let p = dir.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    };
    write("lib.rs", "pub mod a;\npub mod b;\npub use a::Top;\n");
    // siblings through super::, a `use crate::a::{b, c}` group and a parent re-export
    write(
        "a/mod.rs",
        "mod x;\nmod y;\npub mod z;\npub use x::X;\npub use self::y::Y;\npub struct Top;\n#[cfg(test)]\nmod tests;\n",
    );
    write("a/x.rs", "use super::y::Y;\npub struct X;\n");
    write("a/y.rs", "use crate::a::{z, x::X};\npub struct Y;\n");
    write("a/z.rs", "pub fn f() -> crate::a::Y { todo!() }\n");
    write("a/tests.rs", "use super::x::X;\nuse crate::b::B;\n");
    write(
        "b.rs",
        "// crate::a::x::X in a comment\npub struct B(crate::a::X);\n#[cfg(test)]\nmod tests { use crate::a::y::Y; }\n",
    );
    let g = files::graph(&dir);
    let to = |f: &str| -> Vec<String> { g[f].iter().map(|e| e.to.clone()).collect() };
    assert_eq!(to("a/x.rs"), ["a/y.rs"]);
    assert_eq!(to("a/y.rs"), ["a/z.rs", "a/x.rs"]);
    assert_eq!(to("a/z.rs"), ["a/mod.rs"]);
    assert!(to("a/mod.rs").is_empty(), "re-exports are not edges");
    assert_eq!(to("b.rs"), ["a/mod.rs"]);
    assert!(!g.contains_key("a/tests.rs"));
    let cycles = files::cycles(&g);
    assert_eq!(cycles.len(), 1, "{cycles:?}");
    assert!(
        cycles[0].starts_with("2 files [a/x.rs, a/y.rs]")
            && cycles[0].contains("a/x.rs -> a/y.rs (a/x.rs:1 `super::y::Y`)")
            && cycles[0].contains("a/y.rs -> a/x.rs (a/y.rs:1 `crate::a::x::X`)"),
        "{}",
        cycles[0]
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Every crate of the workspace: its source folder and root file.
fn workspace_crates() -> Vec<(&'static str, PathBuf, &'static str)> {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let all = vec![
        ("dpbandits", crates.join("dpbandits/src"), "lib.rs"),
        (
            "dpbandits-serve",
            crates.join("dpbandits-serve/src"),
            "lib.rs",
        ),
        ("dpbandits-cli", crates.join("dpbandits-cli/src"), "main.rs"),
        ("dpbandits-py", crates.join("dpbandits-py/src"), "lib.rs"),
    ];
    let mut dirs: Vec<String> = std::fs::read_dir(crates)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| crates.join(n).join("Cargo.toml").is_file())
        .collect();
    dirs.sort();
    let mut named: Vec<String> = all.iter().map(|c| c.0.to_string()).collect();
    named.sort();
    assert_eq!(
        dirs, named,
        "a crate of the workspace is missing from this list"
    );
    all
}

#[test]
fn no_import_cycles_between_files_of_any_crate() {
    for (name, src, root) in workspace_crates() {
        let g = files::graph_of(&src, root);
        assert!(g.len() >= 3, "{name}: {:?}", g.keys());
        let cycles = files::cycles(&g);
        assert!(
            cycles.is_empty(),
            "{name}: import cycles between files of src/ (move the shared item below both):\n  {}",
            cycles.join("\n  ")
        );
    }
}

/// The most lines of one function of the service crate.
const MAX_FUNCTION_LINES: usize = 80;
/// The most lines of one file of the service crate, without its `#[cfg(test)] mod tests`.
const MAX_FILE_LINES: usize = 1000;

/// The service crate's shape: files of at most [`MAX_FILE_LINES`] lines without their tests,
/// functions of at most [`MAX_FUNCTION_LINES`],
/// and no SQL outside its store (`store.rs`, or a `store/` folder): a string literal of library
/// code that starts an SQL statement is refused anywhere else.
#[test]
fn the_service_crate_keeps_its_limits_and_its_sql_in_the_store() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../dpbandits-serve/src");
    let mut files = vec![];
    rust_files(&src, &mut files);
    files.sort();
    assert!(files.len() > 8, "{files:?}");
    let sql = [
        "SELECT ",
        "INSERT ",
        "UPDATE ",
        "DELETE ",
        "CREATE ",
        "ALTER ",
        "DROP ",
        "BEGIN",
        "COMMIT",
        "ROLLBACK",
        "SAVEPOINT",
        "RELEASE ",
        "VACUUM",
        "PRAGMA",
    ];
    let mut problems = vec![];
    for f in &files {
        let rel = f.strip_prefix(&src).unwrap().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(f).unwrap();
        let code = text.split("\n#[cfg(test)]\nmod tests").next().unwrap();
        let lines = code.lines().count();
        if lines > MAX_FILE_LINES {
            problems.push(format!(
                "{rel}: {lines} lines without its tests (at most {MAX_FILE_LINES})"
            ));
        }
        for (name, line, n) in files::functions(&text) {
            if n > MAX_FUNCTION_LINES {
                problems.push(format!(
                    "{rel}:{line}: fn {name} has {n} lines (at most {MAX_FUNCTION_LINES})"
                ));
            }
        }
        let in_store = rel == "store.rs" || rel.starts_with("store/");
        for (k, l) in code.lines().enumerate() {
            let l = l.split("//").next().unwrap();
            if !in_store && sql.iter().any(|q| l.contains(&format!("\"{q}"))) {
                problems.push(format!(
                    "{rel}:{}: SQL outside the store: {}",
                    k + 1,
                    l.trim()
                ));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "the service crate:\n  {}",
        problems.join("\n  ")
    );
}

/// The limits test sees long functions, long files and SQL.
#[test]
fn the_function_lengths_are_measured_from_fn_to_its_closing_brace() {
    let text = "fn a() {\n    let x = 1;\n}\ntrait T { fn b(&self); }\nimpl X {\n    pub fn c<T: Fn() -> u8>(\n        t: T,\n    ) -> u8 {\n        t()\n    }\n}\n#[cfg(test)]\nmod tests {\n    fn d() {}\n}\n";
    let f = files::functions(text);
    assert_eq!(
        f,
        [("a".to_string(), 1, 3), ("c".to_string(), 6, 5)],
        "{f:?}"
    );
}
