//! The NGINX family: nginx-prometheus-exporter's connections (active,
//! waiting) and `nginx_up`.

use super::{maxed, up, DepRow, Family, Points, Window};

/// NGINX.
#[derive(Debug, Default)]
pub struct Nginx;

impl Family for Nginx {
    fn name(&self) -> &'static str {
        "nginx"
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

    fn fill(&self, r: &mut DepRow, points: &[Points<'_>], w: &Window) {
        for p in points {
            match p.name() {
                "nginx_up" => up(r, p),
                "nginx_connections_active" => p
                    .inside(w)
                    .into_iter()
                    .for_each(|v| maxed(&mut r.connections_active, v)),
                "nginx_connections_waiting" => p
                    .inside(w)
                    .into_iter()
                    .for_each(|v| maxed(&mut r.connections_waiting, v)),
                _ => {}
            }
        }
    }
}
