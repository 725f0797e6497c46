//! The memory limiter: admission control on a byte budget.
//!
//! `service.memory_limiter` sets a hard `limit` and a `spike_limit`; the
//! soft limit is `limit − spike_limit`. Memory in use is estimated as the
//! process's resident memory (sampled from `/proc/self/statm` every
//! `check_interval`) plus what the requests admitted since the sample added
//! (the bytes held by permits now, minus those held at the sample), so a
//! burst between two samples is counted at once and nothing is counted
//! twice. A receiver asks [`MemoryLimiter::admit`] with a request's size
//! before decoding it:
//! - under the soft limit the request is admitted and its bytes counted
//!   until the returned [`Permit`] is dropped; receivers attach it to the
//!   batch, so it lasts while the data waits in pipelines and in-memory
//!   exporter queues, and ends when the data is exported or on disk;
//! - over the soft limit, new requests get a retryable refusal (gRPC
//!   RESOURCE_EXHAUSTED with RetryInfo, HTTP 429 with Retry-After);
//! - over the hard limit, nothing at all is admitted until memory falls.
//!
//! Pull receivers (file tailing, scrapers) wait in
//! [`MemoryLimiter::wait_below_soft`] instead, losing nothing.

use serde::Deserialize;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::config::{ByteSize, ConfigError, Duration as CfgDuration};
pub use crate::process::resident_bytes;
use crate::telemetry::registry::{Gauge, Registry};

/// The key of the limiter in [`crate::shared::Shared`].
pub const SHARED_KEY: &str = "service.memory_limiter";

crate::metrics! {
    /// Requests refused by the memory limiter, by receiver and level.
    pub Refused: counter = "causeway_memory_limiter_refused_requests_total";
    /// Resident memory of the daemon, as the memory limiter last sampled it.
    pub Rss: gauge = "causeway_process_resident_memory_bytes";
}

/// The share of the memory available to the process (its cgroup's limit,
/// else the machine's) that is its budget when no limit is configured: the
/// Collector's usual `limit_percentage`.
pub const DEFAULT_SHARE_PERCENT: u64 = 80;

/// Memory available to the process: its cgroup's limit when it has one
/// (v2 `memory.max`, v1 `memory.limit_in_bytes`), else the machine's total,
/// as the Collector's `limit_percentage` reads it.
pub fn available_memory() -> u64 {
    let read_num = |p: &str| {
        std::fs::read_to_string(p)
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
    };
    let total = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map_or(u64::MAX, |kb| kb.saturating_mul(1024));
    [
        read_num("/sys/fs/cgroup/memory.max"),
        read_num("/sys/fs/cgroup/memory/memory.limit_in_bytes"),
    ]
    .into_iter()
    .flatten()
    .fold(total, u64::min)
}

/// The budget when none is configured: [`DEFAULT_SHARE_PERCENT`] of the
/// memory available, the soft limit 20% below it (at least the 32 MiB a
/// configured limit must be). `None` when the available memory is unknown.
pub fn default_budget(available: u64) -> Option<MemoryLimiterConfig> {
    if available == u64::MAX || available == 0 {
        return None;
    }
    Some(MemoryLimiterConfig {
        limit: ByteSize((available / 100 * DEFAULT_SHARE_PERCENT).max(32 << 20)),
        spike_limit: None,
        check_interval: check_interval(),
        retry_after: retry_after(),
    })
}

/// `service.memory_limiter`.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MemoryLimiterConfig {
    /// Hard limit: above it nothing is admitted. Set it below the container's limit.
    pub limit: ByteSize,
    /// Headroom under the hard limit: above `limit − spike_limit` new
    /// requests are refused with a retry hint (default 20% of `limit`).
    #[serde(default)]
    pub spike_limit: Option<ByteSize>,
    /// How often resident memory is sampled.
    #[serde(default = "check_interval")]
    pub check_interval: CfgDuration,
    /// The retry hint given with refusals.
    #[serde(default = "retry_after")]
    pub retry_after: CfgDuration,
}

fn check_interval() -> CfgDuration {
    CfgDuration::millis(100)
}
fn retry_after() -> CfgDuration {
    CfgDuration::secs(1)
}

