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
    let f = parse(TEXT, 1000).expect("parses");
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
    let e = parse("ok 1\nbad{a=1} 2\n", 10).expect_err("unquoted value");
    assert_eq!(e.line, 2);
    let e = parse("x{a=\"1\"} one\n", 10).expect_err("not a number");
    assert!(e.message.contains("not a number"), "{e}");
    let e = parse("a 1\nb 2\nc 3\n", 2).expect_err("too many");
    assert!(e.message.contains("sample_limit") && e.line == 3, "{e}");
    let e = parse("x{a=\"unterminated} 1\n", 10).expect_err("unterminated");
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
    let f = parse(TEXT, 1000).expect("parses");
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
    let f = parse("x{job=\"other\",instance=\"i\"} 1\n", 10).expect("parses");
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
