use super::*;

fn cfg(yaml: &str) -> Result<MemoryLimiterProcessorConfig, Vec<ConfigError>> {
    decode(&serde_yaml::from_str(yaml).expect("yaml"))
}

#[test]
fn the_collector_readme_examples_map_onto_the_limits() {
    // 4000/800 MiB: hard 4000, soft 3200.
    let c = cfg("check_interval: 1s\nlimit_mib: 4000\nspike_limit_mib: 800").expect("valid");
    let m = limiter_config(&c, 64 << 30);
    assert_eq!(m.limit.0, 4000 << 20);
    assert_eq!(m.spike_limit.map(|s| s.0), Some(800 << 20));
    assert_eq!(m.check_interval.get(), std::time::Duration::from_secs(1));
    // 80% / 15% of 1000 MiB: hard 800, soft 650.
    let c =
        cfg("check_interval: 1s\nlimit_percentage: 80\nspike_limit_percentage: 15").expect("valid");
    let m = limiter_config(&c, 1000 << 20);
    assert_eq!(m.limit.0, 800 << 20);
    assert_eq!(m.spike_limit.map(|s| s.0), Some(150 << 20));
    // No spike limit: the limiter's default (20% of the limit).
    let c = cfg("check_interval: 5s\nlimit_mib: 1000").expect("valid");
    assert_eq!(limiter_config(&c, 1 << 40).spike_limit, None);
    // limit_mib wins over limit_percentage.
    let c = cfg("check_interval: 1s\nlimit_mib: 512\nlimit_percentage: 90").expect("valid");
    assert_eq!(limiter_config(&c, 1 << 40).limit.0, 512 << 20);
}

#[test]
fn the_collector_validation_rules_hold() {
    let msgs = |yaml: &str| -> Vec<String> {
        cfg(yaml)
            .expect_err("invalid")
            .into_iter()
            .map(|e| format!("{}: {}", e.path, e.message))
            .collect()
    };
    let m = msgs("limit_mib: 100");
    assert!(
        m.iter()
            .any(|m| m.starts_with("check_interval: must be more than 0")),
        "{m:?}"
    );
    let m = msgs("check_interval: 1s");
    assert!(
        m.iter()
            .any(|m| m.contains("set limit_mib or limit_percentage")),
        "{m:?}"
    );
    let m = msgs("check_interval: 1s\nlimit_mib: 100\nspike_limit_mib: 100");
    assert!(
        m.iter()
            .any(|m| m.starts_with("spike_limit_mib: must be less")),
        "{m:?}"
    );
    let m = msgs("check_interval: 1s\nlimit_percentage: 120");
    assert!(
        m.iter()
            .any(|m| m.starts_with("limit_percentage: must be at most 100")),
        "{m:?}"
    );
    let m = msgs("check_interval: 1s\nlimit_percentage: 50\nspike_limit_percentage: 50");
    assert!(
        m.iter()
            .any(|m| m.starts_with("spike_limit_percentage: must be less")),
        "{m:?}"
    );
    let m = msgs("check_interval: 1s\nlimit_mib: 100\nballast_size_mib: 10");
    assert!(
        m.iter()
            .any(|m| m.starts_with("ballast_size_mib: unknown field")),
        "{m:?}"
    );
    // causeway's own floor, said with the limit it computed.
    let errs = MemoryLimiterFactory
        .validate(&serde_yaml::from_str("check_interval: 1s\nlimit_mib: 16").expect("yaml"))
        .expect_err("too small");
    assert!(
        errs[0].message.contains("16MiB") && errs[0].message.contains("at least 32MiB"),
        "{errs:?}"
    );
}

#[test]
fn available_memory_is_the_machine_or_the_cgroup() {
    let m = available_memory();
    assert!(m > 64 << 20 && m < u64::MAX, "{m}");
}

#[tokio::test]
async fn the_processor_passes_every_batch_through() {
    let ctx = BuildContext {
        id: "memory_limiter".parse().expect("id"),
        telemetry: Default::default(),
        shared: Default::default(),
        pipeline_signals: SignalSet::ALL,
    };
    let mut p = MemoryLimiterFactory
        .build(ctx, &serde_yaml::Value::Null)
        .await
        .expect("build");
    let batch = Batch::from_logs(vec![]);
    let mut out = Vec::new();
    p.process(batch, &mut out).await.expect("process");
    assert_eq!(out.len(), 1);
}
