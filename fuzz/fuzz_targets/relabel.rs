//! Relabel rules (YAML) applied to a label set.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    causeway_receivers::fuzzing::relabel(data);
});
