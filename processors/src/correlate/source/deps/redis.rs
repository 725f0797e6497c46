//! The Redis family: redis_exporter's keyspace hits and misses, clients,
//! and the server's own latency percentile of the command a span ran
//! (Redis 7); the server beside the exporter by `redis_instance_info{tcp_port}`.

use super::{maxed, up, DepRow, Family, Points, Window};
use crate::correlate::model::cause::{self, Cause};
use crate::correlate::model::table::{Column, V};
use crate::correlate::model::{Rule, Series};

/// A cache missed and the request fell back to the slower store.
pub static CACHE_MISS_FALLBACK: Cause = Cause::new("cache_miss_fallback", cause::dependency);

/// Redis.
#[derive(Debug, Default)]
pub struct Redis;

/// Redis's measurements of a server.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct RedisRow {
    /// Keyspace hits (increase).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hits: Option<f64>,
    /// Keyspace misses (increase).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub misses: Option<f64>,
    /// misses ÷ (hits + misses).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub miss_ratio: Option<f64>,
    /// `redis_connected_clients`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub connected_clients: Option<f64>,
    /// `redis_blocked_clients`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub blocked_clients: Option<f64>,
    /// The server's own 99th percentile latency (µs) of the command the span ran (`redis_latency_percentiles_usec{cmd,quantile="99"}`, Redis 7).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command_p99_us: Option<f64>,
}

/// The columns RedisRow adds to the `dependency` and `dependencies` tables.
static REDIS: &[Column<RedisRow>] = &[
    Column::<RedisRow>::float("hits", |r, _| V::F(r.hits))
    .doc("Keyspace hits (increase)."),
    Column::<RedisRow>::float("misses", |r, _| V::F(r.misses))
    .doc("Keyspace misses (increase)."),
    Column::<RedisRow>::float("miss_ratio", |r, _| V::F(r.miss_ratio))
    .doc("misses ÷ (hits + misses)."),
    Column::<RedisRow>::float("connected_clients", |r, _| V::F(r.connected_clients))
    .doc("`redis_connected_clients`."),
    Column::<RedisRow>::float("blocked_clients", |r, _| V::F(r.blocked_clients))
    .doc("`redis_blocked_clients`."),
    Column::<RedisRow>::float("command_p99_us", |r, _| V::F(r.command_p99_us))
    .doc("The server's own 99th percentile latency (µs) of the command the span ran (`redis_latency_percentiles_usec{cmd,quantile=\"99\"}`, Redis 7)."),
];

impl Family for Redis {
    type Row = RedisRow;

    fn name(&self) -> &'static str {
        "redis"
    }

    fn columns(&self) -> &'static [Column<RedisRow>] {
        REDIS
    }

    fn system(&self, base: &str) -> Option<&'static str> {
        matches!(
            base,
            "redis_keyspace_hits"
                | "redis_keyspace_misses"
                | "redis_connected_clients"
                | "redis_blocked_clients"
                | "redis_instance_info"
                | "redis_latency_percentiles_usec"
                | "redis_up"
        )
        .then_some("redis")
    }

    fn beside(&self, s: &Series) -> Option<String> {
        (s.name == "redis_instance_info")
            .then(|| s.attr("tcp_port").map(str::to_string))
            .flatten()
    }

    fn fill(&self, r: &mut DepRow<RedisRow>, points: &[Points<'_>], w: &Window) {
        for p in points {
            let s = p.series;
            match p.name() {
                "redis_up" => up(r, p),
                "redis_keyspace_hits" => r.m.hits = p.increase().or(r.m.hits),
                "redis_keyspace_misses" => r.m.misses = p.increase().or(r.m.misses),
                "redis_connected_clients" => p
                    .inside(w)
                    .into_iter()
                    .for_each(|v| maxed(&mut r.m.connected_clients, v)),
                "redis_latency_percentiles_usec"
                    if s.attr("quantile") == Some("99")
                        && w.command.is_some()
                        && s.attr("cmd") == w.command.as_deref() =>
                {
                    p.inside(w)
                        .into_iter()
                        .for_each(|v| maxed(&mut r.m.command_p99_us, v))
                }
                "redis_blocked_clients" => p
                    .inside(w)
                    .into_iter()
                    .for_each(|v| maxed(&mut r.m.blocked_clients, v)),
                _ => {}
            }
        }
        if let (Some(h), Some(m)) = (r.m.hits, r.m.misses) {
            if h + m > 0.0 {
                r.m.miss_ratio = Some(m / (h + m));
            }
        }
    }

    fn rules(&self) -> Vec<Rule> {
        let r = Rule::builtin;
        vec![r(
            "cache_miss_fallback",
            &CACHE_MISS_FALLBACK,
            r#"
SELECT d.trace_id, 1.0 AS confidence,
  concat('cache miss in ', max(c.service), ' (', coalesce(max(c.db_system), 'cache'),
         CASE WHEN bool_or(c.cache_inferred) THEN ' GET, then a fallback read, then SET' ELSE '' END,
         ') fell back to ', coalesce(max(d.db_system), max(d.server_address), max(d.name)), ' ', coalesce(max(d.db_operation), ''), ' taking ',
         CAST(CAST(max(d.duration_ms) AS BIGINT) AS VARCHAR), ' ms',
         CASE WHEN max(r.miss_ratio) IS NULL THEN ''
              ELSE concat('; ', max(r.system), ' ', max(r.address), ' missed ', CAST(CAST(round(max(r.miss_ratio) * 100) AS BIGINT) AS VARCHAR),
                          '% of lookups meanwhile (', CAST(CAST(max(r.misses) AS BIGINT) AS VARCHAR), ' misses, ',
                          CAST(CAST(max(r.hits) AS BIGINT) AS VARCHAR), ' hits, redis_keyspace_*_total)') END) AS summary,
  CASE WHEN max(r.miss_ratio) IS NULL THEN NULL
       ELSE concat('miss_ratio=', CAST(max(r.miss_ratio) AS VARCHAR), ' misses=', CAST(max(r.misses) AS VARCHAR),
                   ' hits=', CAST(max(r.hits) AS VARCHAR), ' instance=', max(r.instance)) END AS evidence,
  first_value(d.span_id ORDER BY d.path_ms DESC) AS culprit_span_id,
  -- The dependency at fault is the cache that missed, not the store behind it.
  coalesce(max(c.peer_service), max(c.db_system)) AS culprit_service,
  max(d.path_ms) AS explained_ms
FROM spans c JOIN spans d ON c.trace_id = d.trace_id AND c.parent_id = d.parent_id
  LEFT JOIN dependency r ON r.trace_id = c.trace_id AND r.system = 'redis' AND r.miss_ratio IS NOT NULL
WHERE c.cache_hit = false AND d.start_ms >= c.end_ms - 1.0 AND d.span_id <> c.span_id
  AND (d.db_system IS NULL OR lower(d.db_system) NOT IN ('redis', 'memcached', 'valkey'))
GROUP BY d.trace_id"#,
        )]
    }
}