impl MemoryLimiterConfig {
    /// Errors, with paths relative to the section.
    pub fn errors(&self) -> Vec<ConfigError> {
        let mut e = Vec::new();
        let at = |k: &str| k.to_string();
        if self.limit.0 < 32 << 20 {
            e.push(ConfigError::new(at("limit"), "must be at least 32MiB"));
        }
        if let Some(s) = self.spike_limit {
            if s.0 >= self.limit.0 {
                e.push(ConfigError::new(
                    at("spike_limit"),
                    "must be less than `limit`",
                ));
            }
        }
        if self.check_interval.get().is_zero() {
            e.push(ConfigError::new(
                at("check_interval"),
                "must be more than 0",
            ));
        }
        e
    }
}

/// Why a request was not admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refusal {
    /// Over the hard limit (else the soft one).
    pub hard: bool,
    /// When to try again.
    pub retry_after: Duration,
}

/// The limiter (one per running topology).
pub struct MemoryLimiter {
    limit: u64,
    soft: u64,
    retry_after: Duration,
    check_interval: Duration,
    rss: AtomicU64,
    in_flight: Arc<AtomicU64>,
    in_flight_at_sample: AtomicU64,
    /// Bytes reserved for request bodies not read yet: not in any RSS
    /// sample, so always counted on top of it.
    reserved: Arc<AtomicU64>,
    over_soft: AtomicBool,
    telemetry: Registry,
    rss_gauge: Gauge,
}

impl std::fmt::Debug for MemoryLimiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryLimiter")
            .field("limit", &self.limit)
            .field("soft", &self.soft)
            .finish()
    }
}

/// Bytes admitted and not yet queued; released on drop.
#[derive(Debug)]
pub struct Permit {
    bytes: u64,
    in_flight: Arc<AtomicU64>,
}

/// Bytes reserved for a body not read yet; what is left is released on drop.
#[derive(Debug)]
pub struct Reservation {
    left: u64,
    reserved: Arc<AtomicU64>,
    in_flight: Arc<AtomicU64>,
}

impl Reservation {
    /// Bytes of the reservation not yet taken.
    pub fn remaining(&self) -> u64 {
        self.left
    }

    /// `n` bytes of the body arrived: up to what is left of the
    /// reservation, they become a permit (admitted, never refused); the
    /// rest is returned for the caller to admit.
    pub fn take(&mut self, n: u64) -> (Permit, u64) {
        let k = n.min(self.left);
        self.left -= k;
        self.reserved.fetch_sub(k, Ordering::SeqCst);
        self.in_flight.fetch_add(k, Ordering::SeqCst);
        (
            Permit {
                bytes: k,
                in_flight: self.in_flight.clone(),
            },
            n - k,
        )
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.reserved.fetch_sub(self.left, Ordering::SeqCst);
    }
}

impl Permit {
    /// Take `other`'s bytes into this permit (both are released together).
    pub fn absorb(&mut self, mut other: Permit) {
        self.bytes += std::mem::take(&mut other.bytes);
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.in_flight.fetch_sub(self.bytes, Ordering::SeqCst);
    }
}

impl MemoryLimiter {
    /// The daemon's limiter, as components find it in `shared` (none when
    /// memory is unknown and no limit is configured).
    pub fn shared(shared: &crate::shared::Shared) -> Option<Arc<MemoryLimiter>> {
        shared.slot::<MemoryLimiter>(SHARED_KEY).get().cloned()
    }

    /// From a validated config.
    pub fn new(cfg: &MemoryLimiterConfig, telemetry: &Registry) -> Self {
        let limit = cfg.limit.0;
        let spike = cfg.spike_limit.map_or(limit / 5, |s| s.0);
        let l = MemoryLimiter {
            limit,
            soft: limit.saturating_sub(spike),
            retry_after: cfg.retry_after.get(),
            check_interval: cfg.check_interval.get(),
            rss: AtomicU64::new(resident_bytes().unwrap_or(0)),
            in_flight: Arc::default(),
            in_flight_at_sample: AtomicU64::new(0),
            reserved: Arc::default(),
            over_soft: AtomicBool::new(false),
            telemetry: telemetry.clone(),
            rss_gauge: telemetry.gauge(Rss, &[]),
        };
        l.sample();
        l
    }

