//! One gateway access-log line through the JSON, Envoy and NGINX parsers.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    causeway_receivers::fuzzing::gateway_line(data);
});
