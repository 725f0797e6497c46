//! The `alertmanager` exporter: alerts to Prometheus Alertmanager's API v2
//! (`POST /api/v2/alerts`, a JSON array of `labels`, `annotations`,
//! `startsAt`, `endsAt`, `generatorURL`), as Prometheus sends them.
//!
//! It takes the alert log records the `correlate` processor's alert rules
//! emit (`event.name = causeway.alert`) and ignores every other record, so
//! it can sit in a logs pipeline next to a Loki exporter. Re-sending while
//! firing is the rule evaluator's job (every `resend`, with `endsAt` ahead);
//! this exporter delivers each notification with the usual queue and retry:
//! 429, 5xx and connection failures are retried, other 4xx are not.
//!
//! The `webhook` exporter shares the decoding and delivery and sends
//! Alertmanager's webhook payload instead.

pub mod config;
#[cfg(test)]
pub(crate) mod tests;

use async_trait::async_trait;
use causeway_core::component::{
    BuildContext, BuiltExporter, Delivered, ExportError, Exporter, ExporterFactory,
};
use causeway_core::config::{decode, ConfigError};
use causeway_core::{Batch, BoxError, Signal, SignalSet};
use opentelemetry_proto::tonic::common::v1::{any_value, KeyValue};
use serde::Serialize;
use std::collections::BTreeMap;

use crate::ExporterError;
use config::AlertHttpConfig;

/// The `event.name` of alert records (as the `correlate` processor writes it).
pub const ALERT_EVENT: &str = "causeway.alert";

/// One alert, as Alertmanager's API v2 takes it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Alert {
    /// Labels (`alertname` included).
    pub labels: BTreeMap<String, String>,
    /// Annotations.
    pub annotations: BTreeMap<String, String>,
    /// RFC 3339.
    #[serde(rename = "startsAt")]
    pub starts_at: String,
    /// RFC 3339.
    #[serde(rename = "endsAt")]
    pub ends_at: String,
    /// Link back to the source.
    #[serde(rename = "generatorURL")]
    pub generator_url: String,
    /// `firing` or `resolved` (not sent to the v2 API, which infers it from `endsAt`).
    #[serde(skip)]
    pub status: String,
}

fn attr<'a>(attrs: &'a [KeyValue], key: &str) -> Option<&'a str> {
    attrs.iter().find(|kv| kv.key == key).and_then(|kv| {
        match kv.value.as_ref()?.value.as_ref()? {
            any_value::Value::StringValue(s) => Some(s.as_str()),
            _ => None,
        }
    })
}

/// The alerts among a batch's log records; other records are skipped. A
/// malformed alert record is reported by position and skipped too.
pub fn alerts_of(batch: &Batch) -> Result<(Vec<Alert>, Vec<String>), ExporterError> {
    // This exporter sits in a logs pipeline and sees every record, of which
    // alerts are a handful. An alert record carries `event.name` =
    // ALERT_EVENT, so an encoded batch without those bytes has none: it is
    // not decoded at all.
    if let causeway_core::model::Data::Encoded(parts) = batch.data() {
        if !parts
            .iter()
            .any(|p| memchr::memmem::find(p, ALERT_EVENT.as_bytes()).is_some())
        {
            return Ok((Vec::new(), Vec::new()));
        }
    }
    // Decoded records (correlate's own, with the alerts) are read in place.
    let decoded;
    let resource_logs = match batch.data() {
        causeway_core::model::Data::Logs(v) => v.as_slice(),
        _ => {
            decoded = batch
                .to_logs_request()
                .map_err(|e| ExporterError::Encode(e.to_string()))?;
            decoded.resource_logs.as_slice()
        }
    };
    let mut out = Vec::new();
    let mut bad = Vec::new();
    for (ri, rl) in resource_logs.iter().enumerate() {
        for (si, sl) in rl.scope_logs.iter().enumerate() {
            for (li, r) in sl.log_records.iter().enumerate() {
                let a = &r.attributes;
                if attr(a, "event.name") != Some(ALERT_EVENT) {
                    continue;
                }
                let map = |k: &str| -> Result<BTreeMap<String, String>, String> {
                    serde_json::from_str(attr(a, k).unwrap_or("{}"))
                        .map_err(|e| format!("{k} is not a JSON object of strings: {e}"))
                };
                let parsed = (|| {
                    let labels = map("alert.labels")?;
                    if !labels.contains_key("alertname") {
                        return Err("alert.labels has no alertname".to_string());
                    }
                    let field = |k: &str| {
                        attr(a, k)
                            .map(str::to_string)
                            .ok_or_else(|| format!("{k} is missing"))
                    };
                    Ok(Alert {
                        labels,
                        annotations: map("alert.annotations")?,
                        starts_at: field("alert.starts_at")?,
                        ends_at: field("alert.ends_at")?,
                        generator_url: attr(a, "alert.generator_url")
                            .unwrap_or_default()
                            .to_string(),
                        status: attr(a, "alert.status").unwrap_or("firing").to_string(),
                    })
                })();
                match parsed {
                    Ok(x) => out.push(x),
                    Err(e) => bad.push(format!(
                        "resource_logs[{ri}].scope_logs[{si}].log_records[{li}]: {e}"
                    )),
                }
            }
        }
    }
    Ok((out, bad))
}

/// What the body looks like.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Payload {
    /// Alertmanager API v2: a JSON array of alerts.
    AlertmanagerV2,
    /// Alertmanager's webhook payload (version 4).
    Webhook,
}

