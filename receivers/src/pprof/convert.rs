//! pprof (`perftools.profiles.Profile`, what Go's `net/http/pprof`,
//! async-profiler's converter and most profilers write) into an OTLP
//! profiles request (`v1development`, OTLP 1.9's dictionary): one OTLP
//! profile per sample type, sharing one dictionary; stacks interned; a
//! sample's labels its attributes; the labels that name the span it ran
//! under (`span_id` of otel-profiling-go, `span id` / `local root span id`
//! of Datadog, `profile_id` of Pyroscope's older integration) its link.

use opentelemetry_proto::tonic::collector::profiles::v1development::ExportProfilesServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::profiles::v1development as otlp;
use opentelemetry_proto::tonic::resource::v1::Resource;
use std::collections::HashMap;

/// The pprof messages, as `profile.proto` declares them.
pub mod pb {
    /// A profile.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Profile {
        /// What each value of a sample measures.
        #[prost(message, repeated, tag = "1")]
        pub sample_type: Vec<ValueType>,
        /// The samples.
        #[prost(message, repeated, tag = "2")]
        pub sample: Vec<Sample>,
        /// Binaries mapped.
        #[prost(message, repeated, tag = "3")]
        pub mapping: Vec<Mapping>,
        /// Code locations.
        #[prost(message, repeated, tag = "4")]
        pub location: Vec<Location>,
        /// Functions.
        #[prost(message, repeated, tag = "5")]
        pub function: Vec<Function>,
        /// Strings, the first empty.
        #[prost(string, repeated, tag = "6")]
        pub string_table: Vec<String>,
        /// When the profile was taken (ns since the epoch).
        #[prost(int64, tag = "9")]
        pub time_nanos: i64,
        /// How long it covers (ns).
        #[prost(int64, tag = "10")]
        pub duration_nanos: i64,
        /// What the period counts.
        #[prost(message, optional, tag = "11")]
        pub period_type: Option<ValueType>,
        /// Events between two samples.
        #[prost(int64, tag = "12")]
        pub period: i64,
    }
    /// A type and unit, as string indices.
    #[derive(Clone, Copy, PartialEq, prost::Message)]
    pub struct ValueType {
        /// The type (`cpu`, `contentions`, `delay`).
        #[prost(int64, tag = "1")]
        pub r#type: i64,
        /// The unit (`nanoseconds`, `count`).
        #[prost(int64, tag = "2")]
        pub unit: i64,
    }
    /// A stack and its values.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Sample {
        /// Locations, leaf first.
        #[prost(uint64, repeated, tag = "1")]
        pub location_id: Vec<u64>,
        /// One value per sample type.
        #[prost(int64, repeated, tag = "2")]
        pub value: Vec<i64>,
        /// Labels.
        #[prost(message, repeated, tag = "3")]
        pub label: Vec<Label>,
    }
    /// A label: a string or a number.
    #[derive(Clone, Copy, PartialEq, prost::Message)]
    pub struct Label {
        /// Its key.
        #[prost(int64, tag = "1")]
        pub key: i64,
        /// A string value.
        #[prost(int64, tag = "2")]
        pub str: i64,
        /// A numeric value.
        #[prost(int64, tag = "3")]
        pub num: i64,
        /// The numeric value's unit.
        #[prost(int64, tag = "4")]
        pub num_unit: i64,
    }
    /// A mapped binary.
    #[derive(Clone, Copy, PartialEq, prost::Message)]
    pub struct Mapping {
        /// Its id.
        #[prost(uint64, tag = "1")]
        pub id: u64,
        /// Start address.
        #[prost(uint64, tag = "2")]
        pub memory_start: u64,
        /// End address.
        #[prost(uint64, tag = "3")]
        pub memory_limit: u64,
        /// Offset in the file.
        #[prost(uint64, tag = "4")]
        pub file_offset: u64,
        /// The file.
        #[prost(int64, tag = "5")]
        pub filename: i64,
    }
    /// A code location.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Location {
        /// Its id.
        #[prost(uint64, tag = "1")]
        pub id: u64,
        /// Its mapping.
        #[prost(uint64, tag = "2")]
        pub mapping_id: u64,
        /// Its address.
        #[prost(uint64, tag = "3")]
        pub address: u64,
        /// Its lines, the innermost (inlined) first.
        #[prost(message, repeated, tag = "4")]
        pub line: Vec<Line>,
    }
    /// A line of a function.
    #[derive(Clone, Copy, PartialEq, prost::Message)]
    pub struct Line {
        /// The function.
        #[prost(uint64, tag = "1")]
        pub function_id: u64,
        /// The line.
        #[prost(int64, tag = "2")]
        pub line: i64,
        /// The column.
        #[prost(int64, tag = "3")]
        pub column: i64,
    }
    /// A function.
    #[derive(Clone, Copy, PartialEq, prost::Message)]
    pub struct Function {
        /// Its id.
        #[prost(uint64, tag = "1")]
        pub id: u64,
        /// Its name.
        #[prost(int64, tag = "2")]
        pub name: i64,
        /// Its name in the binary.
        #[prost(int64, tag = "3")]
        pub system_name: i64,
        /// Its source file.
        #[prost(int64, tag = "4")]
        pub filename: i64,
        /// Its first line.
        #[prost(int64, tag = "5")]
        pub start_line: i64,
    }
}

