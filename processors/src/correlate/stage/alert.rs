//! The alert stage, every `alerts.interval`: the alert rules evaluated by
//! the instance that emits the RCA log records, their notifications
//! written as `causeway.alerts` log records.

use async_trait::async_trait;
use causeway_core::telemetry::Registry;
use causeway_core::Batch;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

use super::{own_logs, Stage};
use crate::correlate::alerts;
use crate::correlate::source::Correlation;

causeway_core::metrics! {
    /// Alert instances firing, by alert.
    pub AlertsFiring: gauge = "causeway_alerts_firing";
    /// Alert notifications emitted, by alert and status.
    pub AlertsSent: counter = "causeway_alerts_sent_total";
}

/// The alert rules' evaluation.
pub struct Alert {
    pub(crate) id: String,
    pub(crate) telemetry: Registry,
    pub(crate) correlation: Arc<Correlation>,
    pub(crate) alerting: alerts::Alerting,
    pub(crate) alert_every: Duration,
    pub(crate) next_alert: Instant,
    pub(crate) rule_errors_logged: std::collections::HashSet<String>,
}

impl Alert {
    async fn evaluate_alerts(&mut self, out: &mut Vec<Batch>) {
        let alerting = &mut self.alerting;
        let now = alerts::wall_ns();
        let sent = alerting
            .evaluate(&self.correlation.store, &self.correlation.sources, now)
            .await;
        for failed in std::mem::take(&mut alerting.errors) {
            super::rule_failed(
                (&self.telemetry, &self.id),
                &mut self.rule_errors_logged,
                failed,
                "alert",
            );
        }
        for (alert, n) in alerting.firing() {
            self.telemetry
                .gauge(AlertsFiring, &[("component", &self.id), ("alert", &alert)])
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
        if sent.is_empty() {
            return;
        }
        for a in &sent {
            let name = a.labels.get("alertname").map_or("", String::as_str);
            let status = if a.firing { "firing" } else { "resolved" };
            tracing::info!(processor = %self.id, alert = %name, status, labels = ?a.labels, "Alert.");
            self.telemetry
                .counter(
                    AlertsSent,
                    &[("component", &self.id), ("alert", name), ("status", status)],
                )
                .add(1);
        }
        let records = sent.iter().map(|a| alerts::record(a, now)).collect();
        out.push(own_logs("causeway.alerts", records));
    }
}

#[async_trait]
impl Stage for Alert {
    fn due(&self) -> Option<Instant> {
        Some(self.next_alert)
    }

    async fn run(&mut self, now: Instant, out: &mut Vec<Batch>) {
        self.next_alert = now + self.alert_every;
        self.evaluate_alerts(out).await;
    }
}