/// A stable fingerprint of a label set (FNV-1a 64, hex), as receivers of
/// Alertmanager webhooks expect one per alert.
pub fn fingerprint(labels: &BTreeMap<String, String>) -> String {
    let mut h: u64 = 0xcbf29ce484222325;
    for (k, v) in labels {
        for b in k.bytes().chain([0xff]).chain(v.bytes()).chain([0xfe]) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x100000001b3);
        }
    }
    format!("{h:016x}")
}

/// The webhook body: Alertmanager's webhook payload, version 4.
pub fn webhook_body(alerts: &[Alert]) -> serde_json::Value {
    let common = |pick: fn(&Alert) -> &BTreeMap<String, String>| {
        let mut it = alerts.iter().map(pick);
        let mut c = it.next().cloned().unwrap_or_default();
        for m in it {
            c.retain(|k, v| m.get(k) == Some(v));
        }
        c
    };
    let status = if alerts.iter().any(|a| a.status == "firing") {
        "firing"
    } else {
        "resolved"
    };
    let common_labels = common(|a| &a.labels);
    serde_json::json!({
        "version": "4",
        "groupKey": format!("{{}}:{}", serde_json::to_string(&common_labels).unwrap_or_default()),
        "truncatedAlerts": 0,
        "status": status,
        "receiver": "causeway",
        "groupLabels": {},
        "commonLabels": common_labels,
        "commonAnnotations": common(|a| &a.annotations),
        "externalURL": "",
        "alerts": alerts.iter().map(|a| serde_json::json!({
            "status": a.status,
            "labels": a.labels,
            "annotations": a.annotations,
            "startsAt": a.starts_at,
            "endsAt": a.ends_at,
            "generatorURL": a.generator_url,
            "fingerprint": fingerprint(&a.labels),
        })).collect::<Vec<_>>(),
    })
}

/// Posts alerts as JSON to one URL.
pub struct AlertExporter {
    id: String,
    url: String,
    payload: Payload,
    headers: Vec<(String, String)>,
    client: reqwest::Client,
}

impl AlertExporter {
    /// From a validated config.
    pub fn new(cfg: &AlertHttpConfig, id: &str, payload: Payload) -> Result<Self, ExporterError> {
        let url = match payload {
            Payload::AlertmanagerV2
                if !cfg
                    .endpoint
                    .trim_end_matches('/')
                    .ends_with("/api/v2/alerts") =>
            {
                format!("{}/api/v2/alerts", cfg.endpoint.trim_end_matches('/'))
            }
            _ => cfg.endpoint.clone(),
        };
        let client = crate::http_util::client(
            &cfg.endpoint,
            &cfg.tls,
            crate::http_util::Within::Whole(cfg.timeout.get()),
        )?;
        Ok(AlertExporter {
            id: id.to_string(),
            url,
            payload,
            headers: cfg
                .headers
                .iter()
                .map(|(k, v)| (k.clone(), v.expose().to_string()))
                .collect(),
            client,
        })
    }
}

#[async_trait]
impl Exporter for AlertExporter {
    async fn export(&self, batch: &Batch) -> Result<Delivered, ExportError> {
        let (alerts, bad) = alerts_of(batch).map_err(|e| ExportError::Permanent {
            source: Box::new(e),
        })?;
        for b in &bad {
            tracing::warn!(exporter = %self.id, record = %b, "Malformed alert record skipped.");
        }
        if alerts.is_empty() {
            return Ok(Delivered {
                rejected: bad.len() as u64,
            });
        }
        let body = match self.payload {
            Payload::AlertmanagerV2 => serde_json::to_vec(&alerts),
            Payload::Webhook => serde_json::to_vec(&webhook_body(&alerts)),
        }
        .map_err(|e| ExportError::Permanent {
            source: Box::new(ExporterError::Encode(e.to_string())),
        })?;
        let mut req = self
            .client
            .post(&self.url)
            .header(reqwest::header::CONTENT_TYPE, "application/json");
        for (k, v) in &self.headers {
            req = req.header(k.as_str(), v.as_str());
        }
        let answer = crate::http_util::send(req.body(body), &self.url).await?;
        if answer.status.is_success() {
            return Ok(Delivered {
                rejected: bad.len() as u64,
            });
        }
        // A request timeout is worth trying again, as a 429 or a 5xx.
        Err(answer.error(&self.url, &[408]))
    }
}

/// Build an alert exporter of either kind.
pub(crate) fn build(
    ctx: &BuildContext,
    cfg: &serde_yaml::Value,
    payload: Payload,
) -> Result<BuiltExporter, BoxError> {
    let cfg: AlertHttpConfig = decode(cfg).map_err(|e| format!("{e:?}"))?;
    let delivery = cfg.delivery();
    Ok(BuiltExporter {
        exporter: std::sync::Arc::new(AlertExporter::new(&cfg, &ctx.id.to_string(), payload)?),
        delivery,
    })
}

/// Factory of the `alertmanager` exporter.
pub struct AlertmanagerExporterFactory;

#[async_trait]
impl ExporterFactory for AlertmanagerExporterFactory {
    fn kind(&self) -> &'static str {
        "alertmanager"
    }
    fn signals(&self) -> SignalSet {
        SignalSet::only(Signal::Logs)
    }
    fn schema(&self, g: &mut schemars::SchemaGenerator) -> schemars::Schema {
        g.subschema_for::<AlertHttpConfig>()
    }
    fn validate(&self, cfg: &serde_yaml::Value) -> Result<(), Vec<ConfigError>> {
        decode::<AlertHttpConfig>(cfg).map(|_| ())
    }
    async fn build(
        &self,
        ctx: BuildContext,
        cfg: &serde_yaml::Value,
    ) -> Result<BuiltExporter, BoxError> {
        build(&ctx, cfg, Payload::AlertmanagerV2)
    }
}
