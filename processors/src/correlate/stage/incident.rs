//! The incident stage, every `incidents.interval`: the incidents of the
//! instance that writes the records evaluated; what opened, was written
//! again or resolved leaves as `causeway.incident` records and alerts.

use async_trait::async_trait;
use causeway_core::telemetry::Registry;
use causeway_core::Batch;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

use super::{own_logs, Stage};
use crate::correlate::alerts;
use crate::correlate::incidents;
use crate::correlate::model::nanos;

causeway_core::metrics! {
    /// Open incidents.
    pub IncidentsOpen: gauge = "causeway_correlate_incidents_open";
    /// Incident records written, by state (open, update, resolved).
    pub IncidentsWritten: counter = "causeway_correlate_incident_records_total";
    /// Routes with incident statistics (at most incidents.max_routes).
    pub IncidentRoutes: gauge = "causeway_correlate_incident_routes";
    /// Routes dropped from the incident statistics for room: evicted (never had a normal, no incident) or refused (no room).
    pub IncidentRoutesDropped: counter = "causeway_correlate_incident_routes_dropped_total";
}

/// The incident evaluation of the instance that writes the records.
pub struct IncidentTicks {
    id: String,
    telemetry: Registry,
    links: indexmap::IndexMap<String, String>,
    engine: Arc<incidents::Incidents>,
    every: Duration,
    next: Instant,
    /// How long an incident's alert stays valid unless written again (ns).
    valid_ns: u64,
    /// Routes evicted and refused, as last reported.
    dropped: (u64, u64),
}

impl IncidentTicks {
    /// Ticks of `engine` every `incidents.interval`.
    pub fn new(
        (id, telemetry): (String, Registry),
        engine: Arc<incidents::Incidents>,
        cfg: &incidents::config::IncidentsConfig,
        links: indexmap::IndexMap<String, String>,
    ) -> Self {
        IncidentTicks {
            id,
            telemetry,
            links,
            engine,
            every: cfg.interval.get(),
            next: Instant::now() + cfg.interval.get(),
            valid_ns: 4 * nanos(cfg.update_every.get().max(cfg.interval.get())),
            dropped: (0, 0),
        }
    }
}

impl IncidentTicks {
    /// Evaluate the incidents; what opened, was written again or resolved
    /// leaves as `causeway.incident` records and alerts.
    fn evaluate_incidents(&mut self, now: Instant, out: &mut Vec<Batch>) {
        self.next = now + self.every;
        let wall = alerts::wall_ns();
        let changes = self.engine.tick(wall);
        let counts = self.engine.counts();
        let c = &self.id;
        self.telemetry
            .gauge(IncidentsOpen, &[("component", c)])
            .set(i64::try_from(counts.open).unwrap_or(i64::MAX));
        self.telemetry
            .gauge(IncidentRoutes, &[("component", c)])
            .set(i64::try_from(counts.routes).unwrap_or(i64::MAX));
        for (reason, now_n, was) in [
            ("evicted", counts.evicted, self.dropped.0),
            ("refused", counts.refused, self.dropped.1),
        ] {
            self.telemetry
                .counter(
                    IncidentRoutesDropped,
                    &[("component", c), ("reason", reason)],
                )
                .add(now_n.saturating_sub(was));
        }
        self.dropped = (counts.evicted, counts.refused);
        if changes.is_empty() {
            return;
        }
        let mut records = Vec::with_capacity(changes.len() * 2);
        for ch in &changes {
            let i = &ch.incident;
            tracing::info!(processor = %c, incident = %i.id, route = %i.route, state = ch.state, summary = %i.summary(&ch.explanation), "Incident.");
            self.telemetry
                .counter(IncidentsWritten, &[("component", c), ("state", ch.state)])
                .add(1);
            records.push(incidents::record(ch, wall));
            records.push(alerts::record(
                &incidents::alert(ch, wall, self.valid_ns, &self.links),
                wall,
            ));
        }
        out.push(own_logs("causeway.incidents", records));
    }
}

#[async_trait]
impl Stage for IncidentTicks {
    fn due(&self) -> Option<Instant> {
        Some(self.next)
    }

    async fn run(&mut self, now: Instant, out: &mut Vec<Batch>) {
        self.evaluate_incidents(now, out);
    }
}
