use super::*;
use opentelemetry_proto::tonic::metrics::v1::{metric, number_data_point};

fn write(root: &std::path::Path, rel: &str, content: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
    std::fs::write(p, content).expect("write");
}

fn fake_proc(root: &std::path::Path, user: u64, iowait: u64, idle: u64, io_ticks: u64) {
    write(
        root,
        "proc/stat",
        &format!("cpu  {user} 0 100 {idle} {iowait} 0 0 0 0 0\ncpu0 1 2 3 4 5 6 7 8\ncpu1 1 2 3 4 5 6 7 8\nintr 1 2\n"),
    );
    write(root, "proc/loadavg", "3.50 2.00 1.00 4/600 1234\n");
    write(
        root,
        "proc/meminfo",
        "MemTotal:       1000 kB\nMemFree:         100 kB\nMemAvailable:    250 kB\nBuffers:          50 kB\nCached:          100 kB\nSReclaimable:     50 kB\nAnonPages:       600 kB\n",
    );
    write(
        root,
        "proc/diskstats",
        &format!("   8       0 sda 1 2 3 4 5 6 7 8 9 {io_ticks} 11 0 0 0 0\n   7       0 loop0 1 2 3 4 5 6 7 8 9 999 11\n"),
    );
    write(root, "proc/pressure/io", "some avg10=42.50 avg60=10.00 avg300=1.00 total=1\nfull avg10=1.00 avg60=0 avg300=0 total=1\n");
    write(
        root,
        "proc/net/dev",
        "Inter-|   Receive                                                |  Transmit\n face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n    lo: 1000 10 0 0 0 0 0 0 1000 10 0 0 0 0 0 0\n  eth0: 5000 50 1 2 0 0 0 0 7000 70 3 4 0 0 0 0\n",
    );
    write(
        root,
        "proc/vmstat",
        "nr_free_pages 100\npgpgin 11\npgpgout 22\npswpin 3\npswpout 4\npgfault 1000\npgmajfault 7\n",
    );
    write(
        root,
        "proc/swaps",
        "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n/dev/sda2                               partition\t2048\t\t512\t\t-2\n",
    );
}

fn value(rm: &ResourceMetrics, name: &str, attr: Option<(&str, &str)>) -> Option<f64> {
    let m = rm.scope_metrics[0]
        .metrics
        .iter()
        .find(|m| m.name == name)?;
    let points = match m.data.as_ref()? {
        metric::Data::Gauge(g) => &g.data_points,
        metric::Data::Sum(s) => &s.data_points,
        _ => return None,
    };
    points
        .iter()
        .find(|p| {
            attr.is_none_or(|(k, v)| {
                p.attributes.iter().any(|kv| {
                    kv.key == k
                        && matches!(&kv.value, Some(a) if matches!(&a.value, Some(opentelemetry_proto::tonic::common::v1::any_value::Value::StringValue(s)) if s == v))
                })
            })
        })
        .and_then(|p| match p.value? {
            number_data_point::Value::AsDouble(d) => Some(d),
            number_data_point::Value::AsInt(i) => Some(i as f64),
        })
}

