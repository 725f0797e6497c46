//! One line through each gateway preset (Envoy text, Istio, ingress-nginx, Kong, APISIX, Traefik, ALB, GCP LB, …).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    causeway_receivers::fuzzing::gateway_preset(data);
});
