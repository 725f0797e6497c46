//! No import circles between the files of a crate folder: each module's
//! `crate::`, `super::` and `self::` paths are read and mapped to the
//! deepest file or folder module they name (a folder's `mod.rs` or
//! `lib.rs` names the folder; a parent naming its own children is not an
//! edge), and the strongly connected components of that graph must all be
//! single files. Test modules (`tests.rs`, `#[cfg(test)] mod … {…}` at the
//! end of a file) are left out: they may import anything.
//!
//! Every crate folder is checked. `correlate/` is checked further: its
//! modules sit on layers (model, analysis, state, sources, engines, config,
//! stages, the processor's `mod.rs`) and none imports a module of a layer
//! above its own (a stage naming a constant of `mod.rs` reaches up too).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

type Module = Vec<String>;

fn rs_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            rs_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Module path → file, for every non-test `.rs` under `src`.
fn modules(src: &Path) -> BTreeMap<Module, PathBuf> {
    let mut files = Vec::new();
    rs_files(src, &mut files);
    let mut out = BTreeMap::new();
    for p in files {
        let rel = p.strip_prefix(src).expect("under src");
        let name = rel.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let in_tests = rel.components().any(|c| c.as_os_str() == "tests");
        if name == "tests.rs" || name.ends_with("_tests.rs") || in_tests {
            continue;
        }
        let mut parts: Module = rel
            .with_extension("")
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        if matches!(
            parts.last().map(String::as_str),
            Some("mod" | "lib" | "main")
        ) {
            parts.pop();
        }
        out.insert(parts, p);
    }
    out
}

/// The text without a trailing inline test module.
fn without_tests(text: &str) -> &str {
    let mut cut = text.len();
    let mut from = 0;
    while let Some(i) = text[from..].find("#[cfg(test)]") {
        let at = from + i;
        let rest = text[at + "#[cfg(test)]".len()..].trim_start();
        if rest.starts_with("mod ") && !rest.split('\n').next().unwrap_or("").contains(';') {
            cut = at;
            break;
        }
        from = at + 1;
    }
    &text[..cut]
}

/// Every `crate::a::b`, `super::x`, `self::y` path in `text`, as (kind, segments).
fn paths(text: &str) -> Vec<(&str, Vec<&str>)> {
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut out = Vec::new();
    for kind in ["crate", "super", "self"] {
        let mut from = 0;
        while let Some(i) = text[from..].find(kind) {
            let at = from + i;
            from = at + kind.len();
            let before = text[..at].chars().next_back();
            if before.is_some_and(|c| ident(c) || c == ':') {
                continue;
            }
            let mut segs = Vec::new();
            let mut rest = &text[from..];
            while let Some(r) = rest.strip_prefix("::") {
                let end = r.find(|c: char| !ident(c)).unwrap_or(r.len());
                if end == 0 {
                    break;
                }
                segs.push(&r[..end]);
                rest = &r[end..];
            }
            if !segs.is_empty() {
                out.push((kind, segs));
            }
        }
    }
    out
}

fn resolve(
    mods: &BTreeMap<Module, PathBuf>,
    here: &Module,
    kind: &str,
    segs: &[&str],
) -> Option<Module> {
    let mut segs: Vec<&str> = segs.to_vec();
    let mut base: Module = match kind {
        "crate" => Vec::new(),
        "self" => here.clone(),
        _ => {
            let mut b = here.clone();
            while segs.first() == Some(&"super") {
                segs.remove(0);
                b.pop();
            }
            b.pop();
            b
        }
    };
    base.extend(segs.iter().map(|s| s.to_string()));
    (1..=base.len())
        .rev()
        .map(|n| base[..n].to_vec())
        .find(|m| mods.contains_key(m))
}

/// Every module's imports of other modules (not of its own children).
fn edges(
    src: &Path,
) -> (
    BTreeMap<Module, PathBuf>,
    BTreeMap<Module, BTreeSet<Module>>,
) {
    let mods = modules(src);
    let mut edges: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
    for (m, p) in &mods {
        let text = std::fs::read_to_string(p).expect("readable source");
        let e = edges.entry(m.clone()).or_default();
        for (kind, segs) in paths(without_tests(&text)) {
            if let Some(t) = resolve(&mods, m, kind, &segs) {
                // A module's own children are its business, not a circle.
                if t != *m && !t.starts_with(m) {
                    e.insert(t);
                }
            }
        }
    }
    (mods, edges)
}