#[test]
fn proc_files_become_otel_host_metrics() {
    let dir = tempfile::tempdir().expect("tempdir");
    fake_proc(dir.path(), 1000, 0, 8900, 1000);
    let (a, problems) = proc::read(dir.path());
    assert!(problems.is_empty(), "{problems:?}");
    // 10 s later: 200 ticks user, 600 iowait, 200 idle (of 1000), the disk busy 5 of 10 s.
    fake_proc(dir.path(), 1200, 600, 9100, 6000);
    let (b, _) = proc::read(dir.path());
    let rm = to_metrics("web-1", &b, Some((&a, 10.0)), 2, 1);
    let close = |x: Option<f64>, y: f64| x.is_some_and(|x| (x - y).abs() < 1e-9);
    assert!(close(
        value(&rm, "system.cpu.utilization", Some(("cpu.mode", "iowait"))),
        0.6
    ));
    assert!(close(
        value(&rm, "system.cpu.utilization", Some(("cpu.mode", "user"))),
        0.2
    ));
    assert!(close(
        value(&rm, "system.cpu.time", Some(("cpu.mode", "user"))),
        12.0
    ));
    assert!(close(value(&rm, "system.cpu.logical.count", None), 2.0));
    assert!(close(value(&rm, "system.cpu.load_average.1m", None), 3.5));
    assert!(close(
        value(&rm, "system.linux.memory.available", None),
        250.0 * 1024.0
    ));
    assert!(close(
        value(&rm, "system.linux.memory.anon", None),
        600.0 * 1024.0
    ));
    // used = total - free - buffers - (cached + sreclaimable) = 1000 - 100 - 50 - 150 = 700
    assert!(close(
        value(
            &rm,
            "system.memory.utilization",
            Some(("system.memory.state", "used"))
        ),
        0.7
    ));
    assert!(close(
        value(&rm, "system.disk.io_time", Some(("device", "sda"))),
        6.0
    ));
    assert!(close(
        value(&rm, "system.disk.utilization", Some(("device", "sda"))),
        0.5
    ));
    assert!(value(&rm, "system.disk.io_time", Some(("device", "loop0"))).is_none());
    assert!(close(
        value(&rm, "system.linux.pressure", Some(("resource", "io"))),
        42.5
    ));
    let host = &rm.resource.as_ref().expect("resource").attributes[0];
    assert_eq!(host.key, "host.name");
    // The first reading has no utilization (it needs an interval).
    let first = to_metrics("web-1", &a, None, 1, 1);
    assert!(value(&first, "system.cpu.utilization", Some(("cpu.mode", "user"))).is_none());
}

#[test]
fn network_and_paging_as_the_collectors_scrapers_name_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    fake_proc(dir.path(), 100, 10, 1000, 50);
    let (r, problems) = proc::read(dir.path());
    assert!(problems.is_empty(), "{problems:?}");
    let rm = to_metrics("h", &r, None, 2, 1);
    let point = |name: &str, attrs: &[(&str, &str)]| -> Option<i64> {
        rm.scope_metrics[0]
            .metrics
            .iter()
            .filter(|m| m.name == name)
            .find_map(|m| match &m.data {
                Some(metric::Data::Sum(s)) => s.data_points.iter().find_map(|p| {
                    let has = |k: &str, v: &str| {
                        p.attributes.iter().any(|a| {
                            a.key == k
                                && matches!(a.value.as_ref().and_then(|v| v.value.as_ref()),
                                    Some(opentelemetry_proto::tonic::common::v1::any_value::Value::StringValue(s)) if s == v)
                        })
                    };
                    let v = match p.value {
                        Some(number_data_point::Value::AsInt(i)) => i,
                        _ => -1,
                    };
                    attrs.iter().all(|(k, v)| has(k, v)).then_some(v)
                }),
                _ => None,
            })
    };
    assert_eq!(
        point(
            "system.network.io",
            &[("device", "eth0"), ("direction", "receive")]
        ),
        Some(5000)
    );
    assert_eq!(
        point(
            "system.network.io",
            &[("device", "eth0"), ("direction", "transmit")]
        ),
        Some(7000)
    );
    assert_eq!(
        point(
            "system.network.packets",
            &[("device", "lo"), ("direction", "transmit")]
        ),
        Some(10)
    );
    assert_eq!(
        point(
            "system.network.errors",
            &[("device", "eth0"), ("direction", "transmit")]
        ),
        Some(3)
    );
    assert_eq!(
        point(
            "system.network.dropped",
            &[("device", "eth0"), ("direction", "receive")]
        ),
        Some(2)
    );
    assert_eq!(
        point(
            "system.paging.operations",
            &[("direction", "page_in"), ("type", "minor")]
        ),
        Some(11)
    );
    assert_eq!(
        point(
            "system.paging.operations",
            &[("direction", "page_out"), ("type", "major")]
        ),
        Some(4)
    );
    assert_eq!(
        point("system.paging.faults", &[("type", "minor")]),
        Some(993)
    );
    assert_eq!(point("system.paging.faults", &[("type", "major")]), Some(7));
    assert_eq!(
        point(
            "system.paging.usage",
            &[("device", "/dev/sda2"), ("state", "used")]
        ),
        Some(512 * 1024)
    );
    assert_eq!(
        point(
            "system.paging.usage",
            &[("device", "/dev/sda2"), ("state", "free")]
        ),
        Some(1536 * 1024)
    );
}

