//! The Envoy family: its upstream clusters' overflows, connect failures,
//! timeouts, TLS errors, open circuit breakers and connect time. Envoy's
//! series describe its upstream clusters: a span joins the cluster whose
//! `envoy_cluster_name` names its host (Istio's
//! `outbound|9080||reviews.default.svc.cluster.local`), not the proxy's address.

use super::{add, host_part, maxed, mean, norm, DepRow, Dependency, Family, Points, Window};
use crate::correlate::model::cause::{CIRCUIT_OPEN, TLS_HANDSHAKE, UPSTREAM_UNAVAILABLE};
use crate::correlate::model::table::{so, Column, V};
use crate::correlate::model::{Rule, Series};

/// Envoy.
#[derive(Debug, Default)]
pub struct Envoy;

/// Envoy's measurements of an upstream cluster.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct EnvoyRow {
    /// The upstream cluster.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
    /// `upstream_rq_pending_overflow` (increase).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pending_overflow: Option<f64>,
    /// `upstream_cx_overflow` + `upstream_cx_pool_overflow` (increase).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cx_overflow: Option<f64>,
    /// `upstream_cx_connect_fail` (increase).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub connect_fail: Option<f64>,
    /// `upstream_rq_timeout` (increase).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rq_timeout: Option<f64>,
    /// `ssl.connection_error` + `ssl.fail_verify_*` (increase).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ssl_errors: Option<f64>,
    /// `circuit_breakers.default.*_open`: the largest (1 = at capacity).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub breaker_open: Option<f64>,
    /// `upstream_cx_connect_ms`: the mean over the interval.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub connect_ms: Option<f64>,
}

/// The columns EnvoyRow adds to the `dependency` and `dependencies` tables.
static ENVOY: &[Column<EnvoyRow>] = &[
    Column::<EnvoyRow>::text("envoy_cluster", |r, _| so(&r.cluster)).doc("The upstream cluster."),
    Column::<EnvoyRow>::float("pending_overflow", |r, _| V::F(r.pending_overflow))
        .doc("`upstream_rq_pending_overflow` (increase)."),
    Column::<EnvoyRow>::float("cx_overflow", |r, _| V::F(r.cx_overflow))
        .doc("`upstream_cx_overflow` + `upstream_cx_pool_overflow` (increase)."),
    Column::<EnvoyRow>::float("connect_fail", |r, _| V::F(r.connect_fail))
        .doc("`upstream_cx_connect_fail` (increase)."),
    Column::<EnvoyRow>::float("rq_timeout", |r, _| V::F(r.rq_timeout))
        .doc("`upstream_rq_timeout` (increase)."),
    Column::<EnvoyRow>::float("ssl_errors", |r, _| V::F(r.ssl_errors))
        .doc("`ssl.connection_error` + `ssl.fail_verify_*` (increase)."),
    Column::<EnvoyRow>::float("breaker_open", |r, _| V::F(r.breaker_open))
        .doc("`circuit_breakers.default.*_open`: the largest (1 = at capacity)."),
    Column::<EnvoyRow>::float("connect_ms", |r, _| V::F(r.connect_ms))
        .doc("`upstream_cx_connect_ms`: the mean over the interval."),
];

const CONNECT_MS: &str = "envoy_cluster_upstream_cx_connect_ms";

fn cluster_names<'a>(d: &'a Dependency<'a>) -> impl Iterator<Item = &'a str> + 'a {
    d.series.iter().filter_map(|s| {
        s.attr("envoy_cluster_name")
            .or_else(|| s.attr("cluster_name"))
    })
}

impl Family for Envoy {
    type Row = EnvoyRow;

