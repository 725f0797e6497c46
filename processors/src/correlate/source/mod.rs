//! Evidence sources. A source owns everything about one kind of evidence
//! and nothing else names it:
//! - which metric series it keeps, under which key ([`KeepsMetrics::keep`]);
//! - which spans it claims ([`Source::claims`]);
//! - what it reads of a log record, how the records join a trace, and its
//!   columns of the `logs` table ([`ReadsLogs`]);
//! - how it joins a trace, its Arrow tables for the rules, and what a join
//!   that finds nothing counts as ([`Source::join`], [`Source::tables`]);
//! - its built-in rules ([`Source::rules`]);
//! - its tables for the alert rules, the page's API it serves and the
//!   table the page draws of it ([`ShowsState`]);
//! - what "in trouble" means for the `correlated` sampling policy
//!   ([`ShowsTrouble`]).
//!
//! A new source is one file here and one line in the registry (`registry.rs`).
//! Sources sit above the state and the model and below the rule engine,
//! the alerts, the page and the processor; no source names another.

pub mod deps;
pub mod gateway;
pub mod host;
pub mod kafka;
pub mod nats;
pub mod profiles;
pub mod rabbit;

use datafusion::arrow::datatypes::SchemaRef;
use opentelemetry_proto::tonic::common::v1::KeyValue;

use super::model::columns::{fill_logs, LOG_COLUMNS};
use super::model::series::{Kept, Offer};
use super::model::table::{schema, About, Cols, Column, Purpose, Table};
use super::model::{LogEvidence, Rule, SpanRow, TraceRow, Trouble};
use super::store::Store;

/// What a join sees besides the traces.
#[derive(Clone, Copy)]
pub struct Tick<'a> {
    /// The state.
    pub store: &'a Store,
    /// Now (ns since the epoch).
    pub now_ns: u64,
    /// Metric points this long before a trace's start join it (ns).
    pub lookback_ns: u64,
    /// Metric points this long after a trace's end join it (ns).
    pub lookahead_ns: u64,
}

impl Tick<'_> {
    /// The interval (ns) whose points join `t`.
    pub fn interval(&self, t: &TraceRow) -> (u64, u64) {
        (
            t.start_ns.saturating_sub(self.lookback_ns),
            t.end_ns.saturating_add(self.lookahead_ns),
        )
    }
}

/// What a source's join of one tick produced.
#[derive(Default)]
pub struct Join {
    /// Its tables for the rules, as [`Source::tables`] declares them.
    pub tables: Vec<Table>,
    /// Traces (or their parts) whose join found nothing while the source's
    /// evidence flows (`causeway_correlate_join_misses_total{join=…}`).
    pub misses: u64,
}

/// The state at one moment, as the alert rules and the page read it.
#[derive(Clone, Copy)]
pub struct View<'a> {
    /// The state.
    pub store: &'a Store,
    /// Now (ns since the epoch).
    pub now_ns: u64,
    /// The window the alert rules and the page cover (ns).
    pub window_ns: u64,
}

/// One column of a table the page draws.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct PageColumn {
    /// The field of the API's rows.
    pub key: &'static str,
    /// The header.
    pub label: &'static str,
    /// `text`, `num`, `status` (its value `OK` is good, any other bad) or
    /// `flag` (true is bad).
    pub kind: &'static str,
}

impl PageColumn {
    /// The column of `key`, headed `label`, drawn as `kind`.
    pub const fn new(key: &'static str, label: &'static str, kind: &'static str) -> Self {
        PageColumn { key, label, kind }
    }
}

/// A table the page draws from a source's API (listed by `/api/sources`).
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct PageTable {
    /// The API path that returns its rows (`/api/{path}`).
    pub path: &'static str,
    /// The heading.
    pub title: &'static str,
    /// What the page says when there are no rows.
    pub empty: &'static str,
    /// Its columns.
    pub columns: &'static [PageColumn],
}

