//! Hard cases of issue #31, as real instrumentations write them: gRPC
//! status codes from Go's `otelgrpc` (a number) and Java's agent (an
//! exception) and a name some SDKs write instead, two gateway layers (an
//! edge gateway in front of a sidecar whose line arrives last), a
//! database table whose name says "queue", and client spans named just
//! `GET` (the stable HTTP conventions) to routes of different speeds.

use opentelemetry_proto::tonic::logs::v1::{ResourceLogs, ScopeLogs};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::span;

use crate::build::*;

fn grpc(service: &str, method: &str) -> Vec<opentelemetry_proto::tonic::common::v1::KeyValue> {
    vec![
        ks("rpc.system", "grpc"),
        ks("rpc.service", service),
        ks("rpc.method", method),
    ]
}

/// Go's `otelgrpc`: the client's deadline ran out (`rpc.grpc.status_code`
/// 4, "context deadline exceeded") while the server was still working.
pub(crate) fn grpc_deadline(cx: &mut Ctx<'_>) {
    let (front, front_host) = (cx.front.clone(), cx.front_host.clone());
    let (owner, owner_host) = (cx.owner.clone(), cx.owner_host.clone());
    cx.gw_status = 504;
    let deadline = *cx.rng.pick(&[800.0, 1500.0]);
    let mut attrs = grpc("inventory.Stock", "Reserve");
    attrs.extend([
        ks("server.address", &owner),
        ki("server.port", 50051),
        ki("rpc.grpc.status_code", 4),
    ]);
    let c = cx.t.add(
        Some(cx.srv),
        &front,
        &front_host,
        "inventory.Stock/Reserve",
        span::SpanKind::Client,
        cx.at,
        cx.at + deadline,
        attrs,
    );
    let s = cx.t.add(
        Some(c),
        &owner,
        &owner_host,
        "inventory.Stock/Reserve",
        span::SpanKind::Server,
        cx.at + 1.0,
        cx.at + deadline + cx.rng.latency(400.0),
        grpc("inventory.Stock", "Reserve"),
    );
    cx.t.fail(c, "context deadline exceeded", None);
    cx.at += deadline;
    cx.culprit = s;
    cx.culprit_service = owner;
}

/// Java's agent: the channel found no server (`rpc.grpc.status_code` 14,
/// an `io.grpc.StatusRuntimeException: UNAVAILABLE` exception), no server
/// span: the callee is named by its address.
pub(crate) fn grpc_unavailable(cx: &mut Ctx<'_>) {
    let (front, front_host) = (cx.front.clone(), cx.front_host.clone());
    let owner = cx.owner.clone();
    cx.gw_status = 503;
    let mut attrs = grpc("payments.Charges", "Create");
    attrs.extend([
        ks("server.address", &owner),
        ki("server.port", 50051),
        ki("rpc.grpc.status_code", 14),
    ]);
    let d = cx.rng.latency(4.0);
    let c = cx.t.add(
        Some(cx.srv),
        &front,
        &front_host,
        "payments.Charges/Create",
        span::SpanKind::Client,
        cx.at,
        cx.at + d,
        attrs,
    );
    cx.t.fail(
        c,
        "UNAVAILABLE: io exception",
        Some((
            "io.grpc.StatusRuntimeException",
            "UNAVAILABLE: io exception",
        )),
    );
    cx.at += d + 1.0;
    cx.culprit = c;
    cx.culprit_service = format!("{owner}:50051");
}

/// A server that sheds load answers `RESOURCE_EXHAUSTED`, written by name
/// (as some SDKs do); the frontend passes it on as 429. The limiter is
/// the callee, not the gateway that passed the 429 on.
pub(crate) fn grpc_resource_exhausted(cx: &mut Ctx<'_>) {
    let (front, front_host) = (cx.front.clone(), cx.front_host.clone());
    let (owner, owner_host) = (cx.owner.clone(), cx.owner_host.clone());
    cx.gw_status = 429;
    let mut attrs = grpc("quotes.Quotes", "Get");
    attrs.extend([
        ks("server.address", &owner),
        ki("server.port", 50051),
        ks("rpc.grpc.status_code", "RESOURCE_EXHAUSTED"),
    ]);
    let d = cx.rng.latency(6.0);
    let c = cx.t.add(
        Some(cx.srv),
        &front,
        &front_host,
        "quotes.Quotes/Get",
        span::SpanKind::Client,
        cx.at,
        cx.at + d,
        attrs,
    );
    let mut sattrs = grpc("quotes.Quotes", "Get");
    sattrs.push(ki("rpc.grpc.status_code", 8));
    let s = cx.t.add(
        Some(c),
        &owner,
        &owner_host,
        "quotes.Quotes/Get",
        span::SpanKind::Server,
        cx.at + 0.5,
        cx.at + d - 0.5,
        sattrs,
    );
    cx.t.fail(c, "RESOURCE_EXHAUSTED: quota exceeded", None);
    cx.t.fail(s, "quota exceeded", None);
    cx.at += d + 1.0;
    cx.culprit = c;
    cx.culprit_service = owner;
}