    /// Sample resident memory now.
    pub fn sample(&self) {
        if let Some(rss) = resident_bytes() {
            self.in_flight_at_sample
                .store(self.in_flight.load(Ordering::SeqCst), Ordering::SeqCst);
            self.rss.store(rss, Ordering::SeqCst);
            self.rss_gauge.set(i64::try_from(rss).unwrap_or(i64::MAX));
            let over = rss >= self.soft;
            if over != self.over_soft.swap(over, Ordering::SeqCst) {
                if over {
                    tracing::warn!(
                        rss,
                        soft_limit = self.soft,
                        limit = self.limit,
                        "Memory above the soft limit: refusing new data until it falls."
                    );
                } else {
                    tracing::info!(
                        rss,
                        soft_limit = self.soft,
                        "Memory back under the soft limit: admitting data again."
                    );
                }
            }
        }
    }

    /// Sample every `check_interval` until `stop`.
    pub async fn run(self: Arc<Self>, stop: tokio_util::sync::CancellationToken) {
        let mut tick = tokio::time::interval(self.check_interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => self.sample(),
                _ = stop.cancelled() => return,
            }
        }
    }

    /// Admit `bytes` for `receiver`, or refuse with a retry hint.
    pub fn admit(&self, receiver: &str, bytes: u64) -> Result<Permit, Refusal> {
        let used = self.estimate();
        let refusal = if used >= self.limit {
            Some(true)
        } else if used.saturating_add(bytes) > self.soft {
            Some(false)
        } else {
            None
        };
        if let Some(hard) = refusal {
            self.telemetry
                .counter(
                    Refused,
                    &[
                        ("receiver", receiver),
                        ("level", if hard { "hard" } else { "soft" }),
                    ],
                )
                .add(1);
            return Err(Refusal {
                hard,
                retry_after: self.retry_after,
            });
        }
        self.in_flight.fetch_add(bytes, Ordering::SeqCst);
        Ok(Permit {
            bytes,
            in_flight: self.in_flight.clone(),
        })
    }

    /// Refuse only over the hard limit: for a request whose body is not read
    /// yet (refusing it then breaks the client's upload).
    pub fn admit_unread(&self, receiver: &str) -> Result<(), Refusal> {
        if self.estimate() < self.limit {
            return Ok(());
        }
        self.admit(receiver, 0).map(drop)
    }

    /// Memory in use now: the last sample plus what was admitted since,
    /// plus what is reserved for bodies still arriving.
    pub fn estimate(&self) -> u64 {
        let rss = self.rss.load(Ordering::SeqCst);
        let now = self.in_flight.load(Ordering::SeqCst);
        let then = self.in_flight_at_sample.load(Ordering::SeqCst);
        rss.saturating_add(now.saturating_sub(then))
            .saturating_add(self.reserved.load(Ordering::SeqCst))
    }

    /// Reserve `bytes` for a request body about to be read (its declared
    /// length), or refuse as [`MemoryLimiter::admit`] does. As the body
    /// arrives, [`Reservation::take`] turns reserved bytes into a [`Permit`].
    pub fn reserve(&self, receiver: &str, bytes: u64) -> Result<Reservation, Refusal> {
        // The same checks as an admission; then the bytes move to `reserved`.
        let mut p = self.admit(receiver, bytes)?;
        let bytes = std::mem::take(&mut p.bytes);
        self.in_flight.fetch_sub(bytes, Ordering::SeqCst);
        drop(p);
        self.reserved.fetch_add(bytes, Ordering::SeqCst);
        Ok(Reservation {
            left: bytes,
            reserved: self.reserved.clone(),
            in_flight: self.in_flight.clone(),
        })
    }

    /// Memory is under the soft limit now: a pull receiver may read.
    pub fn below_soft(&self) -> bool {
        self.estimate() < self.soft
    }

    /// Count `bytes` a pull receiver has just read (it asked
    /// [`MemoryLimiter::below_soft`] before reading, so this is never
    /// refused): they stay in the estimate until the permit drops, so that
    /// what is read between two samples counts at once.
    pub fn hold(&self, bytes: u64) -> Permit {
        self.in_flight.fetch_add(bytes, Ordering::SeqCst);
        Permit {
            bytes,
            in_flight: self.in_flight.clone(),
        }
    }

    /// How often resident memory is sampled.
    pub fn check_interval(&self) -> Duration {
        self.check_interval
    }

    /// Wait until memory is under the soft limit (for pull receivers).
    pub async fn wait_below_soft(&self) {
        while self.estimate() >= self.soft {
            tokio::time::sleep(self.check_interval).await;
        }
    }

    /// The hard and soft limits.
    pub fn limits(&self) -> (u64, u64) {
        (self.limit, self.soft)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limiter(limit: u64, spike: u64) -> MemoryLimiter {
        let cfg = MemoryLimiterConfig {
            limit: ByteSize(limit),
            spike_limit: Some(ByteSize(spike)),
            check_interval: CfgDuration::millis(100),
            retry_after: CfgDuration::secs(2),
        };
        MemoryLimiter::new(&cfg, &Registry::default())
    }

    #[test]
    fn with_no_limit_configured_the_budget_is_a_share_of_what_is_available() {
        let b = default_budget(10 << 30).expect("a budget");
        assert_eq!(b.limit.0, (10u64 << 30) / 100 * 80);
        assert!(b.errors().is_empty(), "{:?}", b.errors());
        // A tiny cgroup still gets a valid limit; unknown memory, none.
        assert_eq!(
            default_budget(16 << 20).expect("a budget").limit.0,
            32 << 20
        );
        assert!(default_budget(u64::MAX).is_none());
        // This machine's: its cgroup's limit or its memory, both known on Linux.
        let here = default_budget(available_memory()).expect("known on Linux");
        assert!(here.limit.0 <= available_memory());
    }

    #[test]
    fn admits_under_soft_refuses_over_and_releases_on_drop() {
        let rss = resident_bytes().expect("linux");
        // Soft limit 10 MiB above what the process uses now.
        let l = limiter(rss + (20 << 20), 10 << 20);
        let a = l.admit("otlp", 6 << 20).expect("admitted");
        // 6 MiB in flight: another 6 would pass the soft limit.
        let r = l.admit("otlp", 6 << 20).expect_err("refused");
        assert_eq!(
            r,
            Refusal {
                hard: false,
                retry_after: Duration::from_secs(2)
            }
        );
        drop(a);
        let _b = l
            .admit("otlp", 6 << 20)
            .expect("admitted once the first is queued");
    }

    #[test]
    fn a_reservation_counts_until_its_bytes_arrive_even_across_samples() {
        let rss = resident_bytes().expect("linux");
        let l = limiter(rss + (40 << 20), 20 << 20);
        // 16 MiB reserved for bodies not read yet: not in any RSS sample.
        let mut r = l.reserve("otlp", 16 << 20).expect("reserved");
        l.sample();
        assert!(
            l.estimate() >= rss + (16 << 20),
            "a sample forgets no reservation"
        );
        l.admit("otlp", 8 << 20)
            .expect_err("16 + 8 MiB is over the soft limit");
        // 10 MiB arrive: reserved bytes become a permit, never refused; 2 MiB beyond.
        let (p, beyond) = r.take(10 << 20);
        assert_eq!(beyond, 0);
        let (q, beyond) = r.take(8 << 20);
        assert_eq!(beyond, 2 << 20);
        drop(r);
        drop((p, q));
        assert!(l.estimate() < rss + (4 << 20), "all released");
    }

    #[test]
    fn over_the_hard_limit_nothing_is_admitted() {
        let l = limiter(32 << 20, 1 << 20);
        // This test process uses more than 32 MiB? Force it: sample says so.
        l.rss.store(33 << 20, Ordering::SeqCst);
        let r = l.admit("otlp", 0).expect_err("refused");
        assert!(r.hard);
    }
}