/// A trace's values of an attribute (the `correlated` sampling policy reads
/// the keys of [`ShowsTrouble::trouble_keys`]).
pub use crate::trouble::Values;

/// One kind of evidence: what every source does (its name, the spans it
/// claims, its tables, its join, its rules), and the capabilities only
/// some have, each its own trait a source hands out: the metric series it
/// keeps ([`KeepsMetrics`]), what it reads of log records
/// ([`ReadsLogs`]), the profiles it takes ([`TakesProfiles`]), what it
/// shows of the state to the alert rules and the page ([`ShowsState`]),
/// and what trouble means for the `correlated` sampling policy
/// ([`ShowsTrouble`]).
pub trait Source: Send + Sync {
    /// Its name: the `source` of its series' keys and the `join` label of
    /// its misses.
    fn name(&self) -> &'static str;

    /// Whether a span is its own (a span one source claims is no other's).
    fn claims(&self, _span: &SpanRow) -> bool {
        false
    }

    /// Its declared tables, for the rules and for the alert rules: their
    /// names, docs and columns (the planner's schemas and the reference).
    fn tables(&self) -> Vec<About>;

    /// Join the traces of a tick with its evidence: it may add to each
    /// trace's `joined` (its evidence) and returns its tables.
    fn join(&self, tick: &Tick<'_>, traces: &mut [TraceRow]) -> Result<Join, String>;

    /// Its built-in rules.
    fn rules(&self) -> Vec<Rule> {
        Vec::new()
    }

    /// The metric series it keeps, if it keeps any.
    fn metrics(&self) -> Option<&dyn KeepsMetrics> {
        None
    }

    /// What it reads of log records, if it reads any.
    fn logs(&self) -> Option<&dyn ReadsLogs> {
        None
    }

    /// The profiles it takes, if it takes any.
    fn profiles(&self) -> Option<&dyn TakesProfiles> {
        None
    }

    /// What it shows of the state, if anything.
    fn state(&self) -> Option<&dyn ShowsState> {
        None
    }

    /// What trouble means for it, if anything.
    fn trouble(&self) -> Option<&dyn ShowsTrouble> {
        None
    }
}

/// The capabilities a source hands out, in its `Source` impl:
/// `capabilities!(metrics, state, trouble);` for a source that implements
/// [`KeepsMetrics`], [`ShowsState`] and [`ShowsTrouble`].
macro_rules! capabilities {
    ($($cap:ident),* $(,)?) => { $( capabilities!(@one $cap); )* };
    (@one metrics) => {
        fn metrics(&self) -> Option<&dyn $crate::correlate::source::KeepsMetrics> {
            Some(self)
        }
    };
    (@one logs) => {
        fn logs(&self) -> Option<&dyn $crate::correlate::source::ReadsLogs> {
            Some(self)
        }
    };
    (@one profiles) => {
        fn profiles(&self) -> Option<&dyn $crate::correlate::source::TakesProfiles> {
            Some(self)
        }
    };
    (@one state) => {
        fn state(&self) -> Option<&dyn $crate::correlate::source::ShowsState> {
            Some(self)
        }
    };
    (@one trouble) => {
        fn trouble(&self) -> Option<&dyn $crate::correlate::source::ShowsTrouble> {
            Some(self)
        }
    };
}
pub(crate) use capabilities;

/// A source of metric series.
pub trait KeepsMetrics {
    /// The key of a metric point it keeps (`None`: not its point). Sources
    /// are asked in turn; the first that keeps a point has it.
    fn keep(&self, offer: &Offer<'_>) -> Option<Kept>;

    /// The key dimensions its series carry (the alert rules' `metrics`
    /// table has a column for each).
    fn dims(&self) -> &'static [&'static str] {
        &[]
    }
}

/// A source that reads log records.
pub trait ReadsLogs {
    /// Read what it knows of a log record's attributes into the record's
    /// parts (a gateway's route and answer), before the state keeps it.
    fn read_log(&self, _attrs: &[KeyValue], _record: &mut LogEvidence) {}

