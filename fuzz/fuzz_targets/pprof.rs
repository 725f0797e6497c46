//! A pprof answer (gzipped or not) through the `pprof` receiver's conversion.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    causeway_receivers::fuzzing::pprof_profile(data);
});
