//! The pipeline file loader (YAML, `${env:…}` substitution, locations,
//! pipelines) with the receivers registered. Processors and exporters are
//! left out to keep the instrumented build small; `tests/fuzz_corpus.rs`
//! runs the same inputs with every component.
#![no_main]
use std::sync::OnceLock;

fn registry() -> &'static causeway_core::registry::Registry {
    static R: OnceLock<causeway_core::registry::Registry> = OnceLock::new();
    R.get_or_init(|| {
        let mut r = causeway_core::registry::Registry::new();
        causeway_receivers::register(&mut r);
        r
    })
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        drop(causeway_core::config::load_str(text, "fuzz.yaml", registry(), &|_| None));
    }
});