/// The import circles of a crate folder, each as its files.
fn circles(src: &Path) -> Vec<Vec<String>> {
    let (mods, edges) = edges(src);
    // Tarjan's strongly connected components.
    struct St<'a> {
        edges: &'a BTreeMap<Module, BTreeSet<Module>>,
        index: BTreeMap<Module, usize>,
        low: BTreeMap<Module, usize>,
        stack: Vec<Module>,
        on: BTreeSet<Module>,
        next: usize,
        out: Vec<Vec<Module>>,
    }
    fn strong(st: &mut St<'_>, v: &Module) {
        st.index.insert(v.clone(), st.next);
        st.low.insert(v.clone(), st.next);
        st.next += 1;
        st.stack.push(v.clone());
        st.on.insert(v.clone());
        let next: Vec<Module> = st.edges.get(v).into_iter().flatten().cloned().collect();
        for w in next {
            if !st.index.contains_key(&w) {
                strong(st, &w);
                let lw = st.low[&w];
                let lv = st.low.get_mut(v).expect("visited");
                *lv = (*lv).min(lw);
            } else if st.on.contains(&w) {
                let iw = st.index[&w];
                let lv = st.low.get_mut(v).expect("visited");
                *lv = (*lv).min(iw);
            }
        }
        if st.low[v] == st.index[v] {
            let mut c = Vec::new();
            while let Some(w) = st.stack.pop() {
                st.on.remove(&w);
                let done = w == *v;
                c.push(w);
                if done {
                    break;
                }
            }
            if c.len() > 1 {
                st.out.push(c);
            }
        }
    }
    let mut st = St {
        edges: &edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in edges.keys() {
        if !st.index.contains_key(v) {
            strong(&mut st, v);
        }
    }
    st.out
        .into_iter()
        .map(|c| {
            let mut files: Vec<String> = c
                .iter()
                .map(|m| {
                    mods[m]
                        .strip_prefix(src)
                        .unwrap_or(&mods[m])
                        .display()
                        .to_string()
                })
                .collect();
            files.sort();
            files
        })
        .collect()
}

#[test]
fn no_crate_folder_has_an_import_circle() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut found = Vec::new();
    for dir in [
        "core/src",
        "receivers/src",
        "exporters/src",
        "extensions/src",
        "processors/src",
        "src",
        "tools/scenarios/src",
        "tools/loadgen/src",
    ] {
        let src = root.join(dir);
        assert!(src.is_dir(), "{dir} is not a folder");
        for c in circles(&src) {
            found.push(format!("{dir}: {}", c.join(", ")));
        }
    }
    assert!(found.is_empty(), "import circles:\n{}", found.join("\n"));
}

/// The check sees a circle where there is one: in a small crate where
/// `a/inner.rs` and `b.rs` import each other (and `b`'s test module
/// imports `a`, which does not count), exactly that pair is reported.
#[test]
fn the_check_sees_a_circle_where_there_is_one() {
    let dir = std::env::temp_dir().join(format!("causeway-layering-{}", std::process::id()));
    let src = dir.join("src");
    std::fs::create_dir_all(src.join("a")).expect("temp dir");
    std::fs::write(src.join("lib.rs"), "pub mod a;\npub mod b;\n").expect("write");
    std::fs::write(src.join("a/mod.rs"), "pub mod inner;\nuse crate::b::B;\n").expect("write");
    std::fs::write(src.join("a/inner.rs"), "use super::super::b::B;\n").expect("write");
    std::fs::write(
        src.join("b.rs"),
        "pub struct B;\nfn f() { crate::a::inner::g() }\n#[cfg(test)]\nmod tests {\n use crate::a::X;\n}\n",
    )
    .expect("write");
    let found = circles(&src);
    std::fs::remove_dir_all(&dir).ok();
    assert_eq!(
        found,
        vec![vec!["a/inner.rs".to_string(), "b.rs".to_string()]]
    );
}

/// The layer of a module of `correlate/` (by its first part below it).
fn correlate_layer(m: &Module) -> Option<usize> {
    if m.first().map(String::as_str) != Some("correlate") {
        return None;
    }
    Some(match m.get(1).map(String::as_str) {
        Some("model") => 0,
        Some("analysis" | "annotate") => 1,
        Some("store") => 2,
        Some("source") => 3,
        Some("rules" | "alerts" | "incidents" | "page") => 4,
        Some("config" | "registry") => 5,
        Some("stage") => 6,
        // The processor itself (`correlate/mod.rs`): nothing reaches back up
        // to it, not even for a constant.
        None => 7,
        Some(other) => panic!("correlate/{other} has no layer here: give it one"),
    })
}

#[test]
fn no_module_of_correlate_imports_one_above_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("processors/src");
    let (mods, edges) = edges(&src);
    let mut up = Vec::new();
    let mut seen = 0;
    for (from, tos) in &edges {
        let Some(lf) = correlate_layer(from) else {
            continue;
        };
        seen += 1;
        for to in tos {
            if let Some(lt) = correlate_layer(to) {
                if lt > lf {
                    up.push(format!(
                        "{} (layer {lf}) imports {} (layer {lt})",
                        mods[from].display(),
                        mods[to].display()
                    ));
                }
            }
        }
    }
    assert!(seen >= 20, "only {seen} modules of correlate/ were read");
    assert!(up.is_empty(), "imports going up:\n{}", up.join("\n"));
}

