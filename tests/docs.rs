//! The configuration reference lives beside the code: every component folder
//! has a README.md whose key table is generated from its config structs
//! (`causeway schema --keys`) and current; the JSON Schema of `causeway
//! schema` accepts every shipped configuration; the keys `core/` shares are
//! named in the READMEs; every example validates; the landing README stays
//! a landing page.

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
fn the_key_reader_sees_serde_names_and_expanded_words() {
    let src = "#[derive(Deserialize)]\n#[serde(deny_unknown_fields)]\npub struct C {\n    /// Doc.\n    #[serde(default)]\n    pub endpoint: String,\n    #[serde(rename = \"type\")]\n    pub kind: String,\n    #[serde(skip)]\n    pub hidden: u8,\n}\n#[derive(Deserialize)]\npub struct Answer {\n    pub queues: Vec<String>,\n}\n";
    let keys = config_keys(src);
    assert_eq!(
        keys,
        ["endpoint", "type"].iter().map(|s| s.to_string()).collect()
    );
    let words = code_words("`protocols.{grpc,http}.endpoint` and `max_{a,b}_size`");
    assert!(words.contains("endpoint") && words.contains("max_a_size") && !words.contains("type"));
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

/// `causeway schema` with `args`.
fn causeway_schema(args: &[&str]) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_causeway"))
        .arg("schema")
        .args(args)
        .output()
        .expect("run causeway schema");
    assert!(
        out.status.success(),
        "causeway schema {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

/// The component types of the JSON Schema, as `section/type`.
fn schema_types(schema: &serde_json::Value) -> Vec<String> {
    let mut out = Vec::new();
    for section in ["receivers", "processors", "exporters", "extensions"] {
        let by_type = schema["properties"][section]["patternProperties"]
            .as_object()
            .unwrap_or_else(|| panic!("no {section} in the schema"));
        for pattern in by_type.keys() {
            let ty = pattern
                .trim_start_matches('^')
                .split('(')
                .next()
                .unwrap_or("");
            out.push(format!("{section}/{ty}"));
        }
    }
    out
}

/// Every `(key, default, description)` of the schema.
fn described_defaults(v: &serde_json::Value, out: &mut Vec<(String, String)>) {
    match v {
        serde_json::Value::Object(m) => {
            if let (Some(d), Some(text)) = (m.get("default"), m.get("description")) {
                let d = match d {
                    serde_json::Value::String(s) => s.clone(),
                    d => d.to_string(),
                };
                out.push((d, text.as_str().unwrap_or_default().to_string()));
            }
            m.values().for_each(|v| described_defaults(v, out));
        }
        serde_json::Value::Array(a) => a.iter().for_each(|v| described_defaults(v, out)),
        _ => {}
    }
}

/// Every component type has its key table in its folder's README, each
/// exactly what `causeway schema --keys` makes of the config structs now
/// (`scripts/readme-keys.py` rewrites them); no doc comment writes its
/// field's default again.
#[test]
fn every_component_readmes_key_table_is_generated_from_its_config_structs() {
    let schema: serde_json::Value =
        serde_json::from_str(&causeway_schema(&[])).expect("schema JSON");
    let mut problems = Vec::new();
    let mut tabled = BTreeSet::new();
    for dir in components() {
        let readme = dir.join("README.md");
        let md = read(&readme);
        for block in md.split("<!-- keys: ").skip(1) {
            let Some((id, rest)) = block.split_once(" -->\n") else {
                problems.push(format!(
                    "{}: a keys marker without its end",
                    readme.display()
                ));
                continue;
            };
            let table = rest.split("<!-- /keys -->").next().unwrap_or_default();
            if table != causeway_schema(&["--keys", id]) {
                problems.push(format!(
                    "{}: the key table of {id} is stale: run scripts/readme-keys.py",
                    readme.display()
                ));
            }
            tabled.insert(id.to_string());
        }
    }
    for ty in schema_types(&schema) {
        if !tabled.contains(&ty) {
            problems.push(format!("{ty}: no key table in any component README"));
        }
    }
    let mut defaults = Vec::new();
    described_defaults(&schema, &mut defaults);
    for (d, text) in defaults {
        if [format!("(default {d})"), format!("(default `{d}`)")]
            .iter()
            .any(|w| text.contains(w.as_str()))
        {
            problems.push(format!("the default {d} is written again in: {text}"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// What python-jsonschema (draft-07, as YAML language servers read it)
/// says of each named instance against `schema`: `name: path: message`.
fn schema_errors(schema: &str, instances: &[(String, serde_json::Value)]) -> Vec<String> {
    let dir = tempfile::tempdir().expect("dir");
    std::fs::write(dir.path().join("schema.json"), schema).expect("write");
    let list: Vec<serde_json::Value> = instances
        .iter()
        .map(|(n, v)| serde_json::json!({"name": n, "instance": v}))
        .collect();
    std::fs::write(
        dir.path().join("instances.json"),
        serde_json::to_string(&list).expect("json"),
    )
    .expect("write");
    let python = std::env::var("CAUSEWAY_SCHEMA_PYTHON")
        .expect("CAUSEWAY_SCHEMA_PYTHON (python with jsonschema): source scripts/peers.sh");
    let out = std::process::Command::new(python)
        .arg("-c")
        .arg(
            "import json, sys, jsonschema\n\
             schema = json.load(open(sys.argv[1]))\n\
             jsonschema.Draft7Validator.check_schema(schema)\n\
             v = jsonschema.Draft7Validator(schema)\n\
             for i in json.load(open(sys.argv[2])):\n\
             \x20   for e in v.iter_errors(i['instance']):\n\
             \x20       e = jsonschema.exceptions.best_match([e])\n\
             \x20       print(i['name'] + ': ' + '.'.join(map(str, e.absolute_path)) + ': ' + e.message)\n",
        )
        .arg(dir.path().join("schema.json"))
        .arg(dir.path().join("instances.json"))
        .output()
        .expect("run python-jsonschema");
    assert!(
        out.status.success(),
        "python-jsonschema: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

/// The shipped configurations and every whole example of the docs.
fn shipped_configs() -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut files = vec![
        root().join("pipeline.yaml"),
        root().join("deploy/docker/pipeline.yaml"),
    ];
    let mut examples: Vec<PathBuf> = std::fs::read_dir(root().join("examples"))
        .expect("examples")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    examples.sort();
    files.extend(examples);
    for f in files {
        out.push((f.display().to_string(), read(&f)));
    }
    let mut docs = vec!["README.md".to_string(), "docs/configuration.md".to_string()];
    for dir in components() {
        if let Ok(rel) = dir.join("README.md").strip_prefix(root()) {
            docs.push(rel.display().to_string());
        }
    }
    for file in docs {
        for (i, b) in yaml_blocks(&file).into_iter().enumerate() {
            if b.lines().any(|l| l.starts_with("service:")) {
                out.push((format!("{file} yaml block {i}"), b));
            }
        }
    }
    out
}

/// `text` with each `${env:NAME:-default}` replaced by its default.
fn env_defaults(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find("${env:") {
        out.push_str(&rest[..at]);
        let Some(end) = rest[at..].find('}') else {
            break;
        };
        let inner = &rest[at + 6..at + end];
        out.push_str(inner.split_once(":-").map_or("", |(_, d)| d));
        rest = &rest[at + end + 1..];
    }
    out.push_str(rest);
    out
}

/// `causeway schema` is a valid draft-07 schema that accepts every shipped
/// configuration and every whole example of the docs, and refuses the
/// mistakes an editor should underline: a misspelt key, a duration written
/// as a number, an unknown component type, a policy without its settings.
#[test]
fn the_json_schema_accepts_every_shipped_config_and_refuses_mistakes() {
    let schema = causeway_schema(&[]);
    let configs = shipped_configs();
    assert!(configs.len() > 30, "{} configs", configs.len());
    let instances: Vec<(String, serde_json::Value)> = configs
        .iter()
        .map(|(name, text)| {
            // As the loader reads it with no variable set.
            let text = env_defaults(text);
            let v: serde_json::Value =
                serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{name}: not YAML: {e}"));
            (name.clone(), v)
        })
        .collect();
    let errors = schema_errors(&schema, &instances);
    assert!(errors.is_empty(), "{}", errors.join("\n"));

    let wrong = [
        (
            "misspelt",
            "receivers:\n  otlp:\n    protocols:\n      grpc:\n        endpiont: 127.0.0.1:4317\n",
            "protocols.grpc",
        ),
        (
            "number",
            "processors:\n  batch/fast:\n    timeout: 10\n",
            "timeout",
        ),
        (
            "unknown type",
            "exporters:\n  jaeger_thrift: {}\n",
            "jaeger_thrift",
        ),
        (
            "policy",
            "processors:\n  tail_sampling:\n    policies:\n      - { name: slow, type: latency }\n",
            "policies.0",
        ),
    ];
    let instances: Vec<(String, serde_json::Value)> = wrong
        .iter()
        .map(|(n, t, _)| (n.to_string(), serde_yaml::from_str(t).expect("YAML")))
        .collect();
    let errors = schema_errors(&schema, &instances);
    for (name, _, at) in wrong {
        assert!(
            errors
                .iter()
                .any(|e| e.starts_with(&format!("{name}: ")) && e.contains(at)),
            "{name} not refused at {at}: {errors:?}"
        );
    }
}
