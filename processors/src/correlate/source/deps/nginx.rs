//! The NGINX family: nginx-prometheus-exporter's connections (active,
//! waiting) and `nginx_up`.

use super::{maxed, up, DepRow, Family, Points, Window};
use crate::correlate::model::table::{Column, V};

/// NGINX.
#[derive(Debug, Default)]
pub struct Nginx;

/// NGINX's measurements of a server.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct NginxRow {
    /// `nginx_connections_active`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub connections_active: Option<f64>,
    /// `nginx_connections_waiting`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub connections_waiting: Option<f64>,
}

/// The columns NginxRow adds to the `dependency` and `dependencies` tables.
static NGINX: &[Column<NginxRow>] = &[
    Column::<NginxRow>::float("connections_active", |r, _| V::F(r.connections_active))
        .doc("`nginx_connections_active`."),
    Column::<NginxRow>::float("connections_waiting", |r, _| V::F(r.connections_waiting))
        .doc("`nginx_connections_waiting`."),
];

impl Family for Nginx {
    type Row = NginxRow;

    fn name(&self) -> &'static str {
        "nginx"
    }

    fn columns(&self) -> &'static [Column<NginxRow>] {
        NGINX
    }

    fn system(&self, base: &str) -> Option<&'static str> {
        matches!(
            base,
            "nginx_connections_active"
                | "nginx_connections_waiting"
                | "nginx_connections_reading"
                | "nginx_connections_writing"
                | "nginx_up"
        )
        .then_some("nginx")
    }

    fn fill(&self, r: &mut DepRow<NginxRow>, points: &[Points<'_>], w: &Window) {
        for p in points {
            match p.name() {
                "nginx_up" => up(r, p),
                "nginx_connections_active" => p
                    .inside(w)
                    .into_iter()
                    .for_each(|v| maxed(&mut r.m.connections_active, v)),
                "nginx_connections_waiting" => p
                    .inside(w)
                    .into_iter()
                    .for_each(|v| maxed(&mut r.m.connections_waiting, v)),
                _ => {}
            }
        }
    }
}
