use super::parse::{parse, Type};
use super::*;

/// Exposition as Prometheus' client_golang writes it (node_exporter style):
/// HELP/TYPE, escapes, a histogram, a summary, NaN and +Inf.
const TEXT: &str = r#"# HELP http_requests_total The total number of HTTP requests.
# TYPE http_requests_total counter
http_requests_total{method="post",code="200"} 1027 1395066363000
http_requests_total{method="post",code="400"}    3 1395066363000
# HELP msdos_file_access_time_seconds Escaping in label values.
# TYPE msdos_file_access_time_seconds gauge
msdos_file_access_time_seconds{path="C:\\DIR\\FILE.TXT",error="Cannot find file:\n\"FILE.TXT\""} 1.458255915e9
# A comment.
metric_without_timestamp_and_labels 12.47
# TYPE http_request_duration_seconds histogram
http_request_duration_seconds_bucket{le="0.05"} 24054
http_request_duration_seconds_bucket{le="0.1"} 33444
http_request_duration_seconds_bucket{le="0.2"} 100392
http_request_duration_seconds_bucket{le="+Inf"} 144320
http_request_duration_seconds_sum 53423
http_request_duration_seconds_count 144320
# TYPE rpc_duration_seconds summary
rpc_duration_seconds{quantile="0.5"} 4773
rpc_duration_seconds{quantile="0.99"} NaN
rpc_duration_seconds_sum 1.7560473e+07
rpc_duration_seconds_count 2693
# TYPE temp gauge
temp +Inf
"#;

#[test]
fn the_text_format_reads_into_families() {
    let f = parse(TEXT, 1000, false).expect("parses");
    let names: Vec<(&str, Type, usize)> = f
        .iter()
        .map(|f| (f.name.as_str(), f.kind, f.samples.len()))
        .collect();
    assert_eq!(
        names,
        vec![
            ("http_requests_total", Type::Counter, 2),
            ("msdos_file_access_time_seconds", Type::Gauge, 1),
            ("metric_without_timestamp_and_labels", Type::Untyped, 1),
            ("http_request_duration_seconds", Type::Histogram, 6),
            ("rpc_duration_seconds", Type::Summary, 4),
            ("temp", Type::Gauge, 1),
        ]
    );
    assert_eq!(f[0].samples[0].timestamp_ms, Some(1_395_066_363_000));
    assert_eq!(
        f[1].samples[0].labels,
        vec![
            ("path".to_string(), "C:\\DIR\\FILE.TXT".to_string()),
            (
                "error".to_string(),
                "Cannot find file:\n\"FILE.TXT\"".to_string()
            )
        ]
    );
    assert!(f[4].samples[1].value.is_nan());
    assert_eq!(f[5].samples[0].value, f64::INFINITY);
}

#[test]
fn bad_expositions_say_where() {
    let e = parse("ok 1\nbad{a=1} 2\n", 10, false).expect_err("unquoted value");
    assert_eq!(e.line, 2);
    let e = parse("x{a=\"1\"} one\n", 10, false).expect_err("not a number");
    assert!(e.message.contains("not a number"), "{e}");
    let e = parse("a 1\nb 2\nc 3\n", 2, false).expect_err("too many");
    assert!(e.message.contains("sample_limit") && e.line == 3, "{e}");
    let e = parse("x{a=\"unterminated} 1\n", 10, false).expect_err("unterminated");
    assert!(e.message.contains("unterminated"), "{e}");
}

fn scrape<'a>(extra: &'a indexmap::IndexMap<String, String>) -> Scrape<'a> {
    Scrape {
        job: "node",
        instance: "127.0.0.1:9100",
        scheme: "http",
        honor_labels: false,
        extra,
        time_ns: 2_000,
        start_ns: 1_000,
    }
}

fn metric<'a>(rm: &'a ResourceMetrics, name: &str) -> &'a Metric {
    rm.scope_metrics[0]
        .metrics
        .iter()
        .find(|m| m.name == name)
        .unwrap_or_else(|| panic!("{name} missing"))
}

