#![allow(clippy::unwrap_used)]

use super::config::PprofConfig;
use causeway_core::config::{decode, ConfigError};

fn errors(yaml: &str) -> Vec<ConfigError> {
    let v: serde_yaml::Value = serde_yaml::from_str(yaml).unwrap();
    match decode::<PprofConfig>(&v) {
        Ok(_) => Vec::new(),
        Err(e) => e,
    }
}

#[test]
fn a_service_with_one_target_takes_the_defaults() {
    assert!(errors(
        "targets: [{service: checkout, static_configs: [{targets: ['127.0.0.1:6060']}]}]"
    )
    .is_empty());
    let v: serde_yaml::Value = serde_yaml::from_str(
        "targets: [{service: checkout, static_configs: [{targets: ['127.0.0.1:6060']}]}]",
    )
    .unwrap();
    let c = decode::<PprofConfig>(&v).unwrap();
    assert_eq!(
        c.profiles,
        vec![super::config::Kind::Cpu, super::config::Kind::Mutex]
    );
    // Continuous: each window as long as the interval, back to back.
    assert_eq!(c.seconds.get().as_secs(), 15);
    assert_eq!(c.collection_interval.get().as_secs(), 15);
    // The job reads as the prometheus receiver's discovery reads one.
    let job = super::scrape_job(&c.targets[0]).unwrap();
    let (specs, errs) = crate::prometheus::discovery::discover(&job, &[]);
    assert!(errs.is_empty(), "{errs:?}");
    assert_eq!(specs[0].address, "127.0.0.1:6060");
}

#[test]
fn every_wrong_key_is_reported_with_its_path() {
    let e = errors(
        "targets: [{service: '', scheme: ftp, path_prefix: debug, static_configs: [{targets: ['h:1/x']}]}]\n\
         profiles: []\nseconds: 1500ms\ncollection_interval: 1s\nmax_depth: 0",
    );
    let paths: Vec<String> = e.iter().map(|e| e.path.clone()).collect();
    for want in [
        "targets[0].service",
        "targets[0].scheme",
        "targets[0].path_prefix",
        "targets[0].static_configs[0].targets[0]",
        "profiles",
        "seconds",
        "max_depth",
    ] {
        assert!(
            paths.iter().any(|p| p.ends_with(want)),
            "{want} not in {paths:?}"
        );
    }
    let e =
        errors("targets: [{service: a, static_configs: [{targets: ['h:1']}]}]\nprofiles: [heap]");
    assert!(!e.is_empty(), "an unknown profile kind is refused");
}