#[test]
fn missing_and_malformed_files_are_named_and_the_rest_is_read() {
    let dir = tempfile::tempdir().expect("tempdir");
    write(dir.path(), "proc/stat", "cpu garbage\n");
    write(dir.path(), "proc/loadavg", "1.0 2.0 3.0 1/1 1\n");
    let (r, problems) = proc::read(dir.path());
    assert_eq!(r.load, Some([1.0, 2.0, 3.0]));
    assert!(
        problems
            .iter()
            .any(|p| p.contains("proc/stat") && p.contains("malformed")),
        "{problems:?}"
    );
    assert!(
        problems.iter().any(|p| p.contains("proc/meminfo")),
        "{problems:?}"
    );
    assert!(
        problems.iter().any(|p| p.contains("proc/diskstats")),
        "{problems:?}"
    );
}

#[test]
fn the_real_proc_is_readable() {
    let (r, problems) = proc::read(std::path::Path::new("/"));
    assert!(problems.is_empty(), "{problems:?}");
    assert!(r.cpu.is_some() && r.cpus > 0);
    assert!(r.mem.contains_key("MemAvailable"));
}

#[test]
fn collector_scrapers_choose_the_metrics_and_unknown_ones_are_named() {
    // Every metric the receiver can report belongs to one scraper.
    let dir = tempfile::tempdir().expect("tempdir");
    fake_proc(dir.path(), 100, 10, 1000, 50);
    let (a, _) = proc::read(dir.path());
    fake_proc(dir.path(), 200, 20, 1100, 80);
    let (b, _) = proc::read(dir.path());
    let rm = to_metrics("h", &b, Some((&a, 1.0)), 2, 1);
    let names: std::collections::BTreeSet<&str> = rm.scope_metrics[0]
        .metrics
        .iter()
        .map(|m| m.name.as_str())
        .collect();
    assert!(names.len() >= 10, "{names:?}");
    for n in &names {
        assert!(
            config::SCRAPERS.iter().any(|(_, ms)| ms.contains(n)),
            "{n} is in no scraper"
        );
    }

    let cfg = |y: &str| decode::<HostMetricsConfig>(&serde_yaml::from_str(y).expect("yaml"));
    let all = cfg("collection_interval: 10s").expect("valid");
    assert!(names.iter().all(|n| all.wants(n)));
    let some = cfg("scrapers:\n  cpu:\n    metrics:\n      system.cpu.utilization: {enabled: false}\n  memory:\n")
        .expect("valid");
    assert!(some.wants("system.cpu.time"));
    assert!(!some.wants("system.cpu.utilization"));
    assert!(some.wants("system.memory.usage"));
    assert!(!some.wants("system.cpu.load_average.1m"));
    assert!(!some.wants("system.linux.pressure"));

    let errs = cfg("scrapers:\n  cpu:\n  processes:\n  filesystem:\n  memory:\n    metrics:\n      system.memory.limit: {enabled: true}\n")
        .expect_err("unsupported");
    let msgs: Vec<String> = errs
        .iter()
        .map(|e| format!("{}: {}", e.path, e.message))
        .collect();
    assert_eq!(msgs.len(), 3, "{msgs:?}");
    assert!(
        msgs[0].starts_with("scrapers.processes: the processes scraper is not built in"),
        "{msgs:?}"
    );
    assert!(msgs[1].starts_with("scrapers.filesystem:"), "{msgs:?}");
    assert!(
        msgs[2].starts_with(
            "scrapers.memory.metrics.system.memory.limit: the memory scraper has no metric"
        ),
        "{msgs:?}"
    );
}
