//! The RabbitMQ management API's queues, bindings and exchanges answers.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    causeway_receivers::fuzzing::rabbitmq_answer(data);
});
