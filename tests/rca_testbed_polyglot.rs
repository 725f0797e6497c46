//! Root causes on telemetry from Java and Go services talking gRPC, each
//! instrumented by its stock OpenTelemetry distribution only: the Java
//! agent from Maven Central on a JDK HTTP server with grpc-java, HikariCP
//! and the PostgreSQL driver, Lettuce, the Kafka clients, resilience4j and Sentinel
//! (`tests/testbed/java`); otelhttp, otelhttptrace and otelgrpc on Go
//! services with go-retryablehttp and failsafe-go (`tests/testbed/go`). Two NGINX in
//! layers (an edge and an inner hop), PostgreSQL with Debian's exporter,
//! Redis, Apache Kafka. causeway runs with its default `correlate` and
//! `kafka_lag` settings.
//!
//! Every fault is a real mechanism, and its ground truth is what the
//! mechanism observed, per trace id (`TRUTH_FILE`), never the field a rule
//! reads:
//!
//! | cause | mechanism | ground truth from |
//! |---|---|---|
//! | upstream_timeout | a Java→Go gRPC call with a 300 ms deadline, a quote whose work outlives it; go-retryablehttp giving each attempt 60 ms against a supplier that takes 300, retrying 20-80 ms apart (one request's retries: its timeouts are the cause) | inventory (Go) saw its context's deadline expire; the client's own count: ≥ 6 attempts, none answered |
//! | upstream_unavailable | the Go reservations gRPC server stopped; a Java endpoint draining (503) under go-retryablehttp's retries 20-80 ms apart (the drain caused them) | orders (Java) got UNAVAILABLE from grpc-java; the client's own statuses: ≥ 5 attempts, 503s |
//! | circuit_open | resilience4j's breaker over those calls opened; failsafe-go's breaker (its defaults: one failure opens it for a minute) over inventory's (Go) calls to the same server; Alibaba Sentinel's degrade rule (3 errors in 1 s open it for 10 s) over the orders service's holds there | orders (Java) caught `CallNotPermittedException`; inventory got failsafe-go's `ErrOpen` (no call made); orders got Sentinel's `BlockException` |
//! | queueing | bursts of 16 tallies on the orders service's HikariCP pool of 8, each holding a connection 200 ms (the Java agent's jdbc-datasource instrumentation on: a `HikariDataSource.getConnection` span) | the handler's wait around `getConnection` (≥ 100 ms) |
//! | rate_limited | the inner NGINX's `limit_req`, the client backing off after `Retry-After` | the client's own statuses: a 429 |
//! | tls_handshake | a TLS server whose certificate callback waits | the driver asked for the slow name; the server counted each slow handshake |
//! | db_lock_contention | a row lock (`SELECT … FOR UPDATE`) held by another transaction | the driver held it |
//! | db_connection_saturation | a batch job holding every connection slot of PostgreSQL (`max_connections=30`) | the driver took them; the orders service got SQLSTATE 53300 |
//! | host_cpu_saturation | 32 busy threads on the host's cores for 25 s while the orders service does CPU-bound work, read by the `hostmetrics` receiver with its defaults | the orders service's thread waited ≥ 50 ms for a core (its wall time less its CPU time); /proc/stat counted the host ≥ 90% busy over the hog |
//! | slow_dependency | a search whose index the driver dropped (a sequential scan) | the driver dropped it |
//! | consumer_lag | the Java Kafka consumer paused | billing's wait per record (≥ 1 s) |
//!
//! `scripts/peers.sh` builds the Go binary and fetches the Java jars and the
//! agent (cached by version and by the files that define them).
//! `CAUSEWAY_TESTBED_SCALE` repeats the load (`bench/rca_testbed.sh`).
#![allow(clippy::unwrap_used)]

mod common;

use common::testbed::{nginx, postgres, spawn, wait_port, Wiring};
use common::*;
use std::collections::{BTreeMap, HashMap};
use std::process::Command;
use std::time::Duration;

