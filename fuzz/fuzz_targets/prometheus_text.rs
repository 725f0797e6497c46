//! A scraped body through the Prometheus text and OpenMetrics parsers.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    causeway_receivers::fuzzing::prometheus_text(data);
});
