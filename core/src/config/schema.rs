//! The JSON Schema of a whole pipeline file (`causeway schema`), for the
//! YAML language servers of editors: each component section's schema comes
//! from the config struct its factory decodes, `service` from
//! [`ServiceConfig`]; keys, types, defaults and descriptions are those of
//! the structs and their doc comments, written nowhere else.

use schemars::generate::SchemaSettings;
use serde_json::{json, Map, Value};

use super::ServiceConfig;
use crate::registry::{Kind, Registry};

/// The sections that hold components, and what each holds.
const SECTIONS: [(Kind, &str); 4] = [
    (Kind::Receiver, "Receivers by id (`type` or `type/name`)."),
    (Kind::Processor, "Processors by id (`type` or `type/name`)."),
    (Kind::Exporter, "Exporters by id (`type` or `type/name`)."),
    (Kind::Extension, "Extensions by id (`type` or `type/name`)."),
];

/// The schema of one component type's section, as its factory declares it.
pub fn section(
    registry: &Registry,
    kind: Kind,
    ty: &str,
    g: &mut schemars::SchemaGenerator,
) -> Option<schemars::Schema> {
    match kind {
        Kind::Receiver => registry.receiver(ty).map(|f| f.schema(g)),
        Kind::Processor => registry.processor(ty).map(|f| f.schema(g)),
        Kind::Exporter => registry.exporter(ty).map(|f| f.schema(g)),
        Kind::Extension => registry.extension(ty).map(|f| f.schema(g)),
        Kind::Connector => None,
    }
}

/// A generator for draft-07, the draft YAML language servers read best.
pub fn generator() -> schemars::SchemaGenerator {
    SchemaSettings::draft07().for_deserialize().into_generator()
}

/// The JSON Schema (draft-07) of a pipeline file for the components of
/// `registry`.
pub fn pipeline_file(registry: &Registry) -> Value {
    let mut g = generator();
    let mut properties = Map::new();
    for (kind, description) in SECTIONS {
        let mut by_type = Map::new();
        for ty in registry.kinds(kind) {
            let Some(s) = section(registry, kind, ty, &mut g) else {
                continue;
            };
            // `otlp:` with nothing under it is the section's defaults.
            let s = json!({"anyOf": [{"type": "null"}, s.to_value()]});
            by_type.insert(format!("^{ty}(/\\S+)?$"), s);
        }
        properties.insert(
            kind.section().to_string(),
            json!({
                "type": ["object", "null"],
                "description": description,
                "patternProperties": by_type,
                "additionalProperties": false,
            }),
        );
    }
    properties.insert(
        Kind::Connector.section().to_string(),
        json!({
            "type": ["object", "null"],
            "description": "Connectors by id; this build has none.",
            "additionalProperties": false,
        }),
    );
    properties.insert(
        "service".to_string(),
        g.subschema_for::<ServiceConfig>().to_value(),
    );
    let definitions = g.take_definitions(true);
    let mut root = schemars::Schema::from(
        json!({
            "$schema": "http://json-schema.org/draft-07/schema#",
            "title": "causeway pipeline file",
            "type": "object",
            "properties": properties,
            "additionalProperties": false,
            "definitions": definitions,
        })
        .as_object()
        .cloned()
        .unwrap_or_default(),
    );
    for t in g.transforms_mut() {
        t.transform(&mut root);
    }
    root.to_value()
}

/// The Markdown key table of one component type's section (`causeway
/// schema --keys receivers/otlp`): every key, nested keys dotted, with its
/// type, default and the doc comment of its field.
pub fn key_table(registry: &Registry, kind: Kind, ty: &str) -> Option<String> {
    let mut g = generator();
    let root = section(registry, kind, ty, &mut g)?.to_value();
    let definitions = g.take_definitions(true);
    let mut keys = Keys {
        definitions: &definitions,
        rows: Vec::new(),
        path: Vec::new(),
    };
    keys.object("", &root);
    let mut out = String::from("| key | type | default | meaning |\n|---|---|---|---|\n");
    for r in keys.rows {
        out.push_str(&format!(
            "| `{}` | {} | {} | {} |\n",
            r.key, r.ty, r.default, r.meaning
        ));
    }
    Some(out)
}

/// One row of a key table.
struct Row {
    key: String,
    ty: String,
    default: String,
    meaning: String,
}