/// The layer check sees an import going up: a model module naming a source.
#[test]
fn the_layer_check_sees_an_import_going_up() {
    let (a, b): (Module, Module) = (
        vec!["correlate".into(), "model".into(), "trace".into()],
        vec!["correlate".into(), "source".into(), "kafka".into()],
    );
    assert!(correlate_layer(&b) > correlate_layer(&a));
    assert_eq!(correlate_layer(&vec!["correlate".into()]), Some(7));
    let stage: Module = vec!["correlate".into(), "stage".into(), "analyse".into()];
    assert!(correlate_layer(&vec!["correlate".into()]) > correlate_layer(&stage));
    assert_eq!(correlate_layer(&vec!["tail_sampling".into()]), None);
}

/// Whole string literals of `text` that are a plain lower-case word
/// (`"circuit_open"`, not `"circuit open"` or SQL), except a rule's name
/// (the first argument of `r(` or `Rule::builtin(`), a column's (of
/// `utf8(`, `boolf(`, `f64f(`, `i64f(`, `Column::text(`, …) and a config
/// section's key beside its section (`("retry_storm", self.retry_storm…`):
/// those are names of their own that may share a cause's word.
fn word_literals(text: &str) -> Vec<&str> {
    const NAMING: [&str; 10] = [
        "r(", "builtin(", "utf8(", "boolf(", "f64f(", "i64f(", "text(", "float(", "int(", "bool(",
    ];
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(i) = text[at..].find('"') {
        let open = at + i;
        let after = &text[open + 1..];
        let Some(end) = after.find('"') else { break };
        let lit = &after[..end];
        let before = text[..open].trim_end();
        let named = NAMING.iter().any(|n| {
            before.ends_with(n)
                && !before[..before.len() - n.len()]
                    .ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
        });
        let section = after[end + 1..].starts_with(", self.");
        if !named
            && !section
            && !lit.is_empty()
            && lit.chars().all(|c| c.is_ascii_lowercase() || c == '_')
        {
            out.push(lit);
        }
        at = open + 1 + end + 1;
    }
    out
}

/// The causes described in `correlate` (`Cause::new("name", …)`), with the file of each.
fn described_causes(src: &Path) -> BTreeMap<String, PathBuf> {
    let mut out = BTreeMap::new();
    for path in modules(src).into_values() {
        let text = std::fs::read_to_string(&path).expect("read");
        let mut rest = without_tests(&text);
        while let Some(i) = rest.find("Cause::new(\"") {
            let after = &rest[i + "Cause::new(\"".len()..];
            let end = after.find('"').expect("a closing quote");
            if !after[..end].is_empty() {
                out.insert(after[..end].to_string(), path.clone());
            }
            rest = &after[end..];
        }
    }
    out
}

/// A cause's name is written once, in its descriptor: the rules, the
/// verdict, the processor and the page name it by its constant, so a typo
/// cannot become a silent wrong verdict. `"error"` is also a span status and
/// a column (`spans.status`, `traces.error`), so it is left out.
#[test]
fn a_cause_is_named_only_in_its_descriptor() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("processors/src");
    let causes = described_causes(&src);
    for expected in [
        "unknown",
        "circuit_open",
        "retry_storm",
        "cache_miss_fallback",
        "host_io_wait",
    ] {
        assert!(
            causes.contains_key(expected),
            "no descriptor of {expected}: {causes:?}"
        );
    }
    let mut wrong = Vec::new();
    for path in modules(&src).into_values() {
        if !path.starts_with(src.join("correlate")) {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("read");
        for lit in word_literals(without_tests(&text)) {
            match causes.get(lit) {
                Some(home) if home != &path && lit != "error" => wrong.push(format!(
                    "{} writes \"{lit}\", described in {}",
                    path.display(),
                    home.display()
                )),
                _ => {}
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The check sees a cause's name written outside its descriptor.
#[test]
fn the_cause_check_sees_a_name_written_twice() {
    let text = "let c = Cause::new(\"lag\", x);\nif f.cause == \"lag\" {}";
    assert_eq!(word_literals(text), ["lag", "lag"]);
    assert_eq!(word_literals("\"a b\" \"SELECT x\" \"ok\""), ["ok"]);
    // A rule's, a column's or a config section's own name is not a cause's.
    assert!(word_literals("(\"lag\", self.lag.validate())").is_empty());
    assert_eq!(
        word_literals("r(\n \"lag\", &LAG, boolf(\"lag\"), f(\"lag\")"),
        ["lag"]
    );
}
