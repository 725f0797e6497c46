//! The PostgreSQL family: postgres_exporter's locks by mode (as a scrape
//! during the span saw them), connections against `max_connections`, the
//! longest transaction; the server beside the exporter by `pg_settings_port`.

use std::collections::BTreeMap;

use super::{maxed, up, DepRow, Family, Points, Window};
use crate::correlate::model::cause::{self, Cause, DB_CONNECTION_SATURATION};
use crate::correlate::model::table::{so, Column, V};
use crate::correlate::model::{Rule, Series};

/// A query waited on a lock another transaction held.
pub static DB_LOCK_CONTENTION: Cause = Cause::new("db_lock_contention", cause::dependency);

/// PostgreSQL.
#[derive(Debug, Default)]
pub struct Postgresql;

/// PostgreSQL's measurements of a server.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct PgRow {
    /// `pg_locks_count` in the blocking modes (AccessExclusive, Exclusive), as a scrape during the span saw them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub locks_exclusive: Option<f64>,
    /// `pg_locks_count` by mode, the non-zero ones (`mode=n,…`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub locks_by_mode: Option<String>,
    /// `pg_stat_activity_count`, all states.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub connections: Option<f64>,
    /// `pg_settings_max_connections`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_connections: Option<f64>,
    /// `pg_stat_activity_max_tx_duration` (s).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_tx_duration_s: Option<f64>,
}

/// The columns PgRow adds to the `dependency` and `dependencies` tables.
static POSTGRESQL: &[Column<PgRow>] = &[
    Column::<PgRow>::float("locks_exclusive", |r, _| V::F(r.locks_exclusive))
    .doc("`pg_locks_count` in the blocking modes (AccessExclusive, Exclusive), as a scrape during the span saw them."),
    Column::<PgRow>::text("locks_by_mode", |r, _| so(&r.locks_by_mode))
    .doc("`pg_locks_count` by mode, the non-zero ones (`mode=n,…`)."),
    Column::<PgRow>::float("connections", |r, _| V::F(r.connections))
    .doc("`pg_stat_activity_count`, all states."),
    Column::<PgRow>::float("max_connections", |r, _| V::F(r.max_connections))
    .doc("`pg_settings_max_connections`."),
    Column::<PgRow>::float("max_tx_duration_s", |r, _| V::F(r.max_tx_duration_s))
    .doc("`pg_stat_activity_max_tx_duration` (s)."),
];

impl Family for Postgresql {
    type Row = PgRow;

