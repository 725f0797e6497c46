//! Entry points for fuzzing: the paths hostile bytes take into the daemon,
//! callable with any input. The cargo-fuzz targets in `fuzz/` call them,
//! and `tests/fuzz_corpus.rs` replays the corpus and random inputs through
//! them on stable Rust in CI. Each must return, never panic.

use bytes::Bytes;
use causeway_core::Signal;
use prost::Message;

use crate::gateway_log::parse::{encode_record, Format, KeyMap};

/// The signal a selector byte picks (its low two bits).
fn signal_of(sel: u8) -> Signal {
    match sel & 3 {
        0 => Signal::Traces,
        1 => Signal::Logs,
        2 => Signal::Metrics,
        _ => Signal::Profiles,
    }
}

/// The OTLP/HTTP body path. The first byte picks the signal (low two
/// bits), JSON (bit 2) and gzip (bit 3); the rest is the body. Bodies go
/// through gzip (bounded at 1 MiB), the JSON decoder and re-encoding, the
/// wire scan with its string and nesting checks, and the repair of
/// invalid ids — everything the receiver does before queueing.
pub fn otlp_http_body(data: &[u8]) {
    let Some((&sel, body)) = data.split_first() else {
        return;
    };
    let signal = signal_of(sel);
    let body = if sel & 8 != 0 {
        match crate::otlp::http::inflate(causeway_core::compress::Codec::Gzip, body, 1 << 20) {
            Ok(b) => b,
            Err(_) => return,
        }
    } else {
        Bytes::copy_from_slice(body)
    };
    let body = if sel & 4 != 0 {
        use opentelemetry_proto::tonic::collector::{
            logs::v1::ExportLogsServiceRequest, metrics::v1::ExportMetricsServiceRequest,
            trace::v1::ExportTraceServiceRequest,
        };
        let encoded = match signal {
            Signal::Traces => serde_json::from_slice::<ExportTraceServiceRequest>(&body)
                .map(|r| r.encode_to_vec()),
            Signal::Logs => {
                serde_json::from_slice::<ExportLogsServiceRequest>(&body).map(|r| r.encode_to_vec())
            }
            Signal::Metrics => serde_json::from_slice::<ExportMetricsServiceRequest>(&body)
                .map(|r| r.encode_to_vec()),
            // The receiver takes profiles as protobuf only.
            Signal::Profiles => return,
        };
        match encoded {
            Ok(b) => Bytes::from(b),
            Err(_) => return,
        }
    } else {
        body
    };
    // What passes the checks must decode: downstream decoders rely on it.
    if let Ok((ok, items, _)) = crate::otlp::check(signal, body, |_| {}) {
        use opentelemetry_proto::tonic::collector::{
            logs::v1::ExportLogsServiceRequest, metrics::v1::ExportMetricsServiceRequest,
            trace::v1::ExportTraceServiceRequest,
        };
        let decoded = match signal {
            Signal::Traces => ExportTraceServiceRequest::decode(ok.as_ref()).map(drop),
            Signal::Logs => ExportLogsServiceRequest::decode(ok.as_ref()).map(drop),
            Signal::Metrics => ExportMetricsServiceRequest::decode(ok.as_ref()).map(drop),
            Signal::Profiles => opentelemetry_proto::tonic::collector::profiles::v1development::ExportProfilesServiceRequest::decode(ok.as_ref()).map(drop),
        };
        if let Err(e) = decoded {
            panic!(
                "a request that passed the checks ({items} items) does not decode: {e}; bytes {:02x?}",
                ok.as_ref()
            );
        }
    }
}

/// One gateway access-log line through every built-in format and the
/// record encoder.
pub fn gateway_line(data: &[u8]) {
    let Ok(line) = std::str::from_utf8(data) else {
        return;
    };
    for format in [
        Format::Json(KeyMap::new(&[])),
        Format::Envoy(KeyMap::new(&[])),
        Format::Nginx(KeyMap::new(&[])),
    ] {
        if let Ok(fields) = format.parse(line) {
            let mut out = Vec::new();
            encode_record(line, &fields, 1, &mut out);
        }
    }
}

/// One line through every gateway preset (the first byte picks one of
/// `envoy_text`, `istio`, `ingress_nginx`, `kong`, `apisix`, `traefik`,
/// `aws_alb`, `gcp_lb`, `envoy`, `nginx`, `json`), then the record encoder.
pub fn gateway_preset(data: &[u8]) {
    use crate::gateway_log::config::GatewayLogConfig;
    static FORMATS: std::sync::OnceLock<Vec<Format>> = std::sync::OnceLock::new();
    let formats = FORMATS.get_or_init(|| {
        [
            "envoy_text",
            "istio",
            "ingress_nginx",
            "kong",
            "apisix",
            "traefik",
            "aws_alb",
            "gcp_lb",
            "envoy",
            "nginx",
            "json",
        ]
        .iter()
        .filter_map(|name| {
            let cfg: GatewayLogConfig =
                serde_yaml::from_str(&format!("include: [x]\nformat: {name}")).ok()?;
            crate::gateway_log::build_format(&cfg).ok()
        })
        .collect()
    });
    let Some((&sel, line)) = data.split_first() else {
        return;
    };
    let Ok(line) = std::str::from_utf8(line) else {
        return;
    };
    if let Some(format) = formats.get(sel as usize % formats.len().max(1)) {
        if let Ok(fields) = format.parse(line) {
            let mut out = Vec::new();
            encode_record(line, &fields, 1, &mut out);
        }
    }
}