    /// See a log record taken into the state (route statistics, say).
    fn observe(&self, _record: &LogEvidence, _clock_ns: u64) {}

    /// Join a trace with its log records (`t.logs`, found already): it may
    /// set what its records say of the request (the route, the final
    /// status) and keep its part of the trace for its log columns.
    fn join_logs(&self, _t: &mut TraceRow) {}

    /// Its columns of the `logs` table, read from the parts `read_log` and
    /// `join_logs` kept (the row index is the record's).
    fn log_columns(&self) -> &'static [Column<TraceRow>] {
        &[]
    }
}

/// A source that takes profiles.
pub trait TakesProfiles {
    /// Take in a profiles request (`encoded_len` bytes on the wire) that
    /// passes through the processor.
    fn take_profiles(
        &self,
        req: &opentelemetry_proto::tonic::collector::profiles::v1development::ExportProfilesServiceRequest,
        encoded_len: usize,
        now_ns: u64,
    );

    /// Whether a kept trace should wait for evidence of this source that
    /// arrives after the spans it covers (a profile window ends after
    /// them), having waited `waited` already. `false` once it has arrived,
    /// or there is nothing to wait for, or the source's bound has passed.
    fn awaits(&self, _t: &TraceRow, _now_ns: u64, _waited: std::time::Duration) -> bool {
        false
    }
}

/// A source that shows its state to the alert rules and the page.
pub trait ShowsState {
    /// Its tables for the alert rules (with no view: empty, for validation).
    fn alert_tables(&self, _view: Option<&View<'_>>) -> Result<Vec<Table>, String> {
        Ok(Vec::new())
    }

    /// The page's API under `/api/{path}` it answers.
    fn api(&self, _path: &str, _view: &View<'_>) -> Option<serde_json::Value> {
        None
    }

    /// The table the page draws of it.
    fn page(&self) -> Option<PageTable> {
        None
    }
}

/// A source that knows trouble for the `correlated` sampling policy.
pub trait ShowsTrouble {
    /// The span and resource attributes its `in_trouble` reads.
    fn trouble_keys(&self) -> &'static [&'static str];

    /// Whether what it knows of the trace shows trouble.
    fn in_trouble(&self, asked: &Asked<'_, '_>) -> bool;
}

/// What the `correlated` sampling policy asks a source of a trace: the
/// state, the trace's id, its span and resource attributes' values (of
/// the source's `trouble_keys`), the policy's thresholds.
pub struct Asked<'a, 'v> {
    pub store: &'a Store,
    pub trace_id: &'a [u8; 16],
    pub values: Values<'v>,
    pub trouble: &'a Trouble,
}

/// For a consumer span, the interval (ns) whose lag or backlog explains its
/// message's wait: from as long before it was produced to as long after it
/// was consumed (a backlog builds and drains over about that time), widened
/// to `sample_ns`, the sampling interval of the lag (a sample may not fall
/// inside a short wait), not a pause minutes before or after. `None` for a
/// span that did not wait on a message.
pub fn wait_window(t: &TraceRow, s: &SpanRow, sample_ns: u64) -> Option<(u64, u64)> {
    let wait = s.async_wait_ms?;
    let consumed = t.start_ns + (s.start_ms * 1e6) as u64;
    let span = ((wait * 1e6) as u64).max(sample_ns);
    Some((
        consumed.saturating_sub(2 * span),
        consumed.saturating_add(span),
    ))
}

/// The attributes that name a join (a topic, a group, a route): not kept
/// among a series' other attributes.
pub const JOIN_ATTRS: &[&str] = &[
    "topic",
    "group",
    "messaging.destination.name",
    "route_id",
    "http.route",
];

