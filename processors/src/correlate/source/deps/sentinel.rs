//! The Redis Sentinel family: what redis_exporter, pointed at a Sentinel
//! (`-redis.addr=redis://sentinel:26379`), says of each master the Sentinel
//! watches: the replicas and the sentinels it can reach
//! (`redis_sentinel_master_ok_slaves`, `redis_sentinel_master_ok_sentinels`)
//! and whether the master is ok (`redis_sentinel_master_status`). A master
//! is a sub-unit of the Sentinel, named by its `master_address`: a span to
//! the master's host joins it. The lowest value over the span's window is
//! kept: a replica lost while the request ran is what tells.

use super::{host_part, norm, DepRow, Dependency, Family, Points, Window};
use crate::correlate::model::table::{Column, V};
use crate::correlate::model::Series;

/// Redis Sentinel.
#[derive(Debug, Default)]
pub struct Sentinel;

/// A Sentinel's measurements of one master.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct SentinelRow {
    /// Replicas the Sentinel reaches (`redis_sentinel_master_ok_slaves`), the lowest.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ok_replicas: Option<f64>,
    /// Sentinels that reach the master, this one included
    /// (`redis_sentinel_master_ok_sentinels`), the lowest.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ok_sentinels: Option<f64>,
    /// 1 while the Sentinel sees the master ok (`redis_sentinel_master_status`), the lowest.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub master_ok: Option<f64>,
}

/// The columns SentinelRow adds to the `dependency` and `dependencies` tables.
static SENTINEL: &[Column<SentinelRow>] = &[
    Column::<SentinelRow>::float("ok_replicas", |r, _| V::F(r.ok_replicas))
    .doc("Replicas the Sentinel reaches (`redis_sentinel_master_ok_slaves`), the lowest."),
    Column::<SentinelRow>::float("ok_sentinels", |r, _| V::F(r.ok_sentinels))
    .doc("Sentinels that reach the master, this one included (`redis_sentinel_master_ok_sentinels`), the lowest."),
    Column::<SentinelRow>::float("master_ok", |r, _| V::F(r.master_ok))
    .doc("1 while the Sentinel sees the master ok (`redis_sentinel_master_status`), the lowest."),
];

/// The masters a Sentinel's series name.
fn masters<'a>(d: &'a Dependency<'a>) -> impl Iterator<Item = &'a str> + 'a {
    d.series.iter().filter_map(|s| s.attr("master_address"))
}

/// Keep the lowest.
fn lowest(a: &mut Option<f64>, p: &Points<'_>) {
    if let Some(v) = p.lowest() {
        *a = Some(a.map_or(v, |x| x.min(v)));
    }
}

impl Family for Sentinel {
    type Row = SentinelRow;

    fn name(&self) -> &'static str {
        "redis_sentinel"
    }

    fn columns(&self) -> &'static [Column<SentinelRow>] {
        SENTINEL
    }

    fn system(&self, base: &str) -> Option<&'static str> {
        base.starts_with("redis_sentinel_")
            .then_some("redis_sentinel")
    }

    fn units(&self, d: &Dependency<'_>, host: &str) -> Option<Vec<String>> {
        let mut out: Vec<String> = masters(d)
            .filter(|m| !host.is_empty() && host_part(&norm(m)) == host)
            .map(str::to_string)
            .collect();
        out.sort();
        out.dedup();
        Some(out)
    }

    fn all_units(&self, d: &Dependency<'_>) -> Option<Vec<String>> {
        let mut out: Vec<String> = masters(d).map(str::to_string).collect();
        out.sort();
        out.dedup();
        Some(out)
    }

    fn in_unit(&self, s: &Series, unit: &str) -> bool {
        s.attr("master_address") == Some(unit)
    }

    fn fill(&self, r: &mut DepRow<SentinelRow>, points: &[Points<'_>], _w: &Window) {
        for p in points {
            match p.name() {
                "redis_sentinel_master_ok_slaves" => lowest(&mut r.m.ok_replicas, p),
                "redis_sentinel_master_ok_sentinels" => lowest(&mut r.m.ok_sentinels, p),
                "redis_sentinel_master_status" => lowest(&mut r.m.master_ok, p),
                _ => {}
            }
        }
    }
}
