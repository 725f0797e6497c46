//! A Kafka message payload as the kafka receiver frames it (OTLP proto or JSON).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    causeway_receivers::fuzzing::kafka_message(data);
});
