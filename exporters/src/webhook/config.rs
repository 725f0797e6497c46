//! Configuration of the `webhook` exporter: the same keys as the
//! `alertmanager` exporter (`endpoint` is the full URL to POST to).

pub use crate::alertmanager::config::AlertHttpConfig as WebhookConfig;
