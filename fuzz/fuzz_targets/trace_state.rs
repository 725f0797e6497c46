//! A W3C tracestate value through the tail_sampling trace_state policy's parser.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    causeway_processors::tail_sampling::fuzz_trace_state(data);
});