/// A scraped body through the Prometheus text and OpenMetrics parsers
/// (bit 0 of the first byte picks OpenMetrics), bounded as a scrape is.
pub fn prometheus_text(data: &[u8]) {
    let Some((&sel, body)) = data.split_first() else {
        return;
    };
    let Ok(text) = std::str::from_utf8(body) else {
        return;
    };
    drop(crate::prometheus::parse::parse(text, 10_000, sel & 1 == 1));
}

/// The relabel engine: the input up to the first NUL is a YAML list of
/// rules (as `relabel_configs` takes them), the rest `name=value` lines of
/// a label set; the rules are compiled and applied.
pub fn relabel(data: &[u8]) {
    let (rules, labels) = match data.iter().position(|b| *b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    let Ok(rules) = std::str::from_utf8(rules) else {
        return;
    };
    let Ok(rules) = serde_yaml::from_str::<Vec<crate::prometheus::config::RelabelConfig>>(rules)
    else {
        return;
    };
    if rules.len() > 32 || rules.iter().any(|r| r.regex.len() > 256) {
        return; // validation bounds them; the fuzzer explores the engine
    }
    let Ok(compiled) = crate::prometheus::relabel::compile(&rules) else {
        return;
    };
    let labels: crate::prometheus::parse::Labels = String::from_utf8_lossy(labels)
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    drop(crate::prometheus::relabel::apply(&compiled, "up", &labels));
}

/// The RabbitMQ management API's answers: the first byte picks
/// `/api/queues` or `/api/bindings` + `/api/exchanges` (split at the first
/// NUL).
pub fn rabbitmq_answer(data: &[u8]) {
    let Some((&sel, body)) = data.split_first() else {
        return;
    };
    if sel & 1 == 0 {
        drop(crate::rabbitmq::parse_queues(body));
    } else {
        let (b, x) = match body.iter().position(|c| *c == 0) {
            Some(i) => (&body[..i], &body[i + 1..]),
            None => (body, &[][..]),
        };
        drop(crate::rabbitmq::parse_bindings(b, x));
    }
}

/// A NATS server's `/jsz` answer, and the metrics the `nats` receiver
/// writes of what parses (twice: the second collection judges growth).
pub fn nats_jsz(data: &[u8]) {
    let Ok(consumers) = crate::nats::parse_jsz(data) else {
        return;
    };
    let Ok(cfg) = causeway_core::config::decode::<crate::nats::config::NatsConfig>(
        &serde_yaml::Value::Mapping(Default::default()),
    ) else {
        return;
    };
    let Ok(all) = crate::nats::config::Match::default().compile() else {
        return;
    };
    let mut rising = std::collections::HashMap::new();
    for t in [1000.0, 1010.0] {
        drop(crate::nats::collect(
            &cfg,
            (&all, &all),
            &consumers,
            &mut rising,
            t,
            0,
        ));
    }
}

/// A Kafka message's payload as the `kafka` receiver frames it: the first
/// byte picks the signal (low two bits) and `otlp_json` (bit 2).
pub fn kafka_message(data: &[u8]) {
    let Some((&sel, payload)) = data.split_first() else {
        return;
    };
    let signal = signal_of(sel);
    let encoding = if sel & 4 != 0 {
        causeway_core::kafka::Encoding::OtlpJson
    } else {
        causeway_core::kafka::Encoding::OtlpProto
    };
    if let Ok(batch) = crate::kafka::decode_message(encoding, signal, payload) {
        // What passes must decode, as downstream decoders rely on it.
        let decoded = match signal {
            Signal::Traces => batch.to_traces_request().map(drop),
            Signal::Logs => batch.to_logs_request().map(drop),
            Signal::Metrics => batch.to_metrics_request().map(drop),
            Signal::Profiles => batch.to_profiles_request().map(drop),
        };
        if let Err(e) = decoded {
            panic!("a message that passed the checks does not decode: {e}");
        }
    }
}

/// A pprof answer through the `pprof` receiver's conversion (gzipped or
/// not, as servers send it), under small limits. What converts must pass
/// the receivers' own check of an OTLP profiles request whole: the
/// converter never writes an index past its dictionary.
pub fn pprof_profile(data: &[u8]) {
    let raw = if data.starts_with(&[0x1f, 0x8b]) {
        match causeway_core::compress::Codec::Gzip.decompress(data, 1 << 20) {
            Ok(b) => b,
            Err(_) => return,
        }
    } else {
        Bytes::copy_from_slice(data)
    };
    let limits = crate::pprof::convert::Limits {
        max_samples: 10_000,
        max_depth: 256,
    };
    if let Ok((req, samples)) = crate::pprof::convert::convert(&raw, Default::default(), limits) {
        let bytes = req.encode_to_vec();
        match causeway_core::wire::scan(Signal::Profiles, &bytes) {
            Ok(scan) => assert_eq!(scan.items, samples, "the samples counted twice differ"),
            Err(e) => panic!("a converted profile fails the receivers' check: {e}"),
        }
    }
}
