//! A receiver's handle on the pipelines it feeds.

use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

use crate::model::{Batch, Signal, SignalSet};
use crate::telemetry::registry::{ReceiverAccepted, ReceiverRefused, Registry, SignalCounters};

/// How long a receiver waits for room in its pipelines before refusing a
/// request with a retryable status.
pub const ADMISSION_WAIT: Duration = Duration::from_millis(500);

/// The retry hint given to clients refused because pipelines are full.
pub const RETRY_AFTER: Duration = Duration::from_secs(1);

/// Why a batch was not accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    /// The pipelines are full; the client should retry after the hint.
    #[error("pipelines are full; retry after {retry_after:?}")]
    Full {
        /// When to retry.
        retry_after: Duration,
    },
    /// The daemon is shutting down.
    #[error("the daemon is shutting down")]
    Closed,
}

struct Route {
    signals: SignalSet,
    tx: mpsc::Sender<Batch>,
}

/// Sends a receiver's batches to every pipeline that takes their signal,
/// all or nothing: room is reserved in every pipeline before anything is
/// sent, so a refused request was delivered nowhere and a retry does not
/// duplicate. Counts accepted and refused items per signal.
#[derive(Clone)]
pub struct Output {
    routes: Arc<[Route]>,
    accepted: SignalCounters,
    refused: SignalCounters,
    wait: Duration,
}

impl Output {
    pub(crate) fn new(
        component: &str,
        routes: Vec<(SignalSet, mpsc::Sender<Batch>)>,
        telemetry: &Registry,
    ) -> Self {
        Output {
            routes: routes
                .into_iter()
                .map(|(signals, tx)| Route { signals, tx })
                .collect(),
            accepted: telemetry.signal_counters(ReceiverAccepted, component),
            refused: telemetry.signal_counters(ReceiverRefused, component),
            wait: ADMISSION_WAIT,
        }
    }

    /// An output for tests: sends every signal to `tx`.
    pub fn for_test(tx: mpsc::Sender<Batch>) -> Self {
        Output::new("test", vec![(SignalSet::ALL, tx)], &Registry::new())
    }

    /// Whether any pipeline takes `signal`.
    pub fn accepts(&self, signal: Signal) -> bool {
        self.routes.iter().any(|r| r.signals.contains(signal))
    }

    /// Count items refused before they reached [`Output::send`] (malformed input).
    pub fn refused(&self, signal: Signal, items: usize) {
        self.refused.get(signal).add(items as u64);
    }

    /// Send a batch to every pipeline taking its signal.
    pub async fn send(&self, batch: Batch) -> Result<(), SendError> {
        self.send_or_return(batch).await.map_err(|(e, _)| e)
    }

    /// Send, waiting while the pipelines are full, for sources that cannot
    /// refuse their own input (files, scrapes). `true` once sent; `false` when
    /// the daemon stops first (`shutdown` fired while full, or pipelines closed).
    pub async fn send_until_stopped(
        &self,
        mut batch: Batch,
        shutdown: &tokio_util::sync::CancellationToken,
    ) -> bool {
        loop {
            match self.send_or_return(batch).await {
                Ok(()) => return true,
                Err((SendError::Full { .. }, b)) => {
                    if shutdown.is_cancelled() {
                        return false;
                    }
                    batch = b;
                }
                Err((SendError::Closed, _)) => return false,
            }
        }
    }

    /// Like [`Output::send`], but a refused batch comes back, so the caller
    /// can retry it without having kept a copy.
    pub async fn send_or_return(&self, batch: Batch) -> Result<(), (SendError, Batch)> {
        let signal = batch.signal();
        let items = batch.items() as u64;
        let deadline = tokio::time::Instant::now() + self.wait;
        let mut permits = Vec::with_capacity(self.routes.len());
        for route in self.routes.iter().filter(|r| r.signals.contains(signal)) {
            match tokio::time::timeout_at(deadline, route.tx.reserve()).await {
                Ok(Ok(permit)) => permits.push(permit),
                Ok(Err(_)) => {
                    self.refused.get(signal).add(items);
                    return Err((SendError::Closed, batch));
                }
                Err(_) => {
                    self.refused.get(signal).add(items);
                    return Err((
                        SendError::Full {
                            retry_after: RETRY_AFTER,
                        },
                        batch,
                    ));
                }
            }
        }
        if let Some(last) = permits.pop() {
            for p in permits {
                p.send(batch.clone());
            }
            last.send(batch);
        }
        self.accepted.get(signal).add(items);
        Ok(())
    }
}