#[test]
fn java_and_go_services_over_grpc_get_the_right_cause_and_culprit() {
    let wiring = testbed::wiring();
    let go_bin = testbed::peer("CAUSEWAY_TESTBED_GO");
    let java = testbed::peer("CAUSEWAY_TESTBED_JAVA");
    let dir = testbed::bed_dir();
    let d = dir.path();
    let p = free_port;
    let (pg_port, redis_port, otlp_port, edge_port, inner_port) = (p(), p(), p(), p(), p());
    let (orders_port, orders_grpc, billing_port) = (p(), p(), p());
    let (inventory_port, inventory_grpc, reservations_port, reservations_grpc, certs_port) =
        (p(), p(), p(), p(), p());

    // Few connection slots, as a small managed instance has: a batch job
    // can take them all.
    let _pg = postgres(d, pg_port, &["max_connections=30"]);
    let _redis = testbed::redis(d, redis_port);
    let pg_exp = p();
    let _pg_exporter = testbed::postgres_exporter(d, pg_port, pg_exp);
    // The tables: stock rows to lock, three million items to search by sku.
    let psql = |sql: &str| {
        let st = Command::new("psql")
            .args([
                "-h",
                "127.0.0.1",
                "-p",
                &pg_port.to_string(),
                "-U",
                "postgres",
                "-q",
                "-c",
                sql,
            ])
            .status()
            .unwrap();
        assert!(st.success(), "{sql}");
    };
    psql("CREATE TABLE stock (id int PRIMARY KEY, qty int NOT NULL); INSERT INTO stock SELECT g, 100 FROM generate_series(1, 100) g");
    psql("CREATE TABLE items AS SELECT g AS id, 'sku-' || g AS sku, md5(g::text) AS name FROM generate_series(1, 3000000) g; CREATE INDEX items_sku ON items (sku); ANALYZE items");

    let broker = common::kafka::Broker::start(d);
    broker.create_topic("orders", 1);

    let config = format!(
        r#"{receivers}  kafka_lag:
    brokers: ["{kafka}"]
  hostmetrics: {{}}
  prometheus:
    config:
      global: {{ scrape_interval: 1s, scrape_timeout: 900ms }}
      scrape_configs:
        - job_name: postgres
          static_configs: [{{ targets: ["127.0.0.1:{pg_exp}"] }}]
  gateway_log/edge:
    include: ["{{dir}}/edge-access.log*"]
    start_at: beginning
    format: nginx
    poll_interval: 50ms
    resource: {{ service.name: nginx-edge }}
  gateway_log/inner:
    include: ["{{dir}}/inner-access.log*"]
    start_at: beginning
    format: nginx
    poll_interval: 50ms
    resource: {{ service.name: nginx-inner }}
processors:
  tail_sampling: {sampler}
  correlate:
    # The exporter is scraped every second (above); the README says to
    # set this to the scrape interval. Every threshold is the default.
    dependencies: {{ sample_interval: 1s }}
{tail}"#,
        receivers = causeway_scenarios::config::otlp_http(otlp_port),
        tail = causeway_scenarios::config::analysed(
            "otlp",
            "otlp, gateway_log/edge, gateway_log/inner",
            "kafka_lag, hostmetrics, prometheus"
        ),
        kafka = broker.addr(),
        sampler = wiring
            .sampler_or("{ decision_wait: 8s, policies: [{ name: all, type: always_sample }] }"),
    );
    let daemon = Daemon::start(d, "polyglot", &config);

    // Two NGINX in layers: the edge in front of both services, and an inner
    // hop with a rate limit between inventory and the orders service's supplier endpoint.
    let log_format = r#"log_format gateway escape=json '{"time_iso8601":"$time_iso8601","traceparent":"$http_traceparent",'
    '"route_id":"$route_id","status_code":$status,"request_time":"$request_time",'
    '"upstream_response_time":"$upstream_response_time","upstream_addr":"$upstream_addr",'
    '"request_method":"$request_method","request_uri":"$request_uri","rate_limit_rule":"$rate_limit_rule"}';"#;
    let common_http = |name: &str| {
        format!(
            "daemon off;\nmaster_process off;\nworker_processes 1;\npid {d}/{name}.pid;\nerror_log {d}/{name}-error.log;\n\
             events {{ worker_connections 512; }}\nhttp {{\n  client_body_temp_path {d}/{name}-body;\n  proxy_temp_path {d}/{name}-proxy;\n  \
             fastcgi_temp_path {d}/{name}-fastcgi;\n  uwsgi_temp_path {d}/{name}-uwsgi;\n  scgi_temp_path {d}/{name}-scgi;\n  {log_format}\n",
            d = d.display()
        )
    };
    let edge_conf = format!(
        r#"{head}
  map $request_uri $rate_limit_rule {{ default ""; }}
  upstream orders {{ server 127.0.0.1:{orders_port}; }}
  upstream inventory {{ server 127.0.0.1:{inventory_port}; }}
  server {{
    listen 127.0.0.1:{edge_port};
    access_log {d}/edge-access.log gateway;
    set $route_id "";
    location = /quote {{ set $route_id quote; proxy_pass http://orders; }}
    location = /reserve {{ set $route_id reserve; proxy_pass http://orders; }}
    location /lock/ {{ set $route_id stock-lock; proxy_pass http://orders; }}
    location = /search {{ set $route_id search; proxy_pass http://orders; }}
    location = /order {{ set $route_id order; proxy_pass http://orders; }}
    location = /report {{ set $route_id report; proxy_pass http://orders; }}
    location = /compute {{ set $route_id compute; proxy_pass http://orders; }}
    location = /restock {{ set $route_id restock; proxy_pass http://inventory; }}
    location = /restock-limited {{ set $route_id restock-limited; proxy_pass http://inventory; }}
    location = /restock-slow {{ set $route_id restock-slow; proxy_pass http://inventory; }}
    location = /hold {{ set $route_id hold; proxy_pass http://inventory; }}
    location = /hold-order {{ set $route_id hold-order; proxy_pass http://orders/hold; }}
    location = /tally {{ set $route_id tally; proxy_pass http://orders; }}
    location = /catalog {{ set $route_id catalog; proxy_pass http://inventory; }}
  }}
}}
"#,
        head = common_http("edge"),
        d = d.display()
    );
    let inner_conf = format!(
        r#"{head}
  limit_req_zone $binary_remote_addr zone=supplier:1m rate=2r/s;
  limit_req_status 429;
  map $limit_req_status $rate_limit_rule {{ REJECTED "supplier-2rps"; default ""; }}
  server {{
    listen 127.0.0.1:{inner_port};
    access_log {d}/inner-access.log gateway;
    set $route_id "";
    location = /supplier {{
      set $route_id supplier;
      limit_req zone=supplier;
      add_header Retry-After 1 always;
      proxy_pass http://127.0.0.1:{orders_port};
    }}
  }}
}}
"#,
        head = common_http("inner"),
        d = d.display()
    );
    let _edge = nginx("edge", d, &edge_conf, edge_port);
    let _inner = nginx("inner", d, &inner_conf, inner_port);

    let truth = d.join("truth.jsonl");
    let otlp = format!("http://127.0.0.1:{otlp_port}");
    let stock_env = |c: &mut Command, service: &str| {
        c.env("OTEL_SERVICE_NAME", service)
            .env("OTEL_EXPORTER_OTLP_ENDPOINT", &otlp)
            .env("OTEL_BSP_SCHEDULE_DELAY", "200")
            .env("OTEL_METRICS_EXPORTER", "none")
            .env("OTEL_LOGS_EXPORTER", "none")
            .env("TRUTH_FILE", &truth);
    };
    let jvm = |role: &'static str, port: u16, extra: &[(&str, String)]| {
        let mut c = Command::new("java");
        c.arg("-Xmx256m")
            // The agent's pool instrumentation (off by default): a span for
            // each connection taken from HikariCP.
            .arg("-Dotel.instrumentation.jdbc-datasource.enabled=true")
            .arg(format!(
                "-javaagent:{}",
                java.join("opentelemetry-javaagent.jar").display()
            ))
            .arg("-cp")
            .arg(format!(
                "{}:{}/*",
                java.join("classes").display(),
                java.join("lib").display()
            ))
            .args(["Main", role])
            .env("PORT", port.to_string())
            .env("KAFKA", broker.addr());
        stock_env(&mut c, role);
        for (k, v) in extra {
            c.env(k, v);
        }
        spawn(role, &mut c, d)
    };
    let go = |role: &'static str, port: u16, extra: &[(&str, String)]| {
        let mut c = Command::new(&go_bin);
        c.arg(role).env("PORT", port.to_string());
        stock_env(&mut c, role);
        for (k, v) in extra {
            c.env(k, v);
        }
        spawn(role, &mut c, d)
    };
    let addr = |port: u16| format!("127.0.0.1:{port}");
    let mut orders = jvm(
        "orders",
        orders_port,
        &[
            ("GRPC_PORT", orders_grpc.to_string()),
            ("INVENTORY_ADDR", addr(inventory_grpc)),
            ("RESERVATIONS_ADDR", addr(reservations_grpc)),
            (
                "PG_URL",
                format!("jdbc:postgresql://127.0.0.1:{pg_port}/postgres?user=postgres"),
            ),
            ("REDIS_URL", format!("redis://127.0.0.1:{redis_port}")),
        ],
    );
    let mut billing = jvm("billing", billing_port, &[]);
    let mut inventory = go(
        "inventory",
        inventory_port,
        &[
            ("GRPC_PORT", inventory_grpc.to_string()),
            ("LEDGER_ADDR", addr(orders_grpc)),
            ("REDIS_ADDR", addr(redis_port)),
            (
                "SUPPLIER_URL",
                format!("http://{}/supplier", addr(orders_port)),
            ),
            ("INNER_GATEWAY", format!("http://{}", addr(inner_port))),
            (
                "SLOW_URL",
                format!("http://{}/slow", addr(reservations_port)),
            ),
            ("RESERVATIONS_ADDR", addr(reservations_grpc)),
            ("CERTS_ADDR", addr(certs_port)),
        ],
    );
    let mut reservations = go(
        "reservations",
        reservations_port,
        &[("GRPC_PORT", reservations_grpc.to_string())],
    );
    let mut certs = go("certs", certs_port, &[("SLOW_HANDSHAKE_MS", "400".into())]);
    for (port, p) in [
        (orders_grpc, &mut orders),
        (billing_port, &mut billing),
        (inventory_port, &mut inventory),
        (reservations_grpc, &mut reservations),
        (certs_port, &mut certs),
    ] {
        let name = p.1;
        wait_port(port, name, p, d);
    }
    let mut driver = go(
        "driver",
        0,
        &[
            ("GATEWAY", format!("http://{}", addr(edge_port))),
            (
                "PG_DSN",
                format!("postgres://postgres@127.0.0.1:{pg_port}/postgres?sslmode=disable"),
            ),
            ("ORDERS_ADMIN", format!("http://{}", addr(orders_port))),
            (
                "RESERVATIONS_ADMIN",
                format!("http://{}", addr(reservations_port)),
            ),
            ("BILLING_ADMIN", format!("http://{}", addr(billing_port))),
            // Behind the shipped sampler, the routes of slow requests have
            // their normal traffic first: their p99 is then the faults'.
            (
                "WARMUP",
                if wiring == Wiring::Shipped {
                    "1500"
                } else {
                    "0"
                }
                .to_string(),
            ),
            (
                "SCALE",
                std::env::var("CAUSEWAY_TESTBED_SCALE").unwrap_or_else(|_| "1".into()),
            ),
        ],
    );
    testbed::wait_driver(&mut driver, d);

    // The ground truth: the driver's label, or what the mechanism observed.
    let read_truth = || {
        let mut driver: BTreeMap<String, (String, String)> = BTreeMap::new();
        let mut observed: HashMap<String, String> = HashMap::new();
        let mut slow_handshakes = 0;
        for v in read_jsonl(&truth) {
            if let Some(busy) = v["cpu_hog_busy"].as_f64() {
                // The hog's effect on the host, as /proc/stat counted it.
                assert!(busy >= 0.9, "the CPU hog kept the host {busy:.2} busy");
                continue;
            }
            if v["slow_handshake_ms"].is_number() {
                slow_handshakes += 1;
                continue;
            }
            let id = v["trace_id"].as_str().unwrap().to_string();
            if let Some(l) = v["label"].as_str() {
                let path = v["path"].as_str().unwrap().to_string();
                driver.insert(id, (l.to_string(), path));
            } else if let Some(o) = v["observed"].as_str() {
                observed.insert(id, o.to_string());
            }
        }
        (driver, observed, slow_handshakes)
    };
    // Billing consumes the paused orders after the driver is done: wait for its records.
    wait_for(
        Duration::from_secs(60),
        "billing consumed every order",
        || {
            let (driver, observed, _) = read_truth();
            driver
                .iter()
                .filter(|(_, (_, p))| p == "/order")
                .all(|(id, _)| observed.contains_key(id))
        },
    );
    let (driver_labels, observed, slow_handshakes) = read_truth();
    let mut label: BTreeMap<String, String> = BTreeMap::new();
    for (id, (l, path)) in &driver_labels {
        let l = if l == "observed" {
            observed
                .get(id)
                .cloned()
                .unwrap_or_else(|| "healthy".into())
        } else {
            // What the driver caused, the service met where it reports it.
            if let Some(o) = observed.get(id).filter(|_| l != "warmup") {
                assert_eq!(
                    o, l,
                    "{id} {path}: the driver caused {l}, the service saw {o}"
                );
            }
            l.clone()
        };
        assert!(
            !l.starts_with("unexpected"),
            "the test bed misbehaved: {id} {path} {l}"
        );
        if l != "warmup" && l != "ambiguous" {
            label.insert(id.clone(), l);
        }
    }
    // Every handshake the driver asked to be slow was slow at the server.
    let asked = label.values().filter(|l| *l == "tls_handshake").count();
    assert_eq!(
        slow_handshakes, asked,
        "slow handshakes seen by the TLS server"
    );
    let ambiguous = driver_labels
        .keys()
        .filter(|id| observed.get(*id).map(String::as_str) == Some("ambiguous"))
        .count();
    eprintln!(
        "not scored (a drain answered within 5 attempts, an order that waited 100 ms to 1 s, a reservation that met both the stopped server and the breaker): {ambiguous}"
    );

    let traces = d.join("traces.jsonl");
    let (label, got) = testbed::judged(wiring, &daemon, &traces, label, driver_labels.len());

    // The service at fault, by what the mechanism was.
    let culprit_of = |cause: &str, id: &str| -> (String, &'static str) {
        let path = driver_labels.get(id).map_or("", |(_, p)| p.as_str());
        let (service, kind) = match cause {
            // The callee whose work outlived the deadline, the server that
            // stopped (and the breaker guarding it), the draining endpoint,
            // the slow supplier hammered by retries, the TLS server.
            "upstream_timeout" if path == "/restock-slow" => ("reservations", "callee"),
            "upstream_timeout" => ("inventory", "callee"),
            "upstream_unavailable" if path == "/restock" => ("orders", "callee"),
            "upstream_unavailable" | "circuit_open" => ("reservations", "callee"),
            // A wait for one of the orders service's own pooled connections.
            "queueing" => ("orders", "service"),
            "tls_handshake" => ("certs", "callee"),
            // The inner gateway's limit, not the edge.
            "rate_limited" => ("nginx-inner", "limiter"),
            "db_lock_contention" | "slow_dependency" | "db_connection_saturation" => {
                ("postgresql", "dependency")
            }
            "consumer_lag" => ("billing", "consumer"),
            // The service whose host starved it, of kind host (the summary names the host).
            "host_cpu_saturation" => ("orders", "host"),
            other => panic!("no culprit for {other}"),
        };
        (service.to_string(), kind)
    };
    let score = testbed::score(&label, &got, &culprit_of, &traces);
    // A host's saturation names the host, as the hostmetrics receiver does.
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    for (id, _) in label.iter().filter(|(_, l)| *l == "host_cpu_saturation") {
        let a = &got[id].root;
        if a["rca.cause"] == "host_cpu_saturation" {
            let summary = &a["rca.summary"];
            assert!(
                summary.contains(&format!("host {} ", host.trim())),
                "{summary}"
            );
        }
    }
    score.assert_bounds_for(
        wiring,
        &[
            "upstream_timeout",
            "upstream_unavailable",
            "circuit_open",
            "rate_limited",
            "tls_handshake",
            "db_lock_contention",
            "slow_dependency",
            "db_connection_saturation",
            "consumer_lag",
            "host_cpu_saturation",
            "queueing",
        ],
        5,
    );
}