/// Why a pprof profile was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConvertError {
    /// Not a pprof protobuf.
    #[error("not a pprof profile: {0}")]
    Decode(String),
    /// An index or id that names nothing.
    #[error("pprof profile refers to a missing {0}")]
    Dangling(&'static str),
    /// Over a limit.
    #[error("pprof profile too large: {0}")]
    TooLarge(&'static str),
}

/// The limits a profile must keep.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Samples in one profile.
    pub max_samples: usize,
    /// Frames in one stack.
    pub max_depth: usize,
}

/// The labels that name the span a sample ran under, by profiler, in the
/// order they are looked for: hex span ids, then Datadog's decimal ones.
const SPAN_LABELS: [&str; 2] = ["span_id", "profile_id"];
const DATADOG_SPAN_LABELS: [&str; 2] = ["span id", "local root span id"];

/// Interning of a dictionary's tables.
#[derive(Default)]
struct Dict {
    d: otlp::ProfilesDictionary,
    strings: HashMap<String, i32>,
    stacks: HashMap<Vec<i32>, i32>,
    links: HashMap<Vec<u8>, i32>,
    attributes: HashMap<(i32, String), i32>,
}

fn index(len: usize) -> i32 {
    i32::try_from(len).unwrap_or(i32::MAX)
}

impl Dict {
    fn new() -> Self {
        let mut d = Dict::default();
        // Every table's first entry is the zero value ("unset").
        d.d.mapping_table.push(Default::default());
        d.d.location_table.push(Default::default());
        d.d.function_table.push(Default::default());
        d.d.link_table.push(Default::default());
        d.d.attribute_table.push(Default::default());
        d.d.stack_table.push(Default::default());
        d.string("");
        d
    }

    fn string(&mut self, s: &str) -> i32 {
        if let Some(&i) = self.strings.get(s) {
            return i;
        }
        let i = index(self.d.string_table.len());
        self.d.string_table.push(s.to_string());
        self.strings.insert(s.to_string(), i);
        i
    }

    fn stack(&mut self, locations: Vec<i32>) -> i32 {
        if let Some(&i) = self.stacks.get(&locations) {
            return i;
        }
        let i = index(self.d.stack_table.len());
        self.d.stack_table.push(otlp::Stack {
            location_indices: locations.clone(),
        });
        self.stacks.insert(locations, i);
        i
    }

    fn link(&mut self, span_id: [u8; 8]) -> i32 {
        if let Some(&i) = self.links.get(span_id.as_slice()) {
            return i;
        }
        let i = index(self.d.link_table.len());
        // pprof knows the span, not its trace: the trace id stays unset.
        self.d.link_table.push(otlp::Link {
            trace_id: Vec::new(),
            span_id: span_id.to_vec(),
        });
        self.links.insert(span_id.to_vec(), i);
        i
    }

    fn attribute(&mut self, key: &str, value: AnyValue, unit: &str) -> i32 {
        let k = self.string(key);
        let id = (k, format!("{:?}{unit}", value.value));
        if let Some(&i) = self.attributes.get(&id) {
            return i;
        }
        let unit = self.string(unit);
        let i = index(self.d.attribute_table.len());
        self.d.attribute_table.push(otlp::KeyValueAndUnit {
            key_strindex: k,
            value: Some(value),
            unit_strindex: unit,
        });
        self.attributes.insert(id, i);
        i
    }
}

/// A span id from a label's text: 16 hex digits (otel-profiling-go,
/// Pyroscope), or a decimal number (Datadog).
fn span_id(text: Option<&str>, num: i64, decimal: bool) -> Option<[u8; 8]> {
    let id = if decimal {
        match text {
            Some(t) => t.trim().parse::<u64>().ok()?,
            None => u64::try_from(num).ok()?,
        }
    } else {
        let t = text?.trim();
        if t.len() != 16 {
            return None;
        }
        u64::from_str_radix(t, 16).ok()?
    };
    (id != 0).then(|| id.to_be_bytes())
}