    fn name(&self) -> &'static str {
        "postgresql"
    }

    fn columns(&self) -> &'static [Column<PgRow>] {
        POSTGRESQL
    }

    fn system(&self, base: &str) -> Option<&'static str> {
        matches!(
            base,
            "pg_locks_count"
                | "pg_stat_activity_count"
                | "pg_stat_activity_max_tx_duration"
                | "pg_settings_max_connections"
                | "pg_settings_port"
                | "pg_up"
        )
        .then_some("postgresql")
    }

    fn beside(&self, s: &Series) -> Option<String> {
        (s.name == "pg_settings_port")
            .then(|| s.points.back().map(|p| format!("{}", p.1 as u64)))
            .flatten()
    }

    /// Locks are the exception to the widened window: a lock counts only
    /// when a scrape during the span saw it (a lock released just before
    /// the span began is what the widened interval would otherwise show).
    fn fill(&self, r: &mut DepRow<PgRow>, points: &[Points<'_>], w: &Window) {
        // Summed over their labels first (per time).
        let mut by_mode: BTreeMap<String, f64> = BTreeMap::new();
        let mut activity: BTreeMap<u64, f64> = BTreeMap::new();
        for p in points {
            let s = p.series;
            match p.name() {
                "pg_up" => up(r, p),
                "pg_locks_count" => {
                    let during = s
                        .points
                        .iter()
                        .filter(|(t, _)| *t >= w.start && *t <= w.end)
                        .map(|p| p.1)
                        .reduce(f64::max);
                    if let (Some(mode), Some(v)) = (s.attr("mode"), during) {
                        *by_mode.entry(mode.to_string()).or_default() += v;
                    }
                }
                "pg_stat_activity_count" => {
                    for (t, v) in s.points.iter().filter(|(t, _)| *t >= w.from && *t <= w.to) {
                        *activity.entry(*t).or_default() += v;
                    }
                }
                "pg_stat_activity_max_tx_duration" => p
                    .inside(w)
                    .into_iter()
                    .for_each(|v| maxed(&mut r.m.max_tx_duration_s, v)),
                "pg_settings_max_connections" => p
                    .inside(w)
                    .into_iter()
                    .for_each(|v| maxed(&mut r.m.max_connections, v)),
                _ => {}
            }
        }
        if !by_mode.is_empty() {
            r.m.locks_exclusive = Some(
                ["accessexclusivelock", "exclusivelock"]
                    .iter()
                    .filter_map(|m| by_mode.get(*m))
                    .sum(),
            );
            let nz: Vec<String> = by_mode
                .iter()
                .filter(|(_, v)| **v > 0.0)
                .map(|(m, v)| format!("{m}={v}"))
                .collect();
            r.m.locks_by_mode = Some(nz.join(","));
        }
        r.m.connections = activity.values().copied().reduce(f64::max);
    }

    fn rules(&self) -> Vec<Rule> {
        let r = Rule::builtin;
        vec![
            r(
                "db_lock",
                &DB_LOCK_CONTENTION,
                r#"
SELECT s.trace_id, 0.8 AS confidence,
  concat(max(s.service), ' waited ', CAST(CAST(max(s.duration_ms) AS BIGINT) AS VARCHAR), ' ms on PostgreSQL ', max(r.address),
         CASE WHEN max(s.db_collection) IS NULL THEN '' ELSE concat(' (table ', max(s.db_collection), ')') END,
         ' while ', CAST(CAST(max(r.locks_exclusive) AS BIGINT) AS VARCHAR), ' exclusive lock(s) were held (pg_locks_count ',
         coalesce(max(r.locks_by_mode), ''), ')',
         CASE WHEN max(r.max_tx_duration_s) IS NULL THEN ''
              ELSE concat('; longest transaction ', CAST(round(max(r.max_tx_duration_s) * 10) / 10 AS VARCHAR), ' s') END) AS summary,
  concat('pg_locks_count ', coalesce(max(r.locks_by_mode), ''), ' max_tx_duration_s=',
         coalesce(CAST(max(r.max_tx_duration_s) AS VARCHAR), ''), ' instance=', max(r.instance)) AS evidence,
  first_value(s.span_id ORDER BY s.path_ms DESC) AS culprit_span_id,
  max(s.path_ms) AS explained_ms
FROM dependency r JOIN spans s ON s.trace_id = r.trace_id AND s.span_id = r.span_id
WHERE r.system = 'postgresql' AND r.locks_exclusive >= 1 AND s.duration_ms >= 50
GROUP BY s.trace_id"#,
            ),
            r(
                "db_connections",
                &DB_CONNECTION_SATURATION,
                r#"
SELECT s.trace_id, 0.8 AS confidence,
  concat('PostgreSQL ', max(r.address), ' had ', CAST(CAST(max(r.connections) AS BIGINT) AS VARCHAR), ' of ',
         CAST(CAST(max(r.max_connections) AS BIGINT) AS VARCHAR), ' connections in use while ', max(s.service), ' waited ',
         CAST(CAST(max(s.duration_ms) AS BIGINT) AS VARCHAR), ' ms on it') AS summary,
  first_value(s.span_id ORDER BY s.path_ms DESC) AS culprit_span_id,
  max(s.path_ms) AS explained_ms
FROM dependency r JOIN spans s ON s.trace_id = r.trace_id AND s.span_id = r.span_id
WHERE r.system = 'postgresql' AND r.max_connections > 0 AND r.connections >= 0.9 * r.max_connections AND s.duration_ms >= 50
GROUP BY s.trace_id"#,
            ),
        ]
    }
}