/// An edge gateway in front of a sidecar: the sidecar could not connect to
/// the callee (503 UF) and its line arrives after the edge's (502). The
/// answer and the route are the edge's; the sidecar's upstream is the
/// callee.
pub(crate) fn two_gateway_layers(cx: &mut Ctx<'_>) {
    let (front, front_host) = (cx.front.clone(), cx.front_host.clone());
    let owner = cx.owner.clone();
    let (tid, t0_ns) = (cx.tid, cx.t0_ns);
    let t_ns = |ms: f64| t0_ns + (ms * 1e6) as u64;
    cx.gw_status = 502;
    let d = cx.rng.latency(3.0);
    let c = cx.t.add(
        Some(cx.srv),
        &front,
        &front_host,
        "POST",
        span::SpanKind::Client,
        cx.at,
        cx.at + d,
        vec![
            ks("server.address", &owner),
            ki("server.port", 8080),
            ks("http.request.method", "POST"),
            ki("http.response.status_code", 503),
        ],
    );
    cx.t.fail(c, "", None);
    // The sidecar's line: its request was the call, but its host's clock
    // is a second ahead, so its record is the latest of the trace.
    let record = gateway_log(
        &format!("inbound|8080||{owner}"),
        &tid,
        t_ns(cx.at + d + 1000.0),
        503,
        d,
        &format!("{owner}:8080"),
        vec![
            ks("gateway.response_flags", "UF"),
            ks("gateway.circuit_state", "CLOSED"),
        ],
    );
    cx.logs.push(ResourceLogs {
        resource: Some(Resource {
            attributes: vec![ks("service.name", "sidecar-proxy")],
            ..Default::default()
        }),
        scope_logs: vec![ScopeLogs {
            log_records: vec![record],
            ..Default::default()
        }],
        ..Default::default()
    });
    cx.at += d + 1.0;
    cx.culprit = c;
    cx.culprit_service = format!("{owner}:8080");
}

/// A slow query on a table called `job_queue`: the name says "queue", the
/// span is a database query: a slow dependency, not queueing.
pub(crate) fn job_queue_table(cx: &mut Ctx<'_>) {
    let (front, front_host) = (cx.front.clone(), cx.front_host.clone());
    let d = cx.rng.between(600.0, 1500.0);
    let q = cx.t.add(
        Some(cx.srv),
        &front,
        &front_host,
        "SELECT job_queue",
        span::SpanKind::Client,
        cx.at,
        cx.at + d,
        vec![
            ks("db.system", "postgresql"),
            ks("db.operation.name", "SELECT"),
            ks("db.collection.name", "job_queue"),
            ks("server.address", "jobs-db"),
        ],
    );
    cx.at += d + 1.0;
    cx.culprit = q;
    cx.culprit_service = "postgresql".into();
}

/// A stable-convention HTTP call (the client span named just `GET`, the
/// route in `url.template`, the server's in `http.route`) to a route of
/// `catalog` that is fast by nature, taking a second: a slow dependency.
/// Normal traffic (`stable_get_call` in the warm-up) calls a slow route and
/// a fast one under the same span name, so only a baseline by operation
/// tells this apart from the slow route's normal.
pub(crate) fn stable_get_routes(cx: &mut Ctx<'_>) {
    let d = cx.rng.between(600.0, 1500.0);
    let c = stable_get_call(cx, "/item/{id}", d);
    cx.culprit = c;
    cx.culprit_service = "catalog".into();
}

/// One stable-convention `GET` from the frontend to `catalog`'s `route`,
/// answered in `d` ms; returns the server span.
pub(crate) fn stable_get_call(cx: &mut Ctx<'_>, route: &str, d: f64) -> [u8; 8] {
    let (front, front_host) = (cx.front.clone(), cx.front_host.clone());
    let c = cx.t.add(
        Some(cx.srv),
        &front,
        &front_host,
        "GET",
        span::SpanKind::Client,
        cx.at,
        cx.at + d + 2.0,
        vec![
            ks("http.request.method", "GET"),
            ks("url.template", route),
            ks("server.address", "catalog"),
            ki("server.port", 8080),
            ki("http.response.status_code", 200),
        ],
    );
    let s = cx.t.add(
        Some(c),
        "catalog",
        "catalog-host-1",
        &format!("GET {route}"),
        span::SpanKind::Server,
        cx.at + 1.0,
        cx.at + d + 1.0,
        vec![
            ks("http.request.method", "GET"),
            ks("http.route", route),
            ki("http.response.status_code", 200),
        ],
    );
    cx.at += d + 3.0;
    s
}
