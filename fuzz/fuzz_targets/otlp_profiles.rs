//! An OTLP profiles request through the receivers' check and, if it
//! passes, the correlate processor's profiles source (window and joins).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    causeway_processors::correlate::source::profiles::fuzz_otlp_profiles(data);
});