#[test]
fn families_map_to_otlp_as_the_collectors_receiver_maps_them() {
    let extra: indexmap::IndexMap<String, String> = [("env".to_string(), "prod".to_string())]
        .into_iter()
        .collect();
    let f = parse(TEXT, 1000, false).expect("parses");
    let (rm, now) =
        scrape(&extra).to_metrics(&f, &BTreeSet::new(), Some((Duration::from_millis(5), 15)));
    let attrs: BTreeMap<String, String> = rm
        .resource
        .as_ref()
        .expect("resource")
        .attributes
        .iter()
        .map(|kv| {
            (
                kv.key.clone(),
                match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                    Some(
                        opentelemetry_proto::tonic::common::v1::any_value::Value::StringValue(s),
                    ) => s.clone(),
                    Some(opentelemetry_proto::tonic::common::v1::any_value::Value::IntValue(i)) => {
                        i.to_string()
                    }
                    _ => String::new(),
                },
            )
        })
        .collect();
    assert_eq!(attrs["service.name"], "node");
    assert_eq!(attrs["service.instance.id"], "127.0.0.1:9100");
    assert_eq!(attrs["server.port"], "9100");
    match &metric(&rm, "http_requests_total").data {
        Some(metric::Data::Sum(s)) => {
            assert!(s.is_monotonic);
            assert_eq!(s.data_points.len(), 2);
            let keys: Vec<&str> = s.data_points[0]
                .attributes
                .iter()
                .map(|a| a.key.as_str())
                .collect();
            assert_eq!(keys, ["code", "env", "method"]);
        }
        other => panic!("{other:?}"),
    }
    match &metric(&rm, "http_request_duration_seconds").data {
        Some(metric::Data::Histogram(h)) => {
            let p = &h.data_points[0];
            assert_eq!(p.explicit_bounds, vec![0.05, 0.1, 0.2]);
            assert_eq!(p.bucket_counts, vec![24054, 9390, 66948, 43928]);
            assert_eq!(p.count, 144_320);
            assert_eq!(p.sum, Some(53423.0));
        }
        other => panic!("{other:?}"),
    }
    match &metric(&rm, "rpc_duration_seconds").data {
        Some(metric::Data::Summary(s)) => {
            let p = &s.data_points[0];
            assert_eq!(p.count, 2693);
            assert_eq!(p.quantile_values.len(), 2);
            assert_eq!(p.quantile_values[0].value, 4773.0);
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        &metric(&rm, "metric_without_timestamp_and_labels").data,
        Some(metric::Data::Gauge(_))
    ));
    let up = |rm: &ResourceMetrics| match &metric(rm, "up").data {
        Some(metric::Data::Gauge(g)) => match g.data_points[0].value {
            Some(number_data_point::Value::AsDouble(v)) => v,
            _ => -1.0,
        },
        _ => -1.0,
    };
    assert_eq!(up(&rm), 1.0);
    assert!(now.len() >= 7, "{now:?}");

    // The target goes down: up 0, and each series it had gets a staleness marker.
    let (down, after) = scrape(&extra).to_metrics(&[], &now, None);
    assert_eq!(up(&down), 0.0);
    assert!(after.is_empty());
    match &metric(&down, "http_requests_total").data {
        Some(metric::Data::Gauge(g)) => {
            assert_eq!(g.data_points.len(), 2);
            assert!(g.data_points.iter().all(|p| p.flags == NO_RECORDED_VALUE));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn scraped_job_and_instance_labels_are_kept_apart_unless_honored() {
    let extra = indexmap::IndexMap::new();
    let f = parse("x{job=\"other\",instance=\"i\"} 1\n", 10, false).expect("parses");
    let (rm, _) = scrape(&extra).to_metrics(&f, &BTreeSet::new(), Some((Duration::ZERO, 1)));
    let keys = |rm: &ResourceMetrics| -> Vec<String> {
        match &metric(rm, "x").data {
            Some(metric::Data::Gauge(g)) => g.data_points[0]
                .attributes
                .iter()
                .map(|a| a.key.clone())
                .collect(),
            _ => vec![],
        }
    };
    assert_eq!(keys(&rm), ["exported_instance", "exported_job"]);
    let mut s = scrape(&extra);
    s.honor_labels = true;
    let (rm, _) = s.to_metrics(&f, &BTreeSet::new(), Some((Duration::ZERO, 1)));
    assert_eq!(keys(&rm), ["instance", "job"]);
}

/// OpenMetrics 1.0, shaped as the specification's examples: a family
/// named without `_total`, `# UNIT`, `_created`, an exemplar, seconds
/// timestamps, info, stateset, gaugehistogram, and the closing `# EOF`.
const OPENMETRICS: &str = r#"# TYPE acme_http_router_request_seconds summary
# UNIT acme_http_router_request_seconds seconds
# HELP acme_http_router_request_seconds Latency though all of ACME's HTTP request router.
acme_http_router_request_seconds_sum{path="/api/v1",method="GET"} 9036.32
acme_http_router_request_seconds_count{path="/api/v1",method="GET"} 807283.0
acme_http_router_request_seconds_created{path="/api/v1",method="GET"} 1605281325.0
# TYPE process_cpu_seconds counter
# UNIT process_cpu_seconds seconds
# HELP process_cpu_seconds Total user and system CPU time spent in seconds.
process_cpu_seconds_total 4.20072246e+06
process_cpu_seconds_created 1520430000.0
# TYPE foo histogram
foo_bucket{le="0.1"} 8 # {trace_id="KOO5S4vxi0o"} 0.043 1520879607.789
foo_bucket{le="+Inf"} 17
foo_count 17
foo_sum 324789.3
foo_created 1520430000.123
# TYPE build info
build_info{version="1.2.3"} 1
# TYPE door stateset
door{door="open"} 1
door{door="closed"} 0
# TYPE queue gaugehistogram
queue_bucket{le="1"} 3
queue_bucket{le="+Inf"} 5
queue_gcount 5
queue_gsum 4.2
# TYPE temperature gauge
temperature 21.5 1520879607.789
# EOF
"#;

#[test]
fn openmetrics_reads_with_units_exemplars_seconds_and_its_eof() {
    let f = parse(OPENMETRICS, 1000, true).expect("parses");
    let names: Vec<(&str, Type, usize, &str)> = f
        .iter()
        .map(|f| (f.name.as_str(), f.kind, f.samples.len(), f.unit.as_str()))
        .collect();
    assert_eq!(
        names,
        vec![
            (
                "acme_http_router_request_seconds",
                Type::Summary,
                3,
                "seconds"
            ),
            ("process_cpu_seconds", Type::Counter, 2, "seconds"),
            ("foo", Type::Histogram, 5, ""),
            ("build", Type::Gauge, 1, ""),
            ("door", Type::Gauge, 2, ""),
            ("queue", Type::Gauge, 4, ""),
            ("temperature", Type::Gauge, 1, ""),
        ]
    );
    // The exemplar is not part of the bucket's sample; timestamps are seconds.
    assert_eq!(f[2].samples[0].value, 8.0);
    assert_eq!(f[2].samples[0].timestamp_ms, None);
    assert_eq!(f[6].samples[0].timestamp_ms, Some(1_520_879_607_789));
    // A body cut short, or anything after `# EOF`, is an error, not a smaller scrape.
    let cut = OPENMETRICS.trim_end().trim_end_matches("# EOF");
    let e = parse(cut, 1000, true).expect_err("no EOF");
    assert!(e.message.contains("# EOF"), "{e}");
    let e = parse(&format!("{OPENMETRICS}x 1\n"), 1000, true).expect_err("after EOF");
    assert!(e.message.contains("after"), "{e}");
    // The same text as 0.0.4 refuses the OpenMetrics-only types.
    assert!(parse(OPENMETRICS, 1000, false).is_err());
}

#[test]
fn the_accept_header_follows_scrape_protocols() {
    let cfg: PrometheusReceiverConfig = serde_yaml::from_str(
        "config: { scrape_configs: [{ job_name: a, static_configs: [{ targets: ['h:1'] }] }] }",
    )
    .expect("config");
    assert_eq!(
        cfg.config.scrape_configs[0].accept(),
        "application/openmetrics-text;version=1.0.0;q=1.0,application/openmetrics-text;version=0.0.1;q=0.9,text/plain;version=0.0.4;q=0.8,*/*;q=0.1"
    );
    let cfg: PrometheusReceiverConfig = serde_yaml::from_str(
        "config: { scrape_configs: [{ job_name: a, scrape_protocols: [PrometheusText0.0.4, PrometheusProto], static_configs: [{ targets: ['h:1'] }] }] }",
    )
    .expect("config");
    assert!(cfg.config.scrape_configs[0]
        .accept()
        .starts_with("text/plain;version=0.0.4;q=1.0,*/*"));
    let errs = causeway_core::config::Validate::validate(&cfg);
    assert!(
        errs.iter()
            .any(|e| e.to_string().contains("scrape_protocols[1]")),
        "{errs:?}"
    );
}
