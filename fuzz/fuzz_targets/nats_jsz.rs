//! A NATS server's `/jsz` answer (JetStream accounts, streams, consumers).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    causeway_receivers::fuzzing::nats_jsz(data);
});
