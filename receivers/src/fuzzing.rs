//! Entry points for fuzzing: the paths hostile bytes take into the daemon,
//! callable with any input. The cargo-fuzz targets in `fuzz/` call them,
//! and `tests/fuzz_corpus.rs` replays the corpus and random inputs through
//! them on stable Rust in CI. Each must return, never panic.

use bytes::Bytes;
use causeway_core::Signal;
use prost::Message;

use crate::gateway_log::parse::{encode_record, Format, KeyMap};

/// The OTLP/HTTP body path. The first byte picks the signal (low two
/// bits), JSON (bit 2) and gzip (bit 3); the rest is the body. Bodies go
/// through gzip (bounded at 1 MiB), the JSON decoder and re-encoding, the
/// wire scan with its string and nesting checks, and the repair of
/// invalid ids — everything the receiver does before queueing.
pub fn otlp_http_body(data: &[u8]) {
    let Some((&sel, body)) = data.split_first() else {
        return;
    };
    let signal = match sel & 3 {
        0 => Signal::Traces,
        1 => Signal::Logs,
        _ => Signal::Metrics,
    };
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
