//! The daemon's own metrics: a small registry of counters and gauges,
//! rendered in the Prometheus text format (the server serves it on
//! `/metrics`).
//!
//! Counters are plain atomics handed to components when they are built, so
//! recording costs one relaxed add on the hot path.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::signal::Signal;

/// A metric of the daemon's own, declared once by [`metrics!`](crate::metrics)
/// as a unit struct in the module of the component that records it: its
/// name, its kind, and its doc comment, which is its help on `/metrics`.
/// The registry hands out its series by it: `registry.counter(Lines, &labels)`.
pub trait Metric: Copy {
    /// Its name on `/metrics`.
    const NAME: &'static str;
    /// What it counts (its doc comment).
    const HELP: &'static str;
    /// Counter or gauge.
    const KIND: Kind;
}

/// Declares the daemon's own metrics, each a unit struct implementing
/// [`Metric`](crate::telemetry::Metric): its doc comment (the help), its
/// kind (`counter` or `gauge`) and its name.
///
/// ```
/// causeway_core::metrics! {
///     /// Lines read, by file.
///     pub Lines: counter = "causeway_example_lines_total";
/// }
/// let r = causeway_core::telemetry::Registry::new();
/// r.counter(Lines, &[("file", "a.log")]).add(2);
/// assert!(r.render().contains("# HELP causeway_example_lines_total Lines read, by file."));
/// ```
#[macro_export]
macro_rules! metrics {
    (@kind counter) => { $crate::telemetry::Kind::Counter };
    (@kind gauge) => { $crate::telemetry::Kind::Gauge };
    ($( $(#[doc = $doc:literal])+ $vis:vis $name:ident: $kind:ident = $metric:literal; )*) => {
        $(
            $(#[doc = $doc])+
            #[derive(Debug, Clone, Copy)]
            $vis struct $name;
            impl $crate::telemetry::Metric for $name {
                const NAME: &'static str = $metric;
                const HELP: &'static str = concat!($($doc),+);
                const KIND: $crate::telemetry::Kind = $crate::metrics!(@kind $kind);
            }
        )*
    };
}

crate::metrics! {
    /// Items a receiver accepted and passed on.
    pub ReceiverAccepted: counter = "causeway_receiver_accepted_items_total";
    /// Items a receiver refused (malformed, or the pipeline was full).
    pub ReceiverRefused: counter = "causeway_receiver_refused_items_total";
    /// Items that entered a processor.
    pub ProcessorReceived: counter = "causeway_processor_received_items_total";
    /// Items a processor passed on.
    pub ProcessorSent: counter = "causeway_processor_sent_items_total";
    /// Items a processor dropped on purpose (e.g. sampling).
    pub ProcessorDropped: counter = "causeway_processor_dropped_items_total";
    /// Items an exporter delivered.
    pub ExporterSent: counter = "causeway_exporter_sent_items_total";
    /// Items an exporter gave up on (permanent error, or retries exhausted).
    pub ExporterSendFailed: counter = "causeway_exporter_send_failed_items_total";
    /// Items the backend accepted the request for but rejected (OTLP partial success).
    pub ExporterRejected: counter = "causeway_exporter_rejected_items_total";
    /// Items dropped because the sending queue was full and `block_on_overflow` was off.
    pub ExporterEnqueueFailed: counter = "causeway_exporter_enqueue_failed_items_total";
    /// Retried export attempts.
    pub ExporterRetries: counter = "causeway_exporter_retries_total";
    /// Corrupt persistent-queue records skipped.
    pub QueueCorrupt: counter = "causeway_exporter_queue_corrupt_records_total";
    /// Batches in an exporter's sending queue.
    pub ExporterQueueSize: gauge = "causeway_exporter_queue_size";
    /// Capacity of an exporter's sending queue, in its sizer's units (batches by default).
    pub ExporterQueueCapacity: gauge = "causeway_exporter_queue_capacity";
    /// Batches waiting at the entry of a pipeline.
    pub PipelineQueueSize: gauge = "causeway_pipeline_queue_size";
}

/// A monotonic counter.
#[derive(Clone, Debug, Default)]
pub struct Counter(Arc<AtomicU64>);

impl Counter {
    /// Add `n`.
    pub fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }
    /// The current value.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A gauge that can go up and down.
#[derive(Clone, Debug, Default)]
pub struct Gauge(Arc<AtomicI64>);

impl Gauge {
    /// Set the value.
    pub fn set(&self, v: i64) {
        self.0.store(v, Ordering::Relaxed);
    }
    /// Add `d` (may be negative).
    pub fn add(&self, d: i64) {
        self.0.fetch_add(d, Ordering::Relaxed);
    }
    /// The current value.
    pub fn get(&self) -> i64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// One counter per signal.
#[derive(Clone, Debug, Default)]
pub struct SignalCounters([Counter; 4]);

impl SignalCounters {
    /// The counter of `signal`.
    pub fn get(&self, signal: Signal) -> &Counter {
        &self.0[signal as usize]
    }
}

/// Kind of a metric family.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// Monotonic.
    Counter,
    /// Up and down.
    Gauge,
}

#[derive(Clone, Debug)]
enum Value {
    Counter(Counter),
    Gauge(Gauge),
}

type Labels = Vec<(&'static str, String)>;

#[derive(Default)]
struct Families {
    help: BTreeMap<&'static str, (&'static str, Kind)>,
    series: BTreeMap<(&'static str, Labels), Value>,
}

/// One sample, as read by [`Registry::snapshot`].
#[derive(Clone, Debug)]
pub struct Sample {
    /// Metric name.
    pub name: &'static str,
    /// Help text.
    pub help: &'static str,
    /// Counter or gauge.
    pub kind: Kind,
    /// Label pairs.
    pub labels: Vec<(&'static str, String)>,
    /// Current value.
    pub value: f64,
}

/// A sample under a name made at run time (the Collector's view).
#[derive(Clone, Debug)]
pub struct NamedSample {
    /// Metric name.
    pub name: String,
    /// Help text.
    pub help: &'static str,
    /// Counter or gauge.
    pub kind: Kind,
    /// Label pairs.
    pub labels: Vec<(&'static str, String)>,
    /// Current value.
    pub value: f64,
}

/// The registry of the daemon's own metrics, plus its readiness flag.
#[derive(Clone)]
pub struct Registry {
    inner: Arc<Mutex<Families>>,
    ready: Arc<AtomicBool>,
    ready_since: Arc<Mutex<Option<std::time::SystemTime>>>,
    collector_names: Arc<AtomicBool>,
    started: std::time::Instant,
    apis: Arc<Mutex<Vec<Arc<dyn super::api::ApiSource>>>>,
    api_cache: Arc<super::api::Cache>,
}

impl Default for Registry {
    fn default() -> Self {
        Registry {
            inner: Arc::default(),
            ready: Arc::default(),
            ready_since: Arc::default(),
            collector_names: Arc::new(AtomicBool::new(false)),
            started: std::time::Instant::now(),
            apis: Arc::default(),
            api_cache: Arc::default(),
        }
    }
}

impl Registry {
    /// A new, empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Answer part of the page's JSON API (see [`super::api`]).
    pub fn add_api_source(&self, source: Arc<dyn super::api::ApiSource>) {
        let mut g = match self.apis.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        g.push(source);
    }

    /// The sources of the page's JSON API, in the order they were added.
    pub fn api_sources(&self) -> Vec<Arc<dyn super::api::ApiSource>> {
        match self.apis.lock() {
            Ok(g) => g.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Recent answers of the page's API.
    pub fn api_cache(&self) -> &super::api::Cache {
        &self.api_cache
    }

    /// Time since the registry was made (the daemon's uptime).
    pub fn uptime(&self) -> std::time::Duration {
        self.started.elapsed()
    }

    fn with<R>(&self, f: impl FnOnce(&mut Families) -> R) -> R {
        let mut guard = match self.inner.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        f(&mut guard)
    }

    /// The series of counter `M` with these labels (the same handle for
    /// the same labels).
    pub fn counter<M: Metric>(&self, _: M, labels: &[(&'static str, &str)]) -> Counter {
        const {
            assert!(
                matches!(M::KIND, Kind::Counter),
                "a gauge taken as a counter"
            )
        };
        let labels: Labels = labels.iter().map(|(k, v)| (*k, v.to_string())).collect();
        self.with(|f| {
            f.help.insert(M::NAME, (M::HELP.trim(), Kind::Counter));
            match f
                .series
                .entry((M::NAME, labels))
                .or_insert_with(|| Value::Counter(Counter::default()))
            {
                Value::Counter(c) => c.clone(),
                Value::Gauge(_) => Counter::default(),
            }
        })
    }

    /// The series of gauge `M` with these labels.
    pub fn gauge<M: Metric>(&self, _: M, labels: &[(&'static str, &str)]) -> Gauge {
        const { assert!(matches!(M::KIND, Kind::Gauge), "a counter taken as a gauge") };
        let labels: Labels = labels.iter().map(|(k, v)| (*k, v.to_string())).collect();
        self.with(|f| {
            f.help.insert(M::NAME, (M::HELP.trim(), Kind::Gauge));
            match f
                .series
                .entry((M::NAME, labels))
                .or_insert_with(|| Value::Gauge(Gauge::default()))
            {
                Value::Gauge(g) => g.clone(),
                Value::Counter(_) => Gauge::default(),
            }
        })
    }

    /// One counter per signal, labelled `component` and `signal`.
    pub fn signal_counters<M: Metric>(&self, m: M, component: &str) -> SignalCounters {
        SignalCounters(
            Signal::ALL
                .map(|s| self.counter(m, &[("component", component), ("signal", s.as_str())])),
        )
    }

    /// One counter per signal of a processor in a pipeline, labelled
    /// `component` (`<pipeline>/<processor>`), `processor` and `signal`.
    pub fn processor_counters<M: Metric>(
        &self,
        m: M,
        pipeline: &str,
        processor: &str,
    ) -> SignalCounters {
        let component = format!("{pipeline}/{processor}");
        SignalCounters(Signal::ALL.map(|s| {
            self.counter(
                m,
                &[
                    ("component", &component),
                    ("processor", processor),
                    ("signal", s.as_str()),
                ],
            )
        }))
    }

    /// Serve the OpenTelemetry Collector's names of the same counts next to
    /// causeway's own on `/metrics` (`service.telemetry.metrics.collector_names`).
    pub fn set_collector_names(&self, on: bool) {
        self.collector_names.store(on, Ordering::SeqCst);
    }

    /// The Collector's self-metrics, as its default Prometheus reader names
    /// them (no `_total`, no unit suffix), computed from causeway's series:
    /// `otelcol_receiver_accepted_spans{receiver}`,
    /// `otelcol_exporter_sent_spans{exporter}`, `otelcol_exporter_queue_size`,
    /// `otelcol_processor_incoming_items{processor,otel_signal}`,
    /// `otelcol_process_uptime`, `otelcol_process_memory_rss`, … A
    /// processor in several pipelines is summed, as the Collector counts it.
    pub fn collector_view(&self) -> Vec<NamedSample> {
        let mut out: BTreeMap<(String, Labels), (&'static str, Kind, f64)> = BTreeMap::new();
        let mut add = |name: String,
                       help: &'static str,
                       kind: Kind,
                       labels: Vec<(&'static str, String)>,
                       v: f64| {
            out.entry((name, labels)).or_insert((help, kind, 0.0)).2 += v;
        };
        for s in self.snapshot() {
            if let Some((name, help, kind, labels)) = collector_series(&s) {
                add(name, help, kind, labels, s.value);
            }
        }
        add(
            "otelcol_process_uptime".into(),
            "Uptime of the process.",
            Kind::Counter,
            Vec::new(),
            self.started.elapsed().as_secs_f64(),
        );
        if let Some(rss) = crate::process::resident_bytes() {
            add(
                "otelcol_process_memory_rss".into(),
                "Total physical memory (resident set size).",
                Kind::Gauge,
                Vec::new(),
                rss as f64,
            );
        }
        if let Some(cpu) = crate::process::cpu_seconds() {
            add(
                "otelcol_process_cpu_seconds".into(),
                "Total CPU user and system time in seconds.",
                Kind::Counter,
                Vec::new(),
                cpu,
            );
        }
        out.into_iter()
            .map(|((name, labels), (help, kind, value))| NamedSample {
                name,
                help,
                kind,
                labels,
                value,
            })
            .collect()
    }

    /// Every series, for export through OTLP.
    pub fn snapshot(&self) -> Vec<Sample> {
        self.with(|f| {
            f.series
                .iter()
                .map(|((name, labels), v)| {
                    let (help, kind) = f.help.get(name).copied().unwrap_or(("", Kind::Counter));
                    Sample {
                        name,
                        help,
                        kind,
                        labels: labels.clone(),
                        value: match v {
                            Value::Counter(c) => c.get() as f64,
                            Value::Gauge(g) => g.get() as f64,
                        },
                    }
                })
                .collect()
        })
    }

    /// The Prometheus text exposition of every series.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let mut last: Option<&'static str> = None;
        for s in self.snapshot() {
            if last != Some(s.name) {
                let kind = match s.kind {
                    Kind::Counter => "counter",
                    Kind::Gauge => "gauge",
                };
                out.push_str(&format!("# HELP {} {}", s.name, s.help));
                out.push('\n');
                out.push_str(&format!("# TYPE {} {}", s.name, kind));
                out.push('\n');
                last = Some(s.name);
            }
            out.push_str(s.name);
            if !s.labels.is_empty() {
                out.push('{');
                for (i, (k, v)) in s.labels.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(&format!("{k}=\"{}\"", escape_label(v)));
                }
                out.push('}');
            }
            out.push_str(&format!(" {}", s.value));
            out.push('\n');
        }
        if self.collector_names.load(Ordering::SeqCst) {
            let mut last: Option<String> = None;
            for NamedSample {
                name,
                help,
                kind,
                labels,
                value,
            } in self.collector_view()
            {
                if last.as_deref() != Some(name.as_str()) {
                    let kind = match kind {
                        Kind::Counter => "counter",
                        Kind::Gauge => "gauge",
                    };
                    out.push_str(&format!("# HELP {name} {help}\n# TYPE {name} {kind}\n"));
                    last = Some(name.clone());
                }
                out.push_str(&name);
                if !labels.is_empty() {
                    let l: Vec<String> = labels
                        .iter()
                        .map(|(k, v)| format!("{k}=\"{}\"", escape_label(v)))
                        .collect();
                    out.push_str(&format!("{{{}}}", l.join(",")));
                }
                out.push_str(&format!(" {value}\n"));
            }
        }
        out
    }

    /// Mark the daemon ready (or not) for `/readyz`.
    pub fn set_ready(&self, ready: bool) {
        let mut since = match self.ready_since.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        if ready && since.is_none() {
            *since = Some(std::time::SystemTime::now());
        } else if !ready {
            *since = None;
        }
        self.ready.store(ready, Ordering::SeqCst);
    }

    /// Since when the daemon has been ready (`None` while it is not).
    pub fn ready_since(&self) -> Option<std::time::SystemTime> {
        match self.ready_since.lock() {
            Ok(g) => *g,
            Err(poisoned) => *poisoned.into_inner(),
        }
    }

    /// Whether the daemon is ready.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::SeqCst)
    }
}

fn escape_label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// causeway's per-signal counters and the Collector's names for them: the
/// series, the Collector's prefix (the signal's item name follows), the
/// component's label, the help.
const PER_SIGNAL: &[(&str, &str, &str, &str)] = &[
    (
        ReceiverAccepted::NAME,
        "otelcol_receiver_accepted_",
        "receiver",
        "Items successfully pushed into the pipeline.",
    ),
    (
        ReceiverRefused::NAME,
        "otelcol_receiver_refused_",
        "receiver",
        "Items that could not be pushed into the pipeline.",
    ),
    (
        ExporterSent::NAME,
        "otelcol_exporter_sent_",
        "exporter",
        "Items successfully sent to destination.",
    ),
    (
        ExporterSendFailed::NAME,
        "otelcol_exporter_send_failed_",
        "exporter",
        "Items in failed attempts to send to destination.",
    ),
    (
        ExporterEnqueueFailed::NAME,
        "otelcol_exporter_enqueue_failed_",
        "exporter",
        "Items failed to be added to the sending queue.",
    ),
];

/// The Collector's series (name, help, kind, labels) of one of causeway's
/// samples, if it has one.
fn collector_series(s: &Sample) -> Option<(String, &'static str, Kind, Labels)> {
    let label = |k: &str| {
        s.labels
            .iter()
            .find(|(n, _)| *n == k)
            .map(|(_, v)| v.clone())
    };
    if let Some((_, prefix, key, help)) = PER_SIGNAL.iter().find(|(n, ..)| *n == s.name) {
        let (c, sig) = (label("component")?, label("signal")?);
        let suffix = match sig.as_str() {
            "traces" => "spans",
            "logs" => "log_records",
            _ => "metric_points",
        };
        return Some((
            format!("{prefix}{suffix}"),
            *help,
            Kind::Counter,
            vec![(*key, c)],
        ));
    }
    if s.name == ProcessorReceived::NAME || s.name == ProcessorSent::NAME {
        let (p, sig) = (label("processor")?, label("signal")?);
        let (name, help) = if s.name == ProcessorReceived::NAME {
            (
                "otelcol_processor_incoming_items",
                "Number of items passed to the processor.",
            )
        } else {
            (
                "otelcol_processor_outgoing_items",
                "Number of items emitted from the processor.",
            )
        };
        let labels = vec![("otel_signal", sig), ("processor", p)];
        return Some((name.into(), help, Kind::Counter, labels));
    }
    if s.name == ExporterQueueSize::NAME || s.name == ExporterQueueCapacity::NAME {
        let e = label("component")?;
        let (name, help) = if s.name == ExporterQueueSize::NAME {
            (
                "otelcol_exporter_queue_size",
                "Current size of the retry queue (in batches).",
            )
        } else {
            (
                "otelcol_exporter_queue_capacity",
                "Fixed capacity of the retry queue (in batches).",
            )
        };
        return Some((name.into(), help, Kind::Gauge, vec![("exporter", e)]));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_prometheus_text() {
        let r = Registry::new();
        let c = r.signal_counters(ReceiverAccepted, "otlp");
        c.get(Signal::Traces).add(3);
        r.gauge(ExporterQueueSize, &[("component", "otlp/\"x\"")])
            .set(2);
        let text = r.render();
        assert!(text.contains("# TYPE causeway_receiver_accepted_items_total counter"));
        assert!(text.contains(
            "causeway_receiver_accepted_items_total{component=\"otlp\",signal=\"traces\"} 3"
        ));
        assert!(text.contains(
            "causeway_receiver_accepted_items_total{component=\"otlp\",signal=\"logs\"} 0"
        ));
        assert!(text.contains("causeway_exporter_queue_size{component=\"otlp/\\\"x\\\"\"} 2"));
    }

    #[test]
    fn the_collector_names_of_the_same_counts_are_served_when_on() {
        let r = Registry::new();
        r.signal_counters(ReceiverAccepted, "otlp")
            .get(Signal::Traces)
            .add(10);
        r.signal_counters(ReceiverRefused, "otlp")
            .get(Signal::Logs)
            .add(2);
        r.signal_counters(ExporterSent, "otlp/jaeger")
            .get(Signal::Traces)
            .add(7);
        r.signal_counters(ExporterSendFailed, "victoriametrics")
            .get(Signal::Metrics)
            .add(3);
        // One processor in two pipelines: the Collector counts it once.
        r.processor_counters(ProcessorReceived, "traces", "batch")
            .get(Signal::Traces)
            .add(4);
        r.processor_counters(ProcessorReceived, "traces/2", "batch")
            .get(Signal::Traces)
            .add(5);
        r.gauge(ExporterQueueCapacity, &[("component", "otlp/jaeger")])
            .set(1000);
        assert!(
            !r.render().contains("otelcol_"),
            "off by default in a bare registry"
        );
        r.set_collector_names(true);
        let text = r.render();
        for line in [
            "otelcol_receiver_accepted_spans{receiver=\"otlp\"} 10",
            "otelcol_receiver_accepted_log_records{receiver=\"otlp\"} 0",
            "otelcol_receiver_refused_log_records{receiver=\"otlp\"} 2",
            "otelcol_exporter_sent_spans{exporter=\"otlp/jaeger\"} 7",
            "otelcol_exporter_send_failed_metric_points{exporter=\"victoriametrics\"} 3",
            "otelcol_processor_incoming_items{otel_signal=\"traces\",processor=\"batch\"} 9",
            "otelcol_exporter_queue_capacity{exporter=\"otlp/jaeger\"} 1000",
            "# TYPE otelcol_exporter_sent_spans counter",
            "# TYPE otelcol_exporter_queue_capacity gauge",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} missing:\n{text}");
        }
        assert!(text
            .lines()
            .any(|l| l.starts_with("otelcol_process_uptime ")));
        assert!(text
            .lines()
            .any(|l| l.starts_with("otelcol_process_memory_rss ")));
        assert!(text
            .lines()
            .any(|l| l.starts_with("otelcol_process_cpu_seconds ")));
        // Each series once: the exposition must not repeat a name and label set.
        let mut seen = std::collections::HashSet::new();
        for l in text.lines().filter(|l| !l.starts_with('#')) {
            let series = l.rsplit_once(' ').map(|x| x.0).unwrap_or(l);
            assert!(seen.insert(series.to_string()), "{series} twice");
        }
    }
}
