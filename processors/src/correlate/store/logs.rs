//! The log window: records by `trace_id`, bounded by count and bytes and
//! by the window, the oldest evicted first (and counted when evicted
//! before the window ended).

use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use super::{lock, Limits, Store};
use crate::correlate::model::series::{find, s};
use crate::correlate::model::LogEvidence;

#[derive(Default)]
struct Inner {
    logs: HashMap<[u8; 16], Vec<Arc<LogEvidence>>>,
    order: VecDeque<(u64, [u8; 16])>,
    count: usize,
    bytes: usize,
    evicted: u64,
    evicted_bytes: u64,
}

/// Log records by trace, in bounded memory.
pub struct LogWindow {
    window_ns: u64,
    max_records: usize,
    max_bytes: usize,
    inner: Mutex<Inner>,
}

/// A log record's evidence as every record has it: its time (the
/// observed time, or now, when it has none), its service, severity, error
/// type, body (cut to 512 bytes) and span id.
fn record(r: &LogRecord, service: &Arc<str>, now_ns: u64) -> LogEvidence {
    let a = &r.attributes;
    let time_ns = if r.time_unix_nano > 0 {
        r.time_unix_nano
    } else if r.observed_time_unix_nano > 0 {
        r.observed_time_unix_nano
    } else {
        now_ns
    };
    let mut body = s(&r.body).unwrap_or_default();
    if body.len() > 512 {
        let mut cut = 512;
        while !body.is_char_boundary(cut) {
            cut -= 1;
        }
        body.truncate(cut);
    }
    LogEvidence {
        time_ns,
        service: Arc::clone(service),
        severity: r.severity_number,
        error_type: find(a, &["error.type", "exception.type"])
            .and_then(s)
            .filter(|x| !x.trim().is_empty() && x.trim() != "-"),
        body,
        span_id: (r.span_id.len() == 8 && r.span_id.iter().any(|b| *b != 0))
            .then(|| hex::encode(&r.span_id)),
        parts: Default::default(),
    }
}

impl LogWindow {
    /// An empty window of the store's limits.
    pub fn new(limits: &Limits) -> Self {
        LogWindow {
            window_ns: limits.window_ns,
            max_records: limits.max_log_records,
            max_bytes: limits.max_log_bytes,
            inner: Mutex::new(Inner::default()),
        }
    }

    /// The log records of a trace.
    pub fn of(&self, trace_id: &[u8; 16]) -> Vec<Arc<LogEvidence>> {
        lock(&self.inner)
            .logs
            .get(trace_id)
            .cloned()
            .unwrap_or_default()
    }

    /// Whether any log record of the trace is known.
    pub fn has(&self, trace_id: &[u8; 16]) -> bool {
        lock(&self.inner).logs.contains_key(trace_id)
    }

    /// Log records held.
    pub fn len(&self) -> usize {
        lock(&self.inner).count
    }

    /// Whether no record is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Log records evicted before the window ended: (for the count limit, for the byte limit).
    pub fn evictions(&self) -> (u64, u64) {
        let g = lock(&self.inner);
        (g.evicted, g.evicted_bytes)
    }

    /// Bytes of log records held, and the age (ns) of the oldest at `now_ns`.
    pub fn retention(&self, now_ns: u64) -> (usize, u64) {
        let g = lock(&self.inner);
        let age = g
            .order
            .front()
            .map_or(0, |(t, _)| now_ns.saturating_sub(*t));
        (g.bytes, age)
    }

    /// Take in log records: `read` adds to each what the sources read of
    /// its attributes, then `observe` sees it (the sources that keep
    /// statistics of them) with the store's clock. Records without a trace
    /// id are only observed.
    pub fn add(
        &self,
        store: &Store,
        resource_logs: &[ResourceLogs],
        now_ns: u64,
        read: &dyn Fn(&[KeyValue], &mut LogEvidence),
        observe: &dyn Fn(&LogEvidence, u64),
    ) {
        let clock = store.tick(now_ns);
        let mut g = lock(&self.inner);
        for rl in resource_logs {
            let res_attrs = rl
                .resource
                .as_ref()
                .map(|r| r.attributes.as_slice())
                .unwrap_or(&[]);
            let service: Arc<str> = find(res_attrs, &["service.name"])
                .and_then(s)
                .unwrap_or_default()
                .into();
            for sl in &rl.scope_logs {
                for r in &sl.log_records {
                    let mut ev = record(r, &service, now_ns);
                    read(&r.attributes, &mut ev);
                    observe(&ev, clock);
                    if r.trace_id.len() == 16 && r.trace_id.iter().any(|b| *b != 0) {
                        let mut tid = [0u8; 16];
                        tid.copy_from_slice(&r.trace_id);
                        g.bytes += ev.cost();
                        g.logs.entry(tid).or_default().push(Arc::new(ev));
                        g.order.push_back((now_ns, tid));
                        g.count += 1;
                    }
                }
            }
        }
        self.evict(&mut g, now_ns);
    }

    fn evict(&self, g: &mut Inner, now_ns: u64) {
        let horizon = now_ns.saturating_sub(self.window_ns);
        while let Some(&(t, tid)) = g.order.front() {
            let over_count = g.count > self.max_records;
            let over_bytes = g.bytes > self.max_bytes;
            if t >= horizon && !over_count && !over_bytes {
                break;
            }
            g.order.pop_front();
            let mut freed = None;
            if let Some(v) = g.logs.get_mut(&tid) {
                if !v.is_empty() {
                    freed = Some(v.remove(0).cost());
                }
                if v.is_empty() {
                    g.logs.remove(&tid);
                }
            }
            if let Some(cost) = freed {
                g.count -= 1;
                g.bytes = g.bytes.saturating_sub(cost);
                // Evicted before the window ended: counted, by what forced it.
                if t >= horizon {
                    if over_count {
                        g.evicted += 1;
                    } else {
                        g.evicted_bytes += 1;
                    }
                }
            }
        }
    }
}