/// The section of a source whose receiver collects on an interval
/// (`processors.correlate.rabbitmq`, `.nats`).
#[derive(Debug, Clone, Default, serde::Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SampleInterval {
    /// How often the receiver collects (its `collection_interval`): a
    /// consumer's wait joins what was collected within this of it. Unset:
    /// `consumer_lag.sample_interval`, which these sources read before
    /// they had their own key.
    #[serde(default)]
    pub sample_interval: Option<causeway_core::config::Duration>,
}

impl causeway_core::config::Validate for SampleInterval {
    fn validate(&self) -> Vec<causeway_core::config::ConfigError> {
        match self.sample_interval {
            Some(d) if d.get().is_zero() => vec![causeway_core::config::ConfigError::new(
                "sample_interval",
                "must be more than 0",
            )],
            _ => Vec::new(),
        }
    }
}

/// Whether `s` is `source`'s to join: claimed by it, or by no source.
pub fn mine(s: &SpanRow, source: &str) -> bool {
    s.claimed.is_none_or(|c| c == source)
}

/// A row as JSON for a trace's evidence.
pub fn json<T: serde::Serialize>(row: &T) -> serde_json::Value {
    serde_json::to_value(row).unwrap_or(serde_json::Value::Null)
}

/// Keep the later of two times.
pub fn row_time(slot: &mut u64, t: u64) {
    *slot = (*slot).max(t);
}

/// Add `more` to `tables`, the rows of a table already there appended to
/// it. Sources may add columns to a shared table: the merged table has
/// every source's columns, nulls where a source's rows have none.
fn merge(tables: &mut Vec<Table>, more: Vec<Table>) -> Result<(), String> {
    for (name, schema, batch) in more {
        match tables.iter_mut().find(|(n, _, _)| *n == name) {
            Some((_, have_schema, have)) => {
                let both = union(have_schema, &schema);
                let a = conform(have, &both).map_err(|e| format!("table {name}: {e}"))?;
                let b = conform(&batch, &both).map_err(|e| format!("table {name}: {e}"))?;
                *have = datafusion::arrow::compute::concat_batches(&both, [&a, &b])
                    .map_err(|e| format!("table {name}: {e}"))?;
                *have_schema = both;
            }
            None => tables.push((name, schema, batch)),
        }
    }
    Ok(())
}

/// The sources' declared tables, each once: a table several sources
/// declare (the dependency families' `dependency`) has the columns of all.
fn about(sources: &[Box<dyn Source>]) -> Vec<About> {
    let mut out: Vec<About> = Vec::new();
    for t in sources.iter().flat_map(|s| s.tables()) {
        match out.iter_mut().find(|h| h.name == t.name) {
            Some(have) => {
                for c in t.columns {
                    if !have.columns.iter().any(|h| h.0 == c.0) {
                        have.columns.push(c);
                    }
                }
            }
            None => out.push(t),
        }
    }
    out
}

/// One table's columns as two sources declare them: the first's, then the
/// second's it lacks.
fn union(a: &SchemaRef, b: &SchemaRef) -> SchemaRef {
    if a == b {
        return a.clone();
    }
    let mut fields: Vec<_> = a.fields().iter().cloned().collect();
    for f in b.fields() {
        if a.field_with_name(f.name()).is_err() {
            fields.push(f.clone());
        }
    }
    std::sync::Arc::new(datafusion::arrow::datatypes::Schema::new(fields))
}

/// `batch` with the columns of `schema`, by name: nulls for those it lacks.
fn conform(
    batch: &datafusion::arrow::array::RecordBatch,
    schema: &SchemaRef,
) -> Result<datafusion::arrow::array::RecordBatch, String> {
    if batch.schema_ref() == schema {
        return Ok(batch.clone());
    }
    let columns = schema
        .fields()
        .iter()
        .map(|f| match batch.column_by_name(f.name()) {
            Some(c) => c.clone(),
            None => datafusion::arrow::array::new_null_array(f.data_type(), batch.num_rows()),
        })
        .collect();
    datafusion::arrow::array::RecordBatch::try_new(schema.clone(), columns)
        .map_err(|e| e.to_string())
}