/// Convert an encoded pprof profile (already inflated) into an OTLP
/// profiles request for `resource`. Returns the request and its samples.
pub fn convert(
    bytes: &[u8],
    resource: Resource,
    limits: Limits,
) -> Result<(ExportProfilesServiceRequest, usize), ConvertError> {
    use prost::Message;
    let p = pb::Profile::decode(bytes).map_err(|e| ConvertError::Decode(e.to_string()))?;
    if p.sample.len().saturating_mul(p.sample_type.len().max(1)) > limits.max_samples {
        return Err(ConvertError::TooLarge("more samples than max_samples"));
    }
    let mut d = Dict::new();
    let locations = locations(&p, &mut d)?;
    let rows = rows(&p, &mut d, &locations, limits)?;
    let (profiles, total) = profiles(&p, &mut d, &rows)?;
    let req = ExportProfilesServiceRequest {
        resource_profiles: vec![otlp::ResourceProfiles {
            resource: Some(resource),
            scope_profiles: vec![otlp::ScopeProfiles {
                scope: Some(InstrumentationScope {
                    name: "causeway/pprof".into(),
                    version: env!("CARGO_PKG_VERSION").into(),
                    ..Default::default()
                }),
                profiles,
                schema_url: String::new(),
            }],
            schema_url: String::new(),
        }],
        dictionary: Some(d.d),
    };
    Ok((req, total))
}

/// String `i` of the profile's table.
fn text(p: &pb::Profile, i: i64) -> Result<&str, ConvertError> {
    usize::try_from(i)
        .ok()
        .and_then(|i| p.string_table.get(i))
        .map(String::as_str)
        .ok_or(ConvertError::Dangling("string"))
}

/// Functions, mappings and locations into the dictionary; the locations'
/// indices there by their pprof ids.
fn locations(p: &pb::Profile, d: &mut Dict) -> Result<HashMap<u64, i32>, ConvertError> {
    let text = |i| text(p, i);
    let mut functions: HashMap<u64, i32> = HashMap::with_capacity(p.function.len());
    for f in &p.function {
        let (name, system, file) = (
            d.string(text(f.name)?),
            text(f.system_name)?,
            text(f.filename)?,
        );
        let (system, file) = (d.string(system), d.string(file));
        functions.insert(f.id, index(d.d.function_table.len()));
        d.d.function_table.push(otlp::Function {
            name_strindex: name,
            system_name_strindex: system,
            filename_strindex: file,
            start_line: f.start_line,
        });
    }
    let mut mappings: HashMap<u64, i32> = HashMap::with_capacity(p.mapping.len());
    for m in &p.mapping {
        let file = d.string(text(m.filename)?);
        mappings.insert(m.id, index(d.d.mapping_table.len()));
        d.d.mapping_table.push(otlp::Mapping {
            memory_start: m.memory_start,
            memory_limit: m.memory_limit,
            file_offset: m.file_offset,
            filename_strindex: file,
            attribute_indices: Vec::new(),
        });
    }
    let mut locations: HashMap<u64, i32> = HashMap::with_capacity(p.location.len());
    for l in &p.location {
        let mapping_index = match l.mapping_id {
            0 => 0,
            id => *mappings.get(&id).ok_or(ConvertError::Dangling("mapping"))?,
        };
        let lines = l
            .line
            .iter()
            .map(|x| {
                Ok(otlp::Line {
                    function_index: *functions
                        .get(&x.function_id)
                        .ok_or(ConvertError::Dangling("function"))?,
                    line: x.line,
                    column: x.column,
                })
            })
            .collect::<Result<Vec<_>, ConvertError>>()?;
        locations.insert(l.id, index(d.d.location_table.len()));
        d.d.location_table.push(otlp::Location {
            mapping_index,
            address: l.address,
            lines,
            attribute_indices: Vec::new(),
        });
    }
    Ok(locations)
}

/// A sample's stack, link and attributes, and its values (one per type).
struct Row {
    stack: i32,
    link: i32,
    attributes: Vec<i32>,
    values: Vec<i64>,
}

