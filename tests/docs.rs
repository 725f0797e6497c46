//! The configuration reference lives beside the code: every component folder
//! has a README.md, and its config structs and its README agree. A key that
//! a config struct accepts (a field of a `deny_unknown_fields` struct, by its
//! serde name) must be named in the component's README (or the README its
//! crate keeps for keys shared by all its components); a key a README's key
//! table lists must be a field of one of the component's structs (or of
//! the shared ones in `core/`). The landing README stays a landing page.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The component folders: one per receiver, processor, exporter, extension.
fn components() -> Vec<PathBuf> {
    let mut out = Vec::new();
    for kind in ["receivers", "processors", "exporters", "extensions"] {
        let src = root().join(kind).join("src");
        for e in std::fs::read_dir(&src).expect("crate src").flatten() {
            if e.path().is_dir() {
                out.push(e.path());
            }
        }
    }
    out.sort();
    out
}

/// Non-test Rust files under `dir`.
fn sources(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).expect("dir").flatten() {
        let p = e.path();
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if p.is_dir() {
            out.extend(sources(&p));
        } else if name.ends_with(".rs") && name != "tests.rs" && !name.ends_with("_tests.rs") {
            out.push(p);
        }
    }
    out
}

/// The serde names of the fields of every `deny_unknown_fields` struct in
/// `text` (attributes read across lines; `skip` and `flatten` fields left
/// out: a flattened struct is checked as itself).
fn config_keys(text: &str) -> BTreeSet<String> {
    let text = text
        .split("\n#[cfg(test)]\nmod tests")
        .next()
        .unwrap_or(text);
    let mut keys = BTreeSet::new();
    let mut attrs = String::new();
    let mut in_struct: Option<usize> = None; // its indentation
    let mut field_attrs = String::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let t = line.trim_start();
        let indent = line.len() - t.len();
        if t.starts_with("#[") {
            let mut a = t.to_string();
            let mut depth = a.matches('[').count() as i64 - a.matches(']').count() as i64;
            while depth > 0 {
                let Some(next) = lines.next() else { break };
                a.push_str(next.trim());
                depth += next.matches('[').count() as i64 - next.matches(']').count() as i64;
            }
            if in_struct.is_some() {
                field_attrs.push_str(&a);
            } else {
                attrs.push_str(&a);
            }
            continue;
        }
        if t.starts_with("///") || t.starts_with("//") || t.is_empty() {
            continue;
        }
        match in_struct {
            None => {
                let is_struct = (t.starts_with("pub struct ")
                    || t.starts_with("pub(crate) struct ")
                    || t.starts_with("struct "))
                    && t.ends_with('{');
                // A config struct a macro declares (`exporter_config!`,
                // `poll_config!`): its callers give `deny_unknown_fields`.
                let declared = t.starts_with("$vis struct $name") && t.ends_with('{');
                if (is_struct && attrs.contains("deny_unknown_fields")) || declared {
                    in_struct = Some(indent);
                }
                attrs.clear();
            }
            Some(si) => {
                if indent == si && t.starts_with('}') {
                    in_struct = None;
                    continue;
                }
                let decl = t
                    .trim_start_matches("pub(crate) ")
                    .trim_start_matches("pub ");
                if let Some((name, _)) = decl.split_once(':') {
                    let name = name.trim().trim_start_matches("r#");
                    let skipped = field_attrs.contains("skip)")
                        || field_attrs.contains("skip,")
                        || field_attrs.contains("skip_deserializing")
                        || field_attrs.contains("flatten");
                    if !skipped && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                        let renamed = field_attrs
                            .split("rename = \"")
                            .nth(1)
                            .and_then(|r| r.split('"').next());
                        keys.insert(renamed.unwrap_or(name).to_string());
                        for alias in field_attrs.split("alias = \"").skip(1) {
                            if let Some(a) = alias.split('"').next() {
                                keys.insert(a.to_string());
                            }
                        }
                    }
                }
                field_attrs.clear();
            }
        }
    }
    keys
}

/// `{a,b}_c` → `a_c`, `b_c` (the READMEs' shorthand for sibling keys).
fn expand(s: &str) -> Vec<String> {
    let (Some(open), Some(close)) = (s.find('{'), s.find('}')) else {
        return vec![s.to_string()];
    };
    if close < open {
        return vec![s.to_string()];
    }
    s[open + 1..close]
        .split(',')
        .flat_map(|alt| expand(&format!("{}{}{}", &s[..open], alt.trim(), &s[close + 1..])))
        .collect()
}