/// What every source's join of one tick produced.
#[derive(Default)]
pub struct TickJoin {
    /// Their tables for the rules (rows of one table from several sources merged).
    pub tables: Vec<Table>,
    /// Misses by source (those with any).
    pub misses: Vec<(&'static str, u64)>,
    /// Sources whose join failed, with why.
    pub errors: Vec<(&'static str, String)>,
}

/// The registered sources, in the order they are asked and joined.
pub struct Sources {
    list: Vec<Box<dyn Source>>,
    /// Their rule tables' schemas, merged once (see [`Sources::tables`]).
    tables: Vec<(&'static str, SchemaRef)>,
    /// The sources' columns of `logs`, after the core's (a name once).
    log_columns: Vec<&'static Column<TraceRow>>,
}

impl std::fmt::Debug for Sources {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.list.iter().map(|s| s.name()))
            .finish()
    }
}

impl Sources {
    /// Whether any source asks the trace to wait (see [`TakesProfiles::awaits`]).
    pub fn awaits(&self, t: &TraceRow, now_ns: u64, waited: std::time::Duration) -> bool {
        self.list
            .iter()
            .filter_map(|s| s.profiles())
            .any(|p| p.awaits(t, now_ns, waited))
    }

    /// These sources.
    pub fn new(sources: Vec<Box<dyn Source>>) -> Self {
        let mut log_columns: Vec<&'static Column<TraceRow>> = Vec::new();
        for c in sources
            .iter()
            .filter_map(|s| s.logs())
            .flat_map(|l| l.log_columns())
        {
            let taken = |n: &str| {
                LOG_COLUMNS
                    .iter()
                    .chain(log_columns.iter().copied())
                    .any(|h| h.name == n)
            };
            if !taken(c.name) {
                log_columns.push(c);
            }
        }
        let logs = schema(
            LOG_COLUMNS
                .iter()
                .chain(log_columns.iter().copied())
                .map(Column::field)
                .collect(),
        );
        let mut tables: Vec<(&'static str, SchemaRef)> = vec![("logs", logs)];
        for t in about(&sources) {
            if t.purpose == Purpose::Rules {
                tables.push((t.name, t.schema()));
            }
        }
        Sources {
            list: sources,
            tables,
            log_columns,
        }
    }

    /// Every source reads a log record's attributes.
    pub fn read_log(&self, attrs: &[KeyValue], record: &mut LogEvidence) {
        for l in self.list.iter().filter_map(|s| s.logs()) {
            l.read_log(attrs, record);
        }
    }

    /// Join each trace with its log records, and every source with them.
    pub fn join_logs(&self, traces: &mut [TraceRow], store: &Store) {
        for t in traces.iter_mut() {
            t.logs = store.logs.of(&t.id);
            for l in self.list.iter().filter_map(|s| s.logs()) {
                l.join_logs(t);
            }
        }
    }

    /// The sources' columns of the `logs` table (after the core's).
    pub fn log_columns(&self) -> &[&'static Column<TraceRow>] {
        &self.log_columns
    }

    /// The column of `logs` named `name` (the core's or a source's).
    pub fn log_column(&self, name: &str) -> Option<&'static Column<TraceRow>> {
        LOG_COLUMNS
            .iter()
            .chain(self.log_columns.iter().copied())
            .find(|c| c.name == name)
    }

    /// The `logs` table of the traces' records (joined by [`Sources::join_logs`]).
    fn logs_table(&self, traces: &[TraceRow]) -> Result<Table, String> {
        let rows: Vec<(&TraceRow, usize)> = traces
            .iter()
            .flat_map(|t| (0..t.logs.len()).map(move |i| (t, i)))
            .collect();
        let schema = self.tables[0].1.clone();
        let mut c = Cols::new(&schema, rows.len());
        fill_logs(&mut c, &rows);
        for (k, col) in self.log_columns.iter().enumerate() {
            c.fill(LOG_COLUMNS.len() + k, col, &rows);
        }
        Ok(("logs", schema.clone(), c.finish(schema)?))
    }