/// A walk through a section's schema, collecting its keys.
struct Keys<'a> {
    definitions: &'a Map<String, Value>,
    rows: Vec<Row>,
    /// The definitions being walked (a recursive type is listed once).
    path: Vec<String>,
}

impl<'a> Keys<'a> {
    /// Rows for every property of an object schema, under `prefix`.
    fn object(&mut self, prefix: &str, s: &'a Value) {
        let (s, _) = resolve(self.definitions, s);
        let Some(props) = s.get("properties").and_then(Value::as_object) else {
            return;
        };
        let required: Vec<&str> = s
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        for (name, p) in props {
            let key = format!("{prefix}{name}");
            self.property(&key, p, required.contains(&name.as_str()));
        }
    }

    /// The row of one key, then the rows of what it holds.
    fn property(&mut self, key: &str, p: &'a Value, required: bool) {
        let (s, def) = resolve(self.definitions, p);
        let meaning = p
            .get("description")
            .or_else(|| s.get("description"))
            .and_then(Value::as_str)
            .unwrap_or_default();
        let default = match p.get("default") {
            _ if required => "required".to_string(),
            Some(v) if !v.is_null() => format!("`{}`", inline(v)),
            Some(_) => "—".to_string(),
            None => "—".to_string(),
        };
        self.rows.push(Row {
            key: key.to_string(),
            ty: self.type_of(s, def),
            default,
            meaning: cell(meaning),
        });
        self.within(def, |k| k.inner(key, s));
    }

    /// `walk`, unless definition `def` is already being walked (a
    /// recursive type is listed once).
    fn within(&mut self, def: Option<&str>, walk: impl FnOnce(&mut Self)) {
        if let Some(name) = def {
            if self.path.iter().any(|n| n == name) {
                return;
            }
            self.path.push(name.to_string());
        }
        walk(self);
        if def.is_some() {
            self.path.pop();
        }
    }

    /// The rows of the keys inside a value: an object's properties, a
    /// list's or a map's items, each variant of a list of tagged objects.
    fn inner(&mut self, key: &str, s: &'a Value) {
        if s.get("properties").is_some() {
            self.object(&format!("{key}."), s);
        } else if let Some(items) = s.get("items") {
            let (items, def) = resolve(self.definitions, items);
            self.within(def, |k| k.items(key, items));
        } else if let Some(values) = s.get("additionalProperties").filter(|v| v.is_object()) {
            self.object(&format!("{key}.<name>."), values);
        }
    }

    /// The rows of a list's items: each variant of a list of objects tagged
    /// by `type` (sampling policies), or the items' keys.
    fn items(&mut self, key: &str, items: &'a Value) {
        if let Some(variants) = items.get("oneOf").and_then(Value::as_array) {
            for v in variants {
                let tag = v.pointer("/properties/type/const").and_then(Value::as_str);
                if let (Some(tag), Some(settings)) = (tag, v.pointer("/properties")) {
                    if let Some(t) = settings.get(tag) {
                        self.property(&format!("{key}[].{tag}"), t, false);
                    }
                }
            }
        } else {
            self.object(&format!("{key}[]."), items);
        }
    }
}

impl Keys<'_> {
    /// A schema's type as a key table says it.
    fn type_of(&self, s: &Value, def: Option<&str>) -> String {
        match def {
            Some("Duration") => return "duration".into(),
            Some("ByteSize") => return "size".into(),
            _ => {}
        }
        let consts: Vec<String> = s
            .get("enum")
            .and_then(Value::as_array)
            .map(|e| e.iter().map(|v| format!("`{}`", inline(v))).collect())
            .or_else(|| {
                s.get("oneOf").and_then(Value::as_array).and_then(|o| {
                    o.iter()
                        .map(|v| v.get("const").map(|c| format!("`{}`", inline(c))))
                        .collect()
                })
            })
            .unwrap_or_default();
        if !consts.is_empty() {
            return consts.join(", ");
        }
        let base = |t: &Value| -> String {
            match t {
                Value::String(t) => t.clone(),
                Value::Array(ts) => ts
                    .iter()
                    .filter_map(Value::as_str)
                    .filter(|t| *t != "null")
                    .collect::<Vec<_>>()
                    .join(" or "),
                _ => "any".into(),
            }
        };
        match s.get("type").map(base).as_deref() {
            Some("array") => {
                let item = s.get("items").map_or("any".into(), |i| {
                    let (i, def) = resolve(self.definitions, i);
                    self.type_of(i, def)
                });
                format!("list of {item}")
            }
            Some("object") if s.get("properties").is_none() => "map".into(),
            Some(t) => t.to_string(),
            None if s.get("oneOf").is_some() => "one of several forms".into(),
            None => "any".into(),
        }
    }
}