/// Every word inside a code span of `md`.
fn code_words(md: &str) -> BTreeSet<String> {
    let mut words = BTreeSet::new();
    for (i, span) in md.split('`').enumerate() {
        if i % 2 == 0 {
            continue;
        }
        for s in expand(span) {
            for w in s.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
                if !w.is_empty() {
                    words.insert(w.to_string());
                }
            }
        }
    }
    words
}

/// The last segment of each key in a README's key tables (`| key | default | … |`).
fn table_keys(md: &str) -> BTreeSet<String> {
    let mut keys = BTreeSet::new();
    let mut in_table = false;
    for line in md.lines() {
        if line.starts_with("| key |") {
            in_table = true;
            continue;
        }
        if !line.starts_with('|') {
            in_table = false;
            continue;
        }
        if !in_table || line.starts_with("|---") {
            continue;
        }
        let cell = line.split('|').nth(1).unwrap_or("");
        for (i, span) in cell.split('`').enumerate() {
            if i % 2 == 0 {
                continue;
            }
            for key in span.split(" / ").flat_map(expand) {
                if let Some(last) = key.trim().rsplit('.').next() {
                    if !last.is_empty()
                        && last.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                    {
                        keys.insert(last.to_string());
                    }
                }
            }
        }
    }
    keys
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Fields of the config structs that components embed: in `core/` (TLS,
/// auth, the exporters' delivery keys, Kafka's client settings, …) and in
/// a crate's files beside its component folders (the polling receivers'
/// keys in `receivers/src/polling.rs`).
fn shared_keys() -> BTreeSet<String> {
    let mut files = sources(&root().join("core/src"));
    for kind in ["receivers", "processors", "exporters", "extensions"] {
        let src = root().join(kind).join("src");
        for e in std::fs::read_dir(&src).expect("crate src").flatten() {
            if e.path().extension().is_some_and(|x| x == "rs") {
                files.push(e.path());
            }
        }
    }
    files.iter().flat_map(|p| config_keys(&read(p))).collect()
}

#[test]
fn every_component_folder_has_a_readme_that_names_every_key_of_its_config() {
    let mut problems = Vec::new();
    for dir in components() {
        let readme = dir.join("README.md");
        if !readme.exists() {
            problems.push(format!("{}: no README.md", dir.display()));
            continue;
        }
        let mut md = read(&readme);
        // Keys every component of a crate shares are documented once, in the crate's README.
        if let Some(crate_readme) = dir
            .parent()
            .and_then(Path::parent)
            .map(|c| c.join("README.md"))
        {
            if crate_readme.exists() {
                md.push_str(&read(&crate_readme));
            }
        }
        let words = code_words(&md);
        let keys: BTreeSet<String> = sources(&dir)
            .iter()
            .flat_map(|p| config_keys(&read(p)))
            .collect();
        let missing: Vec<&String> = keys.iter().filter(|k| !words.contains(*k)).collect();
        if !missing.is_empty() {
            problems.push(format!(
                "{}: config keys named in no README: {missing:?}",
                dir.display()
            ));
        }
        let shared = shared_keys();
        let unknown: Vec<String> = table_keys(&read(&readme))
            .into_iter()
            .filter(|k| !keys.contains(k) && !shared.contains(k))
            .collect();
        if !unknown.is_empty() {
            problems.push(format!(
                "{}: README keys no config struct has: {unknown:?}",
                readme.display()
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_shared_keys_in_core_are_documented() {
    let mut md = read(&root().join("core/README.md"));
    for crate_readme in ["exporters/README.md", "extensions/README.md"] {
        md.push_str(&read(&root().join(crate_readme)));
    }
    for dir in components() {
        if let Ok(t) = std::fs::read_to_string(dir.join("README.md")) {
            md.push_str(&t);
        }
    }
    let words = code_words(&md);
    let missing: Vec<String> = shared_keys()
        .into_iter()
        .filter(|k| !words.contains(k))
        .collect();
    assert!(
        missing.is_empty(),
        "core config keys named in no README: {missing:?}"
    );
}

#[test]
fn the_checks_see_a_missing_key_and_an_unknown_one() {
    let src = "#[derive(Deserialize)]\n#[serde(deny_unknown_fields)]\npub struct C {\n    /// Doc.\n    #[serde(default)]\n    pub endpoint: String,\n    #[serde(rename = \"type\")]\n    pub kind: String,\n    #[serde(skip)]\n    pub hidden: u8,\n}\n#[derive(Deserialize)]\npub struct Answer {\n    pub queues: Vec<String>,\n}\n";
    let keys = config_keys(src);
    assert_eq!(
        keys,
        ["endpoint", "type"].iter().map(|s| s.to_string()).collect()
    );
    let words = code_words("`protocols.{grpc,http}.endpoint` and `max_{a,b}_size`");
    assert!(words.contains("endpoint") && words.contains("max_a_size") && !words.contains("type"));
    let table =
        "| key | default |\n|---|---|\n| `retry.initial_interval` / `max_interval` | 1s |\n";
    assert_eq!(
        table_keys(table),
        ["initial_interval", "max_interval"]
            .iter()
            .map(|s| s.to_string())
            .collect()
    );
}

#[test]
fn the_landing_readme_is_a_landing_page_that_links_every_component() {
    let md = read(&root().join("README.md"));
    let lines = md.lines().count();
    assert!(
        lines <= 300,
        "README.md has {lines} lines: the reference belongs beside the components"
    );
    for dir in components() {
        let rel = dir.strip_prefix(root()).expect("under root");
        let linked = md.contains(&format!("({}/README.md)", rel.display()))
            || dir.parent().and_then(Path::parent).is_some_and(|c| {
                let crate_rel = c.strip_prefix(root()).expect("under root");
                md.contains(&format!("({}/README.md)", crate_rel.display()))
                    && read(&c.join("README.md")).contains(&format!(
                        "(src/{}/README.md)",
                        dir.file_name().and_then(|n| n.to_str()).unwrap_or("")
                    ))
            });
        assert!(
            linked,
            "README.md does not lead to {}/README.md",
            rel.display()
        );
    }
}

/// The YAML blocks of a Markdown file of the repository, each a whole config.
fn yaml_blocks(file: &str) -> Vec<String> {
    let md = read(&root().join(file));
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in md.lines() {
        match (&mut current, line.trim_end()) {
            (None, "```yaml") => current = Some(String::new()),
            (Some(b), "```") => {
                blocks.push(std::mem::take(b));
                current = None;
            }
            (Some(b), l) => {
                b.push_str(l);
                b.push('\n');
            }
            (None, _) => {}
        }
    }
    blocks
}

/// What `causeway validate` says against each of `blocks` of `file` that
/// it refuses.
fn invalid_blocks(file: &str, blocks: &[String]) -> Vec<String> {
    let dir = tempfile::tempdir().expect("dir");
    let mut problems = Vec::new();
    for (i, block) in blocks.iter().enumerate() {
        let path = dir.path().join(format!("block-{i}.yaml"));
        std::fs::write(&path, block).expect("write");
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_causeway"))
            .args(["validate", "--config"])
            .arg(&path)
            .output()
            .expect("run causeway validate");
        if !out.status.success() {
            problems.push(format!(
                "{file} yaml block {i}:\n{block}\n{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
    }
    problems
}

#[test]
fn every_yaml_block_of_the_landing_readme_validates_as_written() {
    let blocks = yaml_blocks("README.md");
    assert!(
        blocks
            .iter()
            .any(|b| b.contains("gateway_log") && b.contains("correlate")),
        "the wiring block is gone from README.md"
    );
    let problems = invalid_blocks("README.md", &blocks);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The configuration reference's profiles pipeline into `correlate` is a
/// config that validates as written.
#[test]
fn the_configuration_references_profiles_pipeline_validates_as_written() {
    let file = "docs/configuration.md";
    let blocks = yaml_blocks(file);
    assert!(
        blocks
            .iter()
            .any(|b| b.contains("profiles: { receivers: [pprof") && b.contains("correlate")),
        "the profiles → correlate example is gone from {file}"
    );
    let problems = invalid_blocks(file, &blocks);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Every component README has a whole configuration with the component in
/// it (a YAML block with a `service:` section), and every such block
/// validates as written; a block without `service:` shows a few keys.
#[test]
fn every_component_readme_has_a_whole_example_that_validates() {
    let mut problems = Vec::new();
    for dir in components() {
        let Ok(rel) = dir
            .join("README.md")
            .strip_prefix(root())
            .map(Path::to_path_buf)
        else {
            continue;
        };
        let file = rel.display().to_string();
        let whole: Vec<String> = yaml_blocks(&file)
            .into_iter()
            .filter(|b| b.lines().any(|l| l.starts_with("service:")))
            .collect();
        let name = dir
            .file_name()
            .map(|n| n.to_string_lossy().to_string())
            .unwrap_or_default();
        if !whole
            .iter()
            .any(|b| b.contains(&format!("  {name}")) || b.contains(&format!("{name}/")))
        {
            problems.push(format!(
                "{file}: no whole configuration with `{name}` in it"
            ));
        }
        problems.extend(invalid_blocks(&file, &whole));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