    /// Each source.
    pub fn iter(&self) -> impl Iterator<Item = &dyn Source> {
        self.list.iter().map(|s| s.as_ref())
    }

    /// The first source's key of a metric point.
    pub fn classify(&self, offer: &Offer<'_>) -> Option<Kept> {
        self.list
            .iter()
            .filter_map(|s| s.metrics())
            .find_map(|m| m.keep(offer))
    }

    /// Every source sees a profiles request.
    pub fn take_profiles(
        &self,
        req: &opentelemetry_proto::tonic::collector::profiles::v1development::ExportProfilesServiceRequest,
        encoded_len: usize,
        now_ns: u64,
    ) {
        for p in self.list.iter().filter_map(|s| s.profiles()) {
            p.take_profiles(req, encoded_len, now_ns);
        }
    }

    /// Every source sees a log record.
    pub fn observe(&self, record: &LogEvidence, clock_ns: u64) {
        for l in self.list.iter().filter_map(|s| s.logs()) {
            l.observe(record, clock_ns);
        }
    }

    /// Mark each span with the source that claims it.
    pub fn claim(&self, traces: &mut [TraceRow]) {
        for t in traces {
            for sp in &mut t.spans {
                sp.claimed = self.list.iter().find(|s| s.claims(sp)).map(|s| s.name());
            }
        }
    }

    /// Every source's rule tables, each once (sources may add rows and
    /// columns to one table: the dependency families to `dependency`).
    pub fn tables(&self) -> Vec<(&'static str, SchemaRef)> {
        self.tables.clone()
    }

    /// Every source's declared tables, each once, as the reference lists them.
    pub fn about(&self) -> Vec<About> {
        about(&self.list)
    }

    /// The reference of the sources' tables and their columns of `logs`
    /// (the correlate README's "Evidence tables"), from their declarations.
    pub fn reference(&self) -> String {
        let tables = self.about();
        let mut out = String::new();
        for (purpose, title) in [
            (
                Purpose::Rules,
                "For the rules (`rules[].sql`), rebuilt each tick",
            ),
            (
                Purpose::Alerts,
                "For the alert rules (`alerts.rules[].expr`), rebuilt each evaluation",
            ),
        ] {
            out += &format!("### {title}\n\n");
            for t in tables.iter().filter(|t| t.purpose == purpose) {
                out += &t.markdown();
                out += "\n";
            }
        }
        let logs = About {
            name: "logs",
            doc: "The sources' own columns of `logs`, after its shared ones (null on a record \
                  the source did not read).",
            purpose: Purpose::Rules,
            columns: self
                .log_columns
                .iter()
                .map(|c| (c.name, c.ty, c.doc))
                .collect(),
        };
        out += "### The sources' columns of `logs`\n\n";
        out += &logs.markdown();
        out
    }

    /// Every source's built-in rules.
    pub fn rules(&self) -> Vec<Rule> {
        self.list.iter().flat_map(|s| s.rules()).collect()
    }

    /// Join the tick's traces with every source.
    pub fn join(&self, tick: &Tick<'_>, traces: &mut [TraceRow]) -> TickJoin {
        self.claim(traces);
        let mut tables = Vec::new();
        let mut misses = Vec::new();
        let mut errors = Vec::new();
        match self.logs_table(traces) {
            Ok(t) => tables.push(t),
            Err(e) => errors.push(("correlate", format!("table logs: {e}"))),
        }
        for s in &self.list {
            match s.join(tick, traces) {
                Ok(j) => {
                    if let Err(e) = merge(&mut tables, j.tables) {
                        errors.push((s.name(), e));
                    }
                    if j.misses > 0 {
                        misses.push((s.name(), j.misses));
                    }
                }
                Err(e) => errors.push((s.name(), e)),
            }
        }
        // As declared, whichever sources answered.
        for (name, schema) in &self.tables {
            if let Some((_, have_schema, batch)) = tables.iter_mut().find(|(n, _, _)| n == name) {
                match conform(batch, schema) {
                    Ok(b) => {
                        *batch = b;
                        *have_schema = schema.clone();
                    }
                    Err(e) => errors.push(("correlate", format!("table {name}: {e}"))),
                }
            }
        }
        TickJoin {
            tables,
            misses,
            errors,
        }
    }

