//! The OTLP/HTTP body path: gzip, JSON, the wire scan, id repair.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    causeway_receivers::fuzzing::otlp_http_body(data);
});