/// The schema behind `s`, and the name of its definition if it is one:
/// a `$ref`, an `allOf` of one (a `$ref` with a doc comment), or the
/// non-null member of an optional value.
fn resolve<'b>(defs: &'b Map<String, Value>, s: &'b Value) -> (&'b Value, Option<&'b str>) {
    if let Some(r) = s.get("$ref").and_then(Value::as_str) {
        let name = r.rsplit('/').next().unwrap_or(r);
        if let Some(d) = defs.get(name) {
            let (inner, _) = resolve(defs, d);
            return (inner, Some(name));
        }
    }
    for key in ["allOf", "anyOf", "oneOf"] {
        if let Some(all) = s.get(key).and_then(Value::as_array) {
            let some: Vec<&Value> = all
                .iter()
                .filter(|m| m.get("type").and_then(Value::as_str) != Some("null"))
                .collect();
            if let [one] = some.as_slice() {
                return resolve(defs, one);
            }
        }
    }
    (s, None)
}

/// A JSON value as written in a config: strings bare.
fn inline(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        v => v.to_string(),
    }
}

/// Text fit for one Markdown table cell.
fn cell(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::component::{BuildContext, Processor, ProcessorFactory};
    use crate::config::{ConfigError, Duration};
    use crate::error::BoxError;
    use crate::model::{Signal, SignalSet};
    use async_trait::async_trait;

    /// The `sketch` processor's section.
    #[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct SketchConfig {
        /// Items held before a flush.
        #[serde(default = "held")]
        held: u32,
        /// Flush this often.
        #[serde(default = "every")]
        every: Duration,
        /// Where to write.
        path: String,
        /// How.
        #[serde(default)]
        mode: Option<Mode>,
    }

    /// How it writes.
    #[derive(Debug, serde::Deserialize, serde::Serialize, schemars::JsonSchema)]
    #[serde(rename_all = "lowercase")]
    enum Mode {
        /// Append.
        Append,
        /// Replace.
        Replace,
    }

    fn held() -> u32 {
        512
    }
    fn every() -> Duration {
        Duration::millis(1500)
    }

    struct Sketch;
    #[async_trait]
    impl ProcessorFactory for Sketch {
        fn kind(&self) -> &'static str {
            "sketch"
        }
        fn signals(&self) -> SignalSet {
            SignalSet::only(Signal::Traces)
        }
        fn validate(&self, _: &serde_yaml::Value) -> Result<(), Vec<ConfigError>> {
            Ok(())
        }
        fn schema(&self, g: &mut schemars::SchemaGenerator) -> schemars::Schema {
            g.subschema_for::<SketchConfig>()
        }
        async fn build(
            &self,
            _: BuildContext,
            _: &serde_yaml::Value,
        ) -> Result<Box<dyn Processor>, BoxError> {
            Err("not in this test".into())
        }
    }

    /// The table says what the struct says: defaults from its default
    /// functions (a duration as it is written), required keys, enums'
    /// values, the doc comments.
    #[test]
    fn a_key_table_takes_keys_types_and_defaults_from_the_struct() {
        let mut r = Registry::new();
        r.add_processor(Sketch);
        let table = key_table(&r, Kind::Processor, "sketch").expect("a table");
        assert_eq!(
            table,
            "| key | type | default | meaning |\n|---|---|---|---|\n\
             | `every` | duration | `1s500ms` | Flush this often. |\n\
             | `held` | integer | `512` | Items held before a flush. |\n\
             | `mode` | `append`, `replace` | — | How. |\n\
             | `path` | string | required | Where to write. |\n"
        );
        assert!(key_table(&r, Kind::Processor, "nosuch").is_none());
        let file = pipeline_file(&r);
        let sketch = &file["properties"]["processors"]["patternProperties"]["^sketch(/\\S+)?$"];
        assert!(sketch.is_object(), "{file}");
        assert_eq!(
            file["properties"]["receivers"]["patternProperties"],
            json!({})
        );
    }
}