    /// Every source's alert tables (with no view: empty).
    pub fn alert_tables(&self, view: Option<&View<'_>>) -> Result<Vec<Table>, String> {
        let mut out = Vec::new();
        for s in &self.list {
            if let Some(st) = s.state() {
                merge(&mut out, st.alert_tables(view)?)?;
            }
        }
        Ok(out)
    }

    /// The key dimensions of every source's series, each once, in order.
    pub fn dims(&self) -> Vec<&'static str> {
        let mut out: Vec<&'static str> = Vec::new();
        for d in self
            .list
            .iter()
            .filter_map(|s| s.metrics())
            .flat_map(|m| m.dims().iter())
        {
            if !out.contains(d) {
                out.push(d);
            }
        }
        out
    }

    /// The answer of the source that serves `/api/{path}`.
    pub fn api(&self, path: &str, view: &View<'_>) -> Option<serde_json::Value> {
        self.list
            .iter()
            .filter_map(|s| s.state())
            .find_map(|st| st.api(path, view))
    }

    /// The tables the page draws.
    pub fn pages(&self) -> Vec<PageTable> {
        self.list
            .iter()
            .filter_map(|s| s.state())
            .filter_map(|st| st.page())
            .collect()
    }

    /// The attributes every source's `in_trouble` reads, each once.
    pub fn trouble_keys(&self) -> Vec<&'static str> {
        let mut out: Vec<&'static str> = Vec::new();
        for k in self
            .list
            .iter()
            .filter_map(|s| s.trouble())
            .flat_map(|t| t.trouble_keys().iter())
        {
            if !out.contains(k) {
                out.push(k);
            }
        }
        out
    }
}

/// One correlation state and its sources, shared by every instance of one
/// `correlate` id (and read by the `correlated` sampling policy).
#[derive(Debug)]
pub struct Correlation {
    /// The state.
    pub store: Store,
    /// The sources.
    pub sources: Sources,
}

impl Correlation {
    /// Take in log records.
    pub fn add_logs(
        &self,
        logs: &[opentelemetry_proto::tonic::logs::v1::ResourceLogs],
        now_ns: u64,
    ) {
        self.store.logs.add(
            &self.store,
            logs,
            now_ns,
            &|attrs, r| self.sources.read_log(attrs, r),
            &|r, clock| self.sources.observe(r, clock),
        );
    }

    /// Take in a profiles request (the sources that read profiles keep
    /// their samples).
    pub fn add_profiles(
        &self,
        req: &opentelemetry_proto::tonic::collector::profiles::v1development::ExportProfilesServiceRequest,
        encoded_len: usize,
        now_ns: u64,
    ) {
        self.sources.take_profiles(req, encoded_len, now_ns);
    }

    /// Take in the metric points a source keeps.
    pub fn add_metrics(
        &self,
        metrics: &[opentelemetry_proto::tonic::metrics::v1::ResourceMetrics],
        now_ns: u64,
    ) {
        self.store
            .series
            .add(&self.store, metrics, now_ns, &|o| self.sources.classify(o));
    }
}

/// What any source knows of the trace (for the `correlated` sampling policy).
impl crate::trouble::TroubleState for Correlation {
    fn in_trouble(&self, trace_id: &[u8; 16], values: Values<'_>, tr: &Trouble) -> bool {
        self.sources.iter().filter_map(|s| s.trouble()).any(|s| {
            s.in_trouble(&Asked {
                store: &self.store,
                trace_id,
                values,
                trouble: tr,
            })
        })
    }
}