    fn name(&self) -> &'static str {
        "envoy"
    }

    fn columns(&self) -> &'static [Column<EnvoyRow>] {
        ENVOY
    }

    fn system(&self, base: &str) -> Option<&'static str> {
        matches!(
            base,
            "envoy_cluster_upstream_rq_pending_overflow"
                | "envoy_cluster_upstream_cx_overflow"
                | "envoy_cluster_upstream_cx_pool_overflow"
                | "envoy_cluster_upstream_cx_connect_fail"
                | "envoy_cluster_upstream_rq_timeout"
                | "envoy_cluster_upstream_cx_connect_ms"
                | "envoy_cluster_circuit_breakers_default_cx_open"
                | "envoy_cluster_circuit_breakers_default_cx_pool_open"
                | "envoy_cluster_circuit_breakers_default_rq_pending_open"
                | "envoy_cluster_circuit_breakers_default_rq_open"
                | "envoy_cluster_ssl_connection_error"
                | "envoy_cluster_ssl_fail_verify_error"
                | "envoy_cluster_ssl_fail_verify_san"
                | "envoy_cluster_ssl_fail_verify_no_cert"
                | "envoy_cluster_ssl_fail_verify_cert_hash"
                | "envoy_cluster_ssl_handshake"
        )
        .then_some("envoy")
    }

    fn histograms(&self) -> &'static [&'static str] {
        &[CONNECT_MS]
    }

    /// The clusters of `d` whose name names `host` (normalised, no port).
    fn units(&self, d: &Dependency<'_>, host: &str) -> Option<Vec<String>> {
        if host.is_empty() {
            return Some(Vec::new());
        }
        let mut out: Vec<String> = cluster_names(d)
            .filter(|c| {
                let c = c.to_ascii_lowercase();
                c == host
                    || c.split(['|', ':']).any(|part| {
                        let p = norm(part);
                        p == host || host_part(&p) == host
                    })
            })
            .map(str::to_string)
            .collect();
        out.sort();
        out.dedup();
        Some(out)
    }

    fn in_unit(&self, s: &Series, unit: &str) -> bool {
        s.attr("envoy_cluster_name")
            .or_else(|| s.attr("cluster_name"))
            == Some(unit)
    }

    fn all_units(&self, d: &Dependency<'_>) -> Option<Vec<String>> {
        let mut c: Vec<String> = d
            .series
            .iter()
            .filter_map(|x| x.attr("envoy_cluster_name").map(str::to_string))
            .collect();
        c.sort();
        c.dedup();
        Some(c)
    }

    fn fill(&self, r: &mut DepRow<EnvoyRow>, points: &[Points<'_>], w: &Window) {
        for p in points {
            match p.name() {
                "envoy_cluster_upstream_rq_pending_overflow" => p
                    .increase()
                    .into_iter()
                    .for_each(|v| add(&mut r.m.pending_overflow, v)),
                "envoy_cluster_upstream_cx_overflow"
                | "envoy_cluster_upstream_cx_pool_overflow" => p
                    .increase()
                    .into_iter()
                    .for_each(|v| add(&mut r.m.cx_overflow, v)),
                "envoy_cluster_upstream_cx_connect_fail" => p
                    .increase()
                    .into_iter()
                    .for_each(|v| add(&mut r.m.connect_fail, v)),
                "envoy_cluster_upstream_rq_timeout" => p
                    .increase()
                    .into_iter()
                    .for_each(|v| add(&mut r.m.rq_timeout, v)),
                n if n.starts_with("envoy_cluster_ssl_") && n != "envoy_cluster_ssl_handshake" => p
                    .increase()
                    .into_iter()
                    .for_each(|v| add(&mut r.m.ssl_errors, v)),
                n if n.starts_with("envoy_cluster_circuit_breakers_") => p
                    .inside(w)
                    .into_iter()
                    .for_each(|v| maxed(&mut r.m.breaker_open, v)),
                _ => {}
            }
        }
        r.m.connect_ms = mean(points, CONNECT_MS);
        r.m.cluster = w.unit.clone();
    }

    fn rules(&self) -> Vec<Rule> {
        let r = Rule::builtin;
        vec![
            r(
                "envoy_overflow",
                &CIRCUIT_OPEN,
                r#"
SELECT s.trace_id, 0.8 AS confidence,
  concat('Envoy''s circuit breaker for ', max(r.envoy_cluster), ' was at capacity when ', max(s.service), ' called ',
         coalesce(max(s.server_address), max(s.name)), ': ', CAST(CAST(coalesce(max(r.pending_overflow), 0) AS BIGINT) AS VARCHAR),
         ' requests overflowed its pending queue (upstream_rq_pending_overflow) and ',
         CAST(CAST(coalesce(max(r.cx_overflow), 0) AS BIGINT) AS VARCHAR), ' its connection limit (upstream_cx_overflow) meanwhile') AS summary,
  concat('upstream_rq_pending_overflow=', coalesce(CAST(max(r.pending_overflow) AS VARCHAR), ''), ' upstream_cx_overflow=',
         coalesce(CAST(max(r.cx_overflow) AS VARCHAR), ''), ' circuit_breakers_open=', coalesce(CAST(max(r.breaker_open) AS VARCHAR), '')) AS evidence,
  -- The sidecar's account of the call: like a gateway's line, it sits
  -- between the call and the upstream it names.
  coalesce(max(s.callee), max(s.server_address)) AS culprit_service,
  CASE WHEN bool_or(t.failed) THEN max(t.duration_ms) ELSE max(s.path_ms) END AS explained_ms,
  bool_or(t.failed) AS explains_failure
FROM dependency r JOIN spans s ON s.trace_id = r.trace_id AND s.span_id = r.span_id JOIN traces t ON t.trace_id = s.trace_id
WHERE r.system = 'envoy' AND (r.pending_overflow > 0 OR r.cx_overflow > 0 OR r.breaker_open >= 1)
  AND (s.status = 'error' OR s.http_status = 503)
GROUP BY s.trace_id"#,
            ),
            r(
                "envoy_connect_fail",
                &UPSTREAM_UNAVAILABLE,
                r#"
SELECT s.trace_id, 0.8 AS confidence,
  concat('Envoy could not connect to ', max(r.envoy_cluster), ' when ', max(s.service), ' called it: ',
         CAST(CAST(max(r.connect_fail) AS BIGINT) AS VARCHAR), ' connection failures meanwhile (upstream_cx_connect_fail)') AS summary,
  -- The sidecar's account of the call: like a gateway's line, it sits
  -- between the call and the upstream it names.
  coalesce(max(s.callee), max(s.server_address)) AS culprit_service,
  CASE WHEN bool_or(t.failed) THEN max(t.duration_ms) ELSE max(s.path_ms) END AS explained_ms,
  bool_or(t.failed) AS explains_failure
FROM dependency r JOIN spans s ON s.trace_id = r.trace_id AND s.span_id = r.span_id JOIN traces t ON t.trace_id = s.trace_id
WHERE r.system = 'envoy' AND r.connect_fail > 0 AND coalesce(r.pending_overflow, 0) = 0 AND coalesce(r.cx_overflow, 0) = 0
  AND coalesce(r.ssl_errors, 0) = 0 AND (s.status = 'error' OR s.http_status IN (502, 503))
GROUP BY s.trace_id"#,
            ),
            r(
                "envoy_tls",
                &TLS_HANDSHAKE,
                r#"
SELECT s.trace_id, 0.8 AS confidence,
  concat('TLS to ', max(r.envoy_cluster), ' through Envoy: ',
         CASE WHEN max(r.ssl_errors) > 0 THEN concat(CAST(CAST(max(r.ssl_errors) AS BIGINT) AS VARCHAR), ' handshake errors (ssl.connection_error, ssl.fail_verify_*)')
              ELSE concat('connections took ', CAST(CAST(max(r.connect_ms) AS BIGINT) AS VARCHAR), ' ms to set up (upstream_cx_connect_ms)') END,
         ' when ', max(s.service), ' called it') AS summary,
  -- The sidecar's account of the call: like a gateway's line, it sits
  -- between the call and the upstream it names.
  coalesce(max(s.callee), max(s.server_address)) AS culprit_service,
  CASE WHEN bool_or(t.failed) AND max(r.ssl_errors) > 0 THEN max(t.duration_ms)
       ELSE least(max(s.path_ms), coalesce(max(r.connect_ms), max(s.path_ms))) END AS explained_ms,
  bool_or(t.failed) AND coalesce(max(r.ssl_errors), 0) > 0 AS explains_failure
FROM dependency r JOIN spans s ON s.trace_id = r.trace_id AND s.span_id = r.span_id JOIN traces t ON t.trace_id = s.trace_id
WHERE r.system = 'envoy' AND ((r.ssl_errors > 0 AND (s.status = 'error' OR s.http_status IN (502, 503)))
                              OR (r.connect_ms >= 200 AND s.duration_ms >= r.connect_ms))
GROUP BY s.trace_id"#,
            ),
        ]
    }
}