/// Samples: their stacks, links and attributes, once for every type.
fn rows(
    p: &pb::Profile,
    d: &mut Dict,
    locations: &HashMap<u64, i32>,
    limits: Limits,
) -> Result<Vec<Row>, ConvertError> {
    let text = |i| text(p, i);
    let mut rows = Vec::with_capacity(p.sample.len());
    for s in &p.sample {
        if s.location_id.len() > limits.max_depth {
            return Err(ConvertError::TooLarge("a stack deeper than max_depth"));
        }
        let stack = s
            .location_id
            .iter()
            .map(|id| {
                locations
                    .get(id)
                    .copied()
                    .ok_or(ConvertError::Dangling("location"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let stack = d.stack(stack);
        let mut link = 0;
        let mut attributes = Vec::with_capacity(s.label.len());
        for l in &s.label {
            let key = text(l.key)?;
            let value = (l.str != 0).then(|| text(l.str)).transpose()?;
            let id = if SPAN_LABELS.contains(&key) {
                span_id(value, l.num, false)
            } else if DATADOG_SPAN_LABELS.contains(&key) {
                span_id(value, l.num, true)
            } else {
                None
            };
            // The span itself before Datadog's local root.
            if let Some(id) = id.filter(|_| link == 0 || key != "local root span id") {
                link = d.link(id);
            }
            let (v, unit) = match value {
                Some(v) => (any_value::Value::StringValue(v.to_string()), ""),
                None => (any_value::Value::IntValue(l.num), text(l.num_unit)?),
            };
            attributes.push(d.attribute(key, AnyValue { value: Some(v) }, unit));
        }
        rows.push(Row {
            stack,
            link,
            attributes,
            values: s.value.clone(),
        });
    }
    Ok(rows)
}

/// One OTLP profile per sample type, and the samples in all.
fn profiles(
    p: &pb::Profile,
    d: &mut Dict,
    rows: &[Row],
) -> Result<(Vec<otlp::Profile>, usize), ConvertError> {
    let text = |i| text(p, i);
    let period_type = match p.period_type {
        Some(t) => Some(otlp::ValueType {
            type_strindex: d.string(text(t.r#type)?),
            unit_strindex: d.string(text(t.unit)?),
        }),
        None => None,
    };
    let mut profiles = Vec::with_capacity(p.sample_type.len());
    let mut total = 0;
    for (i, t) in p.sample_type.iter().enumerate() {
        let sample_type = otlp::ValueType {
            type_strindex: d.string(text(t.r#type)?),
            unit_strindex: d.string(text(t.unit)?),
        };
        let samples: Vec<otlp::Sample> = rows
            .iter()
            .filter_map(|r| {
                let v = r.values.get(i).copied().filter(|v| *v != 0)?;
                Some(otlp::Sample {
                    stack_index: r.stack,
                    attribute_indices: r.attributes.clone(),
                    link_index: r.link,
                    values: vec![v],
                    timestamps_unix_nano: Vec::new(),
                })
            })
            .collect();
        total += samples.len();
        profiles.push(otlp::Profile {
            sample_type: Some(sample_type),
            samples,
            time_unix_nano: u64::try_from(p.time_nanos).unwrap_or(0),
            duration_nano: u64::try_from(p.duration_nanos).unwrap_or(0),
            period_type,
            period: p.period,
            original_payload_format: "pprof".into(),
            ..Default::default()
        });
    }
    Ok((profiles, total))
}

/// A string attribute.
pub fn kv(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(value.into())),
        }),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    /// A CPU profile of two samples, one under a span (otel-profiling-go's
    /// label), one under Datadog's decimal labels.
    fn profile() -> pb::Profile {
        pb::Profile {
            sample_type: vec![
                pb::ValueType { r#type: 1, unit: 2 },
                pb::ValueType { r#type: 3, unit: 4 },
            ],
            sample: vec![
                pb::Sample {
                    location_id: vec![2, 1],
                    value: vec![3, 30_000_000],
                    label: vec![
                        pb::Label {
                            key: 7,
                            str: 8,
                            ..Default::default()
                        },
                        pb::Label {
                            key: 9,
                            str: 10,
                            ..Default::default()
                        },
                    ],
                },
                pb::Sample {
                    location_id: vec![1],
                    value: vec![1, 0],
                    label: vec![
                        pb::Label {
                            key: 11,
                            str: 12,
                            ..Default::default()
                        },
                        pb::Label {
                            key: 13,
                            str: 14,
                            ..Default::default()
                        },
                    ],
                },
            ],
            location: vec![
                pb::Location {
                    id: 1,
                    line: vec![pb::Line {
                        function_id: 10,
                        line: 20,
                        column: 0,
                    }],
                    ..Default::default()
                },
                pb::Location {
                    id: 2,
                    line: vec![pb::Line {
                        function_id: 11,
                        line: 42,
                        column: 0,
                    }],
                    ..Default::default()
                },
            ],
            function: vec![
                pb::Function {
                    id: 10,
                    name: 5,
                    system_name: 5,
                    filename: 15,
                    start_line: 1,
                },
                pb::Function {
                    id: 11,
                    name: 6,
                    system_name: 6,
                    filename: 15,
                    start_line: 30,
                },
            ],
            string_table: strings(&[
                "",
                "samples",
                "count",
                "cpu",
                "nanoseconds",
                "main.handle",
                "main.parseAST",
                "span_id",
                "00f067aa0ba902b7",
                "span_name",
                "GET /parse",
                "span id",
                "1234",
                "local root span id",
                "99",
                "/src/main.go",
            ]),
            time_nanos: 1_700_000_000_000_000_000,
            duration_nanos: 10_000_000_000,
            period_type: Some(pb::ValueType { r#type: 3, unit: 4 }),
            period: 10_000_000,
            mapping: Vec::new(),
        }
    }

    fn limits() -> Limits {
        Limits {
            max_samples: 1000,
            max_depth: 64,
        }
    }

    #[test]
    fn each_sample_type_is_a_profile_its_span_a_link_and_its_frames_the_dictionarys() {
        let (req, samples) = convert(
            &profile().encode_to_vec(),
            Resource {
                attributes: vec![kv("service.name", "parser")],
                ..Default::default()
            },
            limits(),
        )
        .unwrap();
        // samples/count: both; cpu/nanoseconds: the one with a value.
        assert_eq!(samples, 3);
        let d = req.dictionary.as_ref().unwrap();
        let s = |i: i32| d.string_table[i as usize].as_str();
        let profiles = &req.resource_profiles[0].scope_profiles[0].profiles;
        assert_eq!(profiles.len(), 2);
        let cpu = &profiles[1];
        assert_eq!(s(cpu.sample_type.unwrap().type_strindex), "cpu");
        assert_eq!(cpu.samples.len(), 1);
        assert_eq!(cpu.samples[0].values, vec![30_000_000]);
        // Leaf first: parseAST at line 42, under handle.
        let stack = &d.stack_table[cpu.samples[0].stack_index as usize];
        let frame = |k: usize| {
            let l = &d.location_table[stack.location_indices[k] as usize].lines[0];
            (
                s(d.function_table[l.function_index as usize].name_strindex),
                l.line,
            )
        };
        assert_eq!(frame(0), ("main.parseAST", 42));
        assert_eq!(frame(1), ("main.handle", 20));
        // The span it ran under, from otel-profiling-go's hex label.
        let link = &d.link_table[cpu.samples[0].link_index as usize];
        assert_eq!(hex::encode(&link.span_id), "00f067aa0ba902b7");
        // Datadog's span (not its local root), decimal.
        let other = &profiles[0].samples[1];
        let link = &d.link_table[other.link_index as usize];
        assert_eq!(link.span_id, 1234u64.to_be_bytes().to_vec());
        // Labels kept as attributes.
        let attrs: Vec<&str> = cpu.samples[0]
            .attribute_indices
            .iter()
            .map(|&i| s(d.attribute_table[i as usize].key_strindex))
            .collect();
        assert_eq!(attrs, ["span_id", "span_name"]);
        // What the receiver's check takes: the request is whole.
        let scan = causeway_core::wire::scan(causeway_core::Signal::Profiles, &req.encode_to_vec())
            .unwrap();
        assert_eq!(scan.items, 3);
    }

    #[test]
    fn a_dangling_id_or_a_profile_over_the_limits_is_refused() {
        let mut p = profile();
        p.sample[0].location_id.push(77);
        let r = convert(&p.encode_to_vec(), Resource::default(), limits());
        assert_eq!(r.unwrap_err(), ConvertError::Dangling("location"));
        let mut p = profile();
        p.function[0].name = 999;
        let r = convert(&p.encode_to_vec(), Resource::default(), limits());
        assert_eq!(r.unwrap_err(), ConvertError::Dangling("string"));
        let r = convert(
            &profile().encode_to_vec(),
            Resource::default(),
            Limits {
                max_samples: 3,
                max_depth: 64,
            },
        );
        assert!(matches!(r, Err(ConvertError::TooLarge(_))));
        let r = convert(
            &profile().encode_to_vec(),
            Resource::default(),
            Limits {
                max_samples: 100,
                max_depth: 1,
            },
        );
        assert!(matches!(r, Err(ConvertError::TooLarge(_))));
        assert!(matches!(
            convert(b"\xff\xff\xff", Resource::default(), limits()),
            Err(ConvertError::Decode(_))
        ));
    }
}
