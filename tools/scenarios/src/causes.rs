//! One builder per cause: each plants its fault in the trace it is handed
//! (spans, gateway records, the metrics a real system would show) and
//! names the culprit. [`BUILDERS`] says which builder makes which kind.

use opentelemetry_proto::tonic::trace::v1::span;

use crate::build::*;

/// The services whose operations hold faults, and their normal latency
/// (ms): the warm-up traffic their baselines learn from.
pub const OWNER_OPS: [(&str, &str, f64); 8] = [
    ("slow-dependency-svc", "GET /data", 15.0),
    ("slow-dependency-svc", "SELECT report", 4.0),
    ("host-cpu-saturation-svc", "GET /compute", 20.0),
    ("host-io-wait-svc", "GET /compute", 20.0),
    ("host-memory-pressure-svc", "GET /compute", 20.0),
    ("compute-before-call-svc", "GET /compute", 20.0),
    ("no-host-name-cpu-svc", "GET /compute", 20.0),
    ("late-metrics-cpu-svc", "GET /compute", 20.0),
];

/// A cause's builder.
pub(crate) type Builder = fn(&mut Ctx<'_>);

/// Generator kind → its builder (kinds absent here are healthy traces).
pub(crate) const BUILDERS: [(&str, Builder); 32] = [
    ("rate_limited", rate_limited),
    ("circuit_open", circuit_open),
    ("upstream_timeout", upstream_timeout),
    ("upstream_unavailable", upstream_unavailable),
    ("tls_handshake", tls_handshake),
    ("consumer_lag", kafka_consumer),
    ("retry_storm", kafka_consumer),
    ("cache_miss_fallback", cache_miss_fallback),
    ("slow_dependency", slow_dependency),
    ("healthy_slow", slow_dependency),
    ("queueing", queueing),
    ("host_cpu_saturation", host_pressure),
    ("host_io_wait", host_pressure),
    ("host_memory_pressure", host_pressure),
    ("error", error),
    ("warmup", warmup),
    ("retry_loop_503", retry_loop_503),
    ("retry_recovered_fast", retry_loop_503),
    ("retry_hidden_server_spans", retry_hidden_server_spans),
    ("kafkametrics_lag", kafkametrics_lag),
    ("stock_redis_miss", stock_redis_miss),
    ("concurrent_cache_tls", stock_redis_miss),
    ("compute_before_call", compute_before_call),
    ("no_host_name_cpu", no_host_name_cpu),
    ("late_metrics_cpu", no_host_name_cpu),
    ("gateway_504_backend_ok", gateway_504_backend_ok),
    ("grpc_deadline", crate::conventions::grpc_deadline),
    ("grpc_unavailable", crate::conventions::grpc_unavailable),
    (
        "grpc_resource_exhausted",
        crate::conventions::grpc_resource_exhausted,
    ),
    ("two_gateway_layers", crate::conventions::two_gateway_layers),
    ("job_queue_table", crate::conventions::job_queue_table),
    ("stable_get_routes", crate::conventions::stable_get_routes),
];

/// `rate_limited`.
fn rate_limited(cx: &mut Ctx<'_>) {
    let route = cx.route.clone();
    let front = cx.front.clone();
    let tid = cx.tid;
    let root = cx.root;
    let t0_ns = cx.t0_ns;
    let t_ns = |ms: f64| t0_ns + (ms * 1e6) as u64;
    // The gateway answered 429 to earlier attempts of this request, then let one through.
    let attempts = cx.rng.range(3, 14);
    let rule = format!("qps-{}-per-ip", cx.rng.pick(&[50, 100, 200]));
    for i in 0..attempts {
        cx.gw_extra.push(gateway_log(
            &route,
            &tid,
            t_ns(i as f64),
            429,
            0.4,
            &front,
            vec![ks("gateway.rate_limit_rule", &rule)],
        ));
    }
    // The last attempt was rejected too: the request failed with 429.
    cx.gw_status = 429;
    cx.gw_extra.push(gateway_log(
        &route,
        &tid,
        t_ns(cx.at),
        429,
        0.4,
        &front,
        vec![ks("gateway.rate_limit_rule", &rule)],
    ));
    cx.culprit = root;
    cx.culprit_service = "edge-gateway".into();
}

/// `circuit_open`.
fn circuit_open(cx: &mut Ctx<'_>) {
    let route = cx.route.clone();
    let front = cx.front.clone();
    let front_host = cx.front_host.clone();
    let owner = cx.owner.clone();
    let tid = cx.tid;
    let srv = cx.srv;
    let t0_ns = cx.t0_ns;
    let t_ns = |ms: f64| t0_ns + (ms * 1e6) as u64;
    cx.gw_status = 503;
    for _ in 0..cx.rng.range(1, 3) {
        cx.gw_extra.push(gateway_log(
            &route,
            &tid,
            t_ns(0.0),
            503,
            0.3,
            &owner,
            vec![
                ks("gateway.circuit_state", "OPEN"),
                ks("gateway.response_flags", "UO"),
            ],
        ));
    }
    let c = cx.t.add(
        Some(srv),
        &front,
        &front_host,
        &format!("POST {owner}"),
        span::SpanKind::Client,
        cx.at,
        cx.at + cx.rng.latency(300.0),
        vec![
            ks("server.address", &owner),
            ki("http.response.status_code", 503),
        ],
    );
    cx.at += cx.rng.latency(300.0);
    cx.t.fail(c, "503", None);
    cx.culprit = c;
    cx.culprit_service = owner.clone(); // the callee at fault (#31)
}

/// `upstream_timeout`.
fn upstream_timeout(cx: &mut Ctx<'_>) {
    let route = cx.route.clone();
    let front = cx.front.clone();
    let front_host = cx.front_host.clone();
    let owner = cx.owner.clone();
    let owner_host = cx.owner_host.clone();
    let tid = cx.tid;
    let srv = cx.srv;
    let t0_ns = cx.t0_ns;
    let t_ns = |ms: f64| t0_ns + (ms * 1e6) as u64;
    cx.gw_status = 504;
    let timeout = *cx.rng.pick(&[1000.0, 2000.0, 3000.0]);
    let c = cx.t.add(
        Some(srv),
        &front,
        &front_host,
        &format!("POST {owner}"),
        span::SpanKind::Client,
        cx.at,
        cx.at + timeout,
        vec![ks("server.address", &owner), ks("error.type", "timeout")],
    );
    let s = cx.t.add(
        Some(c),
        &owner,
        &owner_host,
        "POST /work",
        span::SpanKind::Server,
        cx.at + 1.0,
        cx.at + timeout + cx.rng.latency(500.0),
        vec![],
    );
    cx.t.fail(
        c,
        "context deadline exceeded",
        Some(("TimeoutError", "request timed out")),
    );
    cx.at += timeout;
    cx.culprit = s;
    cx.culprit_service = owner.clone();
    cx.gw_extra.push(gateway_log(
        &route,
        &tid,
        t_ns(cx.at),
        504,
        cx.at,
        &front,
        vec![ks("gateway.response_flags", "UT")],
    ));
}

/// `upstream_unavailable`.
fn upstream_unavailable(cx: &mut Ctx<'_>) {
    let route = cx.route.clone();
    let front = cx.front.clone();
    let front_host = cx.front_host.clone();
    let owner = cx.owner.clone();
    let tid = cx.tid;
    let srv = cx.srv;
    let t0_ns = cx.t0_ns;
    let t_ns = |ms: f64| t0_ns + (ms * 1e6) as u64;
    cx.gw_status = 503;
    for i in 0..1 {
        let s0 = cx.at + i as f64 * 250.0;
        let c = cx.t.add(
            Some(srv),
            &front,
            &front_host,
            &format!("POST {owner}"),
            span::SpanKind::Client,
            s0,
            s0 + cx.rng.latency(3.0),
            vec![
                ks("server.address", &owner),
                ks("error.type", "connection_refused"),
            ],
        );
        cx.t.fail(c, "connect: connection refused", None);
        cx.culprit = c;
    }
    cx.at += 5.0;
    cx.culprit_service = owner.clone(); // the callee at fault (#31)
    cx.gw_extra.push(gateway_log(
        &route,
        &tid,
        t_ns(cx.at),
        503,
        cx.at,
        &front,
        vec![
            ks("gateway.response_flags", "UF"),
            ks("gateway.circuit_state", "CLOSED"),
        ],
    ));
}

/// `tls_handshake`.
fn tls_handshake(cx: &mut Ctx<'_>) {
    let front = cx.front.clone();
    let front_host = cx.front_host.clone();
    let owner = cx.owner.clone();
    let owner_host = cx.owner_host.clone();
    let srv = cx.srv;
    let tls = cx.rng.between(400.0, 1500.0);
    let c = cx.t.add(
        Some(srv),
        &front,
        &front_host,
        &format!("POST {owner}"),
        span::SpanKind::Client,
        cx.at,
        cx.at + tls + 30.0,
        vec![ks("server.address", &owner)],
    );
    cx.t.add(
        Some(c),
        &front,
        &front_host,
        "http.getconn",
        span::SpanKind::Internal,
        cx.at,
        cx.at + 2.0,
        vec![],
    );
    cx.t.add(
        Some(c),
        &front,
        &front_host,
        "http.dns",
        span::SpanKind::Internal,
        cx.at + 2.0,
        cx.at + 4.0,
        vec![],
    );
    cx.t.add(
        Some(c),
        &front,
        &front_host,
        "http.connect",
        span::SpanKind::Internal,
        cx.at + 4.0,
        cx.at + 6.0,
        vec![],
    );
    let h = cx.t.add(
        Some(c),
        &front,
        &front_host,
        "http.tls",
        span::SpanKind::Internal,
        cx.at + 6.0,
        cx.at + 6.0 + tls,
        vec![ks("server.address", &owner)],
    );
    cx.t.add(
        Some(c),
        &owner,
        &owner_host,
        "POST /work",
        span::SpanKind::Server,
        cx.at + 8.0 + tls,
        cx.at + tls + 25.0,
        vec![],
    );
    cx.at += tls + 30.0;
    cx.culprit = h;
    cx.culprit_service = owner.clone(); // the callee at fault (#31)
}

/// `consumer_lag`, `retry_storm`.
fn kafka_consumer(cx: &mut Ctx<'_>) {
    let front = cx.front.clone();
    let front_host = cx.front_host.clone();
    let owner = cx.owner.clone();
    let owner_host = cx.owner_host.clone();
    let cause = cx.cause;
    let t0_ns = cx.t0_ns;
    let srv = cx.srv;
    let storm = cause == "retry_storm";
    // A retry topic in a storm: retries in aggregate (one request's
    // retries are evidence on what they met, never a storm by themselves).
    let topic = if storm {
        format!("{owner}-events-retry")
    } else {
        format!("{owner}-events")
    };
    let group = format!("{owner}-workers");
    let p = cx.t.add(
        Some(srv),
        &front,
        &front_host,
        &format!("{topic} publish"),
        span::SpanKind::Producer,
        cx.at,
        cx.at + 2.0,
        vec![
            ks("messaging.system", "kafka"),
            ks("messaging.destination.name", &topic),
        ],
    );
    let wait = cx.rng.between(800.0, 4000.0);
    let d = cx.rng.latency(20.0);
    let c = cx.t.add(
        Some(p),
        &owner,
        &owner_host,
        &format!("{topic} process"),
        span::SpanKind::Consumer,
        cx.at + 2.0 + wait,
        cx.at + 2.0 + wait + d,
        vec![
            ks("messaging.system", "kafka"),
            ks("messaging.destination.name", &topic),
            ks("messaging.consumer.group.name", &group),
        ],
    );
    cx.at += 2.0 + wait + d;
    cx.culprit = c;
    cx.culprit_service = owner.clone();
    let tm = t0_ns.saturating_sub(cx.rng.range(0, 30) * 1_000_000_000);
    cx.metrics.push(if storm {
        kafka_metrics(
            &group,
            &topic,
            tm,
            cx.rng.between(10.0, 500.0),
            cx.rng.between(0.0, 3.0),
            1.0,
            false,
            true,
            cx.rng.between(400.0, 3000.0),
        )
    } else {
        kafka_metrics(
            &group,
            &topic,
            tm,
            cx.rng.between(20_000.0, 200_000.0),
            cx.rng.between(30.0, 600.0),
            *cx.rng.pick(&[2.0, 4.0]),
            true,
            false,
            cx.rng.between(50.0, 150.0),
        )
    });
}

/// `cache_miss_fallback`.
fn cache_miss_fallback(cx: &mut Ctx<'_>) {
    let front = cx.front.clone();
    let front_host = cx.front_host.clone();
    let owner = cx.owner.clone();
    let owner_host = cx.owner_host.clone();
    let srv = cx.srv;
    let t0_ns = cx.t0_ns;
    let t_ns = |ms: f64| t0_ns + (ms * 1e6) as u64;
    let s = cx.t.add(
        Some(srv),
        &front,
        &front_host,
        &format!("GET {owner}"),
        span::SpanKind::Client,
        cx.at,
        cx.at,
        vec![ks("server.address", &owner)],
    );
    let o = cx.t.add(
        Some(s),
        &owner,
        &owner_host,
        "GET /item",
        span::SpanKind::Server,
        cx.at + 0.5,
        cx.at + 0.5,
        vec![],
    );
    let c0 = cx.at + 1.0;
    cx.t.add(
        Some(o),
        &owner,
        &owner_host,
        "GET",
        span::SpanKind::Client,
        c0,
        c0 + 0.8,
        vec![
            ks("db.system", "redis"),
            ks("db.operation.name", "GET"),
            kb("cache.hit", false),
        ],
    );
    let d = cx.rng.between(300.0, 1500.0);
    let q = cx.t.add(
        Some(o),
        &owner,
        &owner_host,
        "SELECT items",
        span::SpanKind::Client,
        c0 + 1.0,
        c0 + 1.0 + d,
        vec![
            ks("db.system", "postgresql"),
            ks("db.operation.name", "SELECT"),
        ],
    );
    let end = c0 + 1.0 + d + 1.0;
    if let Some(x) = cx.t.get(o) {
        x.end_time_unix_nano = t_ns(end);
    }
    if let Some(x) = cx.t.get(s) {
        x.end_time_unix_nano = t_ns(end + 0.5);
    }
    cx.at = end + 0.5;
    cx.culprit = q;
    cx.culprit_service = "redis".into(); // the cache that missed (#31)
}

/// `slow_dependency`, `healthy_slow`.
fn slow_dependency(cx: &mut Ctx<'_>) {
    let front = cx.front.clone();
    let front_host = cx.front_host.clone();
    let owner = cx.owner.clone();
    let cause = cx.cause;
    let srv = cx.srv;
    let d = cx.rng.between(300.0, 1500.0);
    let callee = if cause == "healthy_slow" {
        (*cx.rng.pick(&SERVICES)).to_string()
    } else {
        owner.clone()
    };
    let c = cx.t.add(
        Some(srv),
        &front,
        &front_host,
        &format!("GET {callee}"),
        span::SpanKind::Client,
        cx.at,
        cx.at + d + 2.0,
        vec![ks("server.address", &callee)],
    );
    let s = cx.t.add(
        Some(c),
        &callee,
        &format!("{callee}-host-{}", cx.rng.range(1, 3)),
        "GET /data",
        span::SpanKind::Server,
        cx.at + 1.0,
        cx.at + d + 1.0,
        vec![],
    );
    if cx.rng.f() < 0.5 {
        let q = cx.t.add(
            Some(s),
            &callee,
            &format!("{callee}-db-host"),
            "SELECT report",
            span::SpanKind::Client,
            cx.at + 2.0,
            cx.at + d,
            vec![
                ks("db.system", "postgresql"),
                ks("db.operation.name", "SELECT"),
            ],
        );
        cx.culprit = q;
        // The database the slow query ran on (a dependency, #31).
        cx.culprit_service = "postgresql".into();
    } else {
        cx.culprit = s;
        cx.culprit_service = callee;
    }
    cx.at += d + 2.0;
}

/// `queueing`.
fn queueing(cx: &mut Ctx<'_>) {
    let front = cx.front.clone();
    let front_host = cx.front_host.clone();
    let owner = cx.owner.clone();
    let owner_host = cx.owner_host.clone();
    let srv = cx.srv;
    let wait = cx.rng.between(400.0, 1500.0);
    let d = cx.rng.latency(5.0);
    if cx.rng.f() < 0.5 {
        // The callee's worker pool was busy: its server span began late.
        let s = cx.t.add(
            Some(srv),
            &front,
            &front_host,
            &format!("GET {owner}"),
            span::SpanKind::Client,
            cx.at,
            cx.at + wait + d + 3.0,
            vec![ks("server.address", &owner)],
        );
        let o = cx.t.add(
            Some(s),
            &owner,
            &owner_host,
            "GET /orders",
            span::SpanKind::Server,
            cx.at + 0.5 + wait,
            cx.at + wait + d + 2.5,
            vec![],
        );
        cx.t.add(
            Some(o),
            &owner,
            &owner_host,
            "SELECT orders",
            span::SpanKind::Client,
            cx.at + 1.0 + wait,
            cx.at + 1.0 + wait + d,
            vec![
                ks("db.system", "postgresql"),
                ks("db.operation.name", "SELECT"),
            ],
        );
        cx.culprit = s;
        cx.culprit_service = owner.clone(); // the callee whose accept queue held it (#31)
    } else {
        // A connection pool with no free connection (node-postgres' pg-pool.connect).
        let s = cx.t.add(
            Some(srv),
            &front,
            &front_host,
            &format!("GET {owner}"),
            span::SpanKind::Client,
            cx.at,
            cx.at + wait + d + 3.0,
            vec![ks("server.address", &owner)],
        );
        let o = cx.t.add(
            Some(s),
            &owner,
            &owner_host,
            "GET /orders",
            span::SpanKind::Server,
            cx.at + 0.5,
            cx.at + wait + d + 2.5,
            vec![],
        );
        let pool = cx.t.add(
            Some(o),
            &owner,
            &owner_host,
            "pg-pool.connect",
            span::SpanKind::Internal,
            cx.at + 0.8,
            cx.at + 0.8 + wait,
            vec![],
        );
        cx.t.add(
            Some(o),
            &owner,
            &owner_host,
            "pg.query:SELECT shop",
            span::SpanKind::Client,
            cx.at + 1.0 + wait,
            cx.at + 1.0 + wait + d,
            vec![
                ks("db.system", "postgresql"),
                ks("db.statement", "SELECT * FROM orders WHERE id = $1"),
            ],
        );
        cx.culprit = pool;
        cx.culprit_service = owner.clone();
    }
    cx.at += wait + d + 3.0;
}

/// `host_cpu_saturation`, `host_io_wait`, `host_memory_pressure`.
fn host_pressure(cx: &mut Ctx<'_>) {
    let front = cx.front.clone();
    let front_host = cx.front_host.clone();
    let owner = cx.owner.clone();
    let owner_host = cx.owner_host.clone();
    let cause = cx.cause;
    let t0_ns = cx.t0_ns;
    let srv = cx.srv;
    let d = cx.rng.between(300.0, 1500.0);
    let c = cx.t.add(
        Some(srv),
        &front,
        &front_host,
        &format!("GET {owner}"),
        span::SpanKind::Client,
        cx.at,
        cx.at + d + 2.0,
        vec![ks("server.address", &owner)],
    );
    let s = cx.t.add(
        Some(c),
        &owner,
        &owner_host,
        "GET /compute",
        span::SpanKind::Server,
        cx.at + 1.0,
        cx.at + d + 1.0,
        vec![],
    );
    cx.at += d + 2.0;
    cx.culprit = s;
    cx.culprit_service = owner.clone();
    let tm = (t0_ns + cx.rng.range(0, 75) * 1_000_000_000).saturating_sub(30_000_000_000);
    cx.metrics.push(match cause {
        "host_cpu_saturation" => {
            host_metrics(&owner_host, tm, cx.rng.between(0.0, 0.06), 0.01, 0.5, 0.1)
        }
        "host_io_wait" => host_metrics(
            &owner_host,
            tm,
            cx.rng.between(0.1, 0.3),
            cx.rng.between(0.3, 0.6),
            0.5,
            cx.rng.between(0.92, 1.0),
        ),
        _ => host_metrics(&owner_host, tm, 0.5, 0.02, cx.rng.between(0.96, 0.995), 0.1),
    });
}

/// `error`.
fn error(cx: &mut Ctx<'_>) {
    let front = cx.front.clone();
    let front_host = cx.front_host.clone();
    let owner = cx.owner.clone();
    let owner_host = cx.owner_host.clone();
    let srv = cx.srv;
    let t0_ns = cx.t0_ns;
    let t_ns = |ms: f64| t0_ns + (ms * 1e6) as u64;
    cx.gw_status = 500;
    let c = cx.t.add(
        Some(srv),
        &front,
        &front_host,
        &format!("POST {owner}"),
        span::SpanKind::Client,
        cx.at,
        cx.at + 1.0,
        vec![
            ks("server.address", &owner),
            ki("http.response.status_code", 500),
        ],
    );
    let d = cx.rng.latency(30.0);
    let s = cx.t.add(
        Some(c),
        &owner,
        &owner_host,
        "POST /charge",
        span::SpanKind::Server,
        cx.at + 0.5,
        cx.at + 0.5 + d,
        vec![ki("http.response.status_code", 500)],
    );
    if let Some(x) = cx.t.get(c) {
        x.end_time_unix_nano = t_ns(cx.at + 1.0 + d);
    }
    cx.t.fail(
        s,
        "NullPointerException",
        Some(("java.lang.NullPointerException", "order.customer is null")),
    );
    cx.t.fail(c, "500", None);
    cx.at += d + 1.0;
    cx.culprit = s;
    cx.culprit_service = owner.clone();
}

/// `warmup`.
fn warmup(cx: &mut Ctx<'_>) {
    let front = cx.front.clone();
    let front_host = cx.front_host.clone();
    let n = cx.n;
    let srv = cx.srv;
    // Normal traffic, from which the operations' baselines are learned:
    // the SERVICES' GET /data is slow by nature, the owners' operations fast.
    let k = (n % (SERVICES.len() + OWNER_OPS.len()) as u64) as usize;
    let (callee, op, d) = if k < SERVICES.len() {
        (
            SERVICES[k].to_string(),
            "GET /data",
            cx.rng.between(300.0, 1500.0),
        )
    } else {
        let (svc, op, ms) = OWNER_OPS[k - SERVICES.len()];
        let op = if op == "SELECT report" {
            "GET /data"
        } else {
            op
        };
        (svc.to_string(), op, cx.rng.latency(ms))
    };
    let c = cx.t.add(
        Some(srv),
        &front,
        &front_host,
        &format!("GET {callee}"),
        span::SpanKind::Client,
        cx.at,
        cx.at + d + 2.0,
        vec![ks("server.address", &callee)],
    );
    let sv = cx.t.add(
        Some(c),
        &callee,
        &format!("{callee}-host-{}", cx.rng.range(1, 3)),
        op,
        span::SpanKind::Server,
        cx.at + 1.0,
        cx.at + d + 1.0,
        vec![],
    );
    // The frontends' jobs table, read fast in normal traffic (so that a
    // slow read of it, `job_queue_table`, deviates from its baseline).
    if n.is_multiple_of(4) {
        let q = cx.rng.latency(3.0);
        cx.t.add(
            Some(srv),
            &front,
            &front_host,
            "SELECT job_queue",
            span::SpanKind::Client,
            cx.at,
            cx.at + q,
            vec![
                ks("db.system", "postgresql"),
                ks("db.operation.name", "SELECT"),
                ks("db.collection.name", "job_queue"),
                ks("server.address", "jobs-db"),
            ],
        );
        cx.at += q + 0.5;
    }
    // Stable-convention `GET`s to catalog: its report route slow by nature,
    // its item route fast (`stable_get_routes` is the item route slow).
    if n % 4 == 2 {
        let (route, d) = if n % 8 == 2 {
            ("/report/{id}", cx.rng.between(300.0, 1500.0))
        } else {
            ("/item/{id}", cx.rng.latency(5.0))
        };
        crate::conventions::stable_get_call(cx, route, d);
    }
    // As in `healthy_slow`: half the time, the report query holds it.
    let slow_query = k < SERVICES.len() && cx.rng.f() < 0.5;
    if (k >= SERVICES.len() && op == "GET /data") || slow_query {
        let q = if slow_query {
            d - 2.0
        } else {
            cx.rng.latency(4.0).min(d * 0.8)
        };
        cx.t.add(
            Some(sv),
            &callee,
            &format!("{callee}-db-host"),
            "SELECT report",
            span::SpanKind::Client,
            cx.at + 1.5,
            cx.at + 1.5 + q,
            vec![
                ks("db.system", "postgresql"),
                ks("db.operation.name", "SELECT"),
            ],
        );
    }
    cx.at += d + 2.0;
}

/// `retry_loop_503`, `retry_recovered_fast`.
fn retry_loop_503(cx: &mut Ctx<'_>) {
    let route = cx.route.clone();
    let front = cx.front.clone();
    let front_host = cx.front_host.clone();
    let owner = cx.owner.clone();
    let tid = cx.tid;
    let cause = cx.cause;
    let srv = cx.srv;
    let t0_ns = cx.t0_ns;
    let t_ns = |ms: f64| t0_ns + (ms * 1e6) as u64;
    // An explicit retry loop: each attempt its own client span, ERROR on 503.
    let fast = cause == "retry_recovered_fast";
    // Five retries or more (six attempts), as the guides count a storm; the
    // 503s they met are the cause, the storm their consequence (#49).
    let n = if fast { 2 } else { cx.rng.range(6, 8) };
    let backoff = if fast {
        1.0
    } else {
        cx.rng.between(150.0, 400.0)
    };
    let mut first = None;
    for i in 0..n {
        let last = i == n - 1;
        let d = cx.rng.latency(if fast { 2.0 } else { 15.0 });
        let ok = fast && last;
        let c = cx.t.add(
            Some(srv),
            &front,
            &front_host,
            &format!("POST {owner}"),
            span::SpanKind::Client,
            cx.at,
            cx.at + d,
            vec![
                ks("server.address", &owner),
                ki("http.response.status_code", if ok { 200 } else { 503 }),
            ],
        );
        if !ok {
            cx.t.fail(c, "503 Service Unavailable", None);
        }
        first.get_or_insert(c);
        cx.at += d + if last { 0.0 } else { backoff };
    }
    if !fast {
        cx.gw_status = 503;
        cx.gw_extra.push(gateway_log(
            &route,
            &tid,
            t_ns(cx.at),
            503,
            cx.at,
            &front,
            vec![],
        ));
    }
    cx.culprit = first.unwrap_or(srv);
    // The upstream the retries hammer (#31); a quick recovery is healthy.
    cx.culprit_service = if fast { front.clone() } else { owner.clone() };
}

/// `retry_hidden_server_spans`.
fn retry_hidden_server_spans(cx: &mut Ctx<'_>) {
    let front = cx.front.clone();
    let front_host = cx.front_host.clone();
    let owner = cx.owner.clone();
    let owner_host = cx.owner_host.clone();
    let srv = cx.srv;
    let t0_ns = cx.t0_ns;
    let t_ns = |ms: f64| t0_ns + (ms * 1e6) as u64;
    // urllib3 Retry: one client span; the attempts show as server spans under it.
    // Five retries or more, answered 503 until the last: the callee's
    // unavailability is the cause, the retries its consequence (#49).
    let n = cx.rng.range(6, 8);
    let c = cx.t.add(
        Some(srv),
        &front,
        &front_host,
        &format!("POST {owner}"),
        span::SpanKind::Client,
        cx.at,
        cx.at,
        vec![
            ks("server.address", &owner),
            ki("http.response.status_code", 200),
        ],
    );
    let mut x = cx.at + 0.5;
    for i in 0..n {
        let d = cx.rng.latency(20.0);
        let ok = i == n - 1;
        let sv = cx.t.add(
            Some(c),
            &owner,
            &owner_host,
            "POST /charge",
            span::SpanKind::Server,
            x,
            x + d,
            vec![ki("http.response.status_code", if ok { 200 } else { 503 })],
        );
        if !ok {
            cx.t.fail(sv, "503", None);
        }
        x += d + if ok {
            0.5
        } else {
            cx.rng.between(200.0, 500.0)
        };
    }
    if let Some(sp) = cx.t.get(c) {
        sp.end_time_unix_nano = t_ns(x);
    }
    cx.at = x;
    cx.culprit = c;
    cx.culprit_service = owner.clone(); // the callee at fault (#31)
}

/// `kafkametrics_lag`.
fn kafkametrics_lag(cx: &mut Ctx<'_>) {
    let front = cx.front.clone();
    let front_host = cx.front_host.clone();
    let owner = cx.owner.clone();
    let owner_host = cx.owner_host.clone();
    let t0_ns = cx.t0_ns;
    let srv = cx.srv;
    // kafka-python: `messaging.destination`, no group, a zero-length consumer child.
    let topic = format!("{owner}-orders");
    let p = cx.t.add(
        Some(srv),
        &front,
        &front_host,
        &format!("{topic} send"),
        span::SpanKind::Producer,
        cx.at,
        cx.at + 2.0,
        vec![
            ks("messaging.system", "kafka"),
            ks("messaging.destination", &topic),
            ki("messaging.kafka.partition", 0),
        ],
    );
    cx.at += 3.0;
    let wait = cx.rng.between(1500.0, 5000.0);
    let c = cx.t.add(
        Some(p),
        &owner,
        &owner_host,
        &format!("{topic} receive"),
        span::SpanKind::Consumer,
        cx.at + wait,
        cx.at + wait,
        vec![
            ks("messaging.system", "kafka"),
            ks("messaging.destination", &topic),
        ],
    );
    // The consumer's own work, a child of the consumer span.
    let d = cx.rng.latency(15.0);
    cx.t.add(
        Some(c),
        &owner,
        &owner_host,
        "process order",
        span::SpanKind::Internal,
        cx.at + wait,
        cx.at + wait + d,
        vec![],
    );
    cx.at += wait + d;
    cx.culprit = c;
    cx.culprit_service = owner.clone();
    // The Collector's kafkametrics receiver: lag and lag_sum only, growing.
    let base = cx.rng.between(2000.0, 4000.0);
    let step = cx.rng.between(600.0, 1500.0);
    let group = format!("{owner}-consumers");
    let mut pts = Vec::new();
    for i in 0..5u64 {
        let tm = (t0_ns + i * 20_000_000_000).saturating_sub(90_000_000_000);
        pts.push(gauge(
            "kafka.consumer_group.lag_sum",
            vec![ks("group", &group), ks("topic", &topic)],
            tm,
            base + step * i as f64,
        ));
    }
    cx.metrics
        .push(resource_metrics(vec![ks("service.name", "otelcol")], pts));
}

/// `stock_redis_miss`, `concurrent_cache_tls`.
fn stock_redis_miss(cx: &mut Ctx<'_>) {
    let front = cx.front.clone();
    let front_host = cx.front_host.clone();
    let owner = cx.owner.clone();
    let owner_host = cx.owner_host.clone();
    let cause = cx.cause;
    let srv = cx.srv;
    // @opentelemetry/instrumentation-ioredis: no cache.hit; keys masked.
    let o = srv;
    let get = |t: &mut Trace, a: f64, b: f64, stmt: &str, name: &str| {
        t.add(
            Some(o),
            &front,
            &front_host,
            name,
            span::SpanKind::Client,
            a,
            b,
            vec![
                ks("db.system", "redis"),
                ks("db.statement", stmt),
                ks("net.peer.name", "cache-1"),
                ki("db.redis.database_index", 0),
            ],
        )
    };
    get(&mut cx.t, cx.at, cx.at + 0.7, "GET ?", "get");
    let d = cx.rng.between(400.0, 1500.0);
    let q = cx.t.add(
        Some(o),
        &front,
        &front_host,
        "pg.query:SELECT shop",
        span::SpanKind::Client,
        cx.at + 1.0,
        cx.at + 1.0 + d,
        vec![
            ks("db.system", "postgresql"),
            ks("db.statement", "SELECT * FROM items WHERE id = $1"),
        ],
    );
    get(
        &mut cx.t,
        cx.at + 1.5 + d,
        cx.at + 2.0 + d,
        "SET ? ? ? ?",
        "set",
    );
    cx.at += d + 2.2;
    cx.culprit = q;
    cx.culprit_service = "redis".into(); // the cache that missed (#31)
    if cause == "concurrent_cache_tls" {
        // A smaller second fault: a slow TLS handshake on another call.
        let tls = cx.rng.between(0.25, 0.4) * d;
        let c = cx.t.add(
            Some(srv),
            &front,
            &front_host,
            &format!("POST {owner}"),
            span::SpanKind::Client,
            cx.at,
            cx.at + tls + 20.0,
            vec![ks("server.address", &owner)],
        );
        cx.t.add(
            Some(c),
            &front,
            &front_host,
            "http.tls",
            span::SpanKind::Internal,
            cx.at + 2.0,
            cx.at + 2.0 + tls,
            vec![ks("server.address", &owner)],
        );
        cx.t.add(
            Some(c),
            &owner,
            &owner_host,
            "POST /work",
            span::SpanKind::Server,
            cx.at + 4.0 + tls,
            cx.at + tls + 15.0,
            vec![],
        );
        cx.at += tls + 20.0;
    }
}

/// `compute_before_call`.
fn compute_before_call(cx: &mut Ctx<'_>) {
    let front = cx.front.clone();
    let front_host = cx.front_host.clone();
    let owner = cx.owner.clone();
    let owner_host = cx.owner_host.clone();
    let srv = cx.srv;
    let t0_ns = cx.t0_ns;
    let t_ns = |ms: f64| t0_ns + (ms * 1e6) as u64;
    // The handler computes for a while, then queries: not waiting.
    let s = cx.t.add(
        Some(srv),
        &front,
        &front_host,
        &format!("GET {owner}"),
        span::SpanKind::Client,
        cx.at,
        cx.at,
        vec![ks("server.address", &owner)],
    );
    let work = cx.rng.between(800.0, 2000.0);
    let o = cx.t.add(
        Some(s),
        &owner,
        &owner_host,
        "GET /compute",
        span::SpanKind::Server,
        cx.at + 0.5,
        cx.at + 0.5,
        vec![],
    );
    let d = cx.rng.latency(4.0);
    cx.t.add(
        Some(o),
        &owner,
        &owner_host,
        "SELECT items",
        span::SpanKind::Client,
        cx.at + 0.5 + work,
        cx.at + 0.5 + work + d,
        vec![
            ks("db.system", "postgresql"),
            ks("db.operation.name", "SELECT"),
        ],
    );
    let end = cx.at + 0.5 + work + d + 1.0;
    if let Some(x) = cx.t.get(o) {
        x.end_time_unix_nano = t_ns(end);
    }
    if let Some(x) = cx.t.get(s) {
        x.end_time_unix_nano = t_ns(end + 0.5);
    }
    cx.at = end + 0.5;
    cx.culprit = o;
    cx.culprit_service = owner.clone();
}

/// `no_host_name_cpu`, `late_metrics_cpu`.
fn no_host_name_cpu(cx: &mut Ctx<'_>) {
    let front = cx.front.clone();
    let front_host = cx.front_host.clone();
    let owner = cx.owner.clone();
    let owner_host = cx.owner_host.clone();
    let cause = cx.cause;
    let t0_ns = cx.t0_ns;
    let srv = cx.srv;
    let node = format!("node-{}", cx.rng.range(10, 99));
    let host = if cause == "no_host_name_cpu" {
        cx.t.k8s = true;
        node.clone()
    } else {
        owner_host.clone()
    };
    let d = cx.rng.between(300.0, 1500.0);
    let c = cx.t.add(
        Some(srv),
        &front,
        &front_host,
        &format!("GET {owner}"),
        span::SpanKind::Client,
        cx.at,
        cx.at + d + 2.0,
        vec![ks("server.address", &owner)],
    );
    let sv = cx.t.add(
        Some(c),
        &owner,
        &host,
        "GET /compute",
        span::SpanKind::Server,
        cx.at + 1.0,
        cx.at + d + 1.0,
        vec![],
    );
    cx.at += d + 2.0;
    cx.culprit = sv;
    cx.culprit_service = owner.clone();
    let tm = t0_ns + 5_000_000_000;
    cx.metrics.push(host_metrics(
        &host,
        tm,
        cx.rng.between(0.0, 0.06),
        0.01,
        0.5,
        0.1,
    ));
}

/// `gateway_504_backend_ok`.
fn gateway_504_backend_ok(cx: &mut Ctx<'_>) {
    let route = cx.route.clone();
    let front = cx.front.clone();
    let front_host = cx.front_host.clone();
    let owner = cx.owner.clone();
    let owner_host = cx.owner_host.clone();
    let tid = cx.tid;
    let srv = cx.srv;
    let t0_ns = cx.t0_ns;
    let t_ns = |ms: f64| t0_ns + (ms * 1e6) as u64;
    // The gateway gave up after its timeout; the backend finished later with 200.
    cx.gw_status = 504;
    let timeout = *cx.rng.pick(&[1000.0, 2000.0]);
    let c = cx.t.add(
        Some(srv),
        &front,
        &front_host,
        &format!("POST {owner}"),
        span::SpanKind::Client,
        cx.at,
        cx.at + timeout + 400.0,
        vec![
            ks("server.address", &owner),
            ki("http.response.status_code", 200),
        ],
    );
    let sv = cx.t.add(
        Some(c),
        &owner,
        &owner_host,
        "POST /work",
        span::SpanKind::Server,
        cx.at + 1.0,
        cx.at + timeout + 399.0,
        vec![ki("http.response.status_code", 200)],
    );
    cx.gw_extra.push(gateway_log(
        &route,
        &tid,
        t_ns(cx.at + timeout),
        504,
        cx.at + timeout,
        &front,
        vec![],
    ));
    cx.at += timeout + 400.0;
    cx.culprit = sv;
    cx.culprit_service = owner.clone();
}
