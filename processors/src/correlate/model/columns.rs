//! The core tables' columns, each declared once: its name, its type and
//! how its cell is read from a trace. `rules::schemas` and `rules::tables`
//! both derive from these lists. A span attribute a rule reads as it is
//! is one line in [`span_attributes!`](super::attributes)' list, which makes
//! its column of `spans` ([`SPAN_ATTRIBUTES`]);
//! what the analysis derives from spans is a field of
//! [`SpanRow`](super::trace::SpanRow) and one line here.

use super::table::{s, so, Cols, Column, V};
use super::trace::{Hex16, SpanRow, TraceRow};

type C = Column<TraceRow>;

fn culprit(t: &TraceRow) -> &SpanRow {
    &t.spans[t.culprit]
}

fn share(t: &TraceRow, self_ms: f64) -> V<'static> {
    V::F(Some(if t.duration_ms > 0.0 {
        self_ms / t.duration_ms
    } else {
        0.0
    }))
}

/// Declares a table's columns once: the list of them (names, types and
/// cells, for the schema and for any reader) and a function that fills a
/// batch row by row with the same cells, inlined (the tick's hot path).
macro_rules! table {
    ($(#[$m:meta])* $list:ident, $fill:ident, [$( $kind:ident($name:literal, |$t:pat_param, $i:pat_param| $get:expr $(,)?) ),* $(,)?]) => {
        $(#[$m])*
        pub static $list: &[C] = &[ $( C::$kind($name, |$t, $i| $get) ),* ];

        /// Fill a batch of the table's columns (in their order) with `rows`.
        #[allow(unused_variables)]
        pub fn $fill(c: &mut Cols, rows: &[(&TraceRow, usize)]) {
            for &(row, index) in rows {
                c.row([ $( { let $t = row; let $i = index; $get } ),* ]);
            }
        }
    };
}

table!(
    /// `traces`: one row per trace (the index is unused).
    TRACE_COLUMNS,
    fill_traces,
    [
    text("trace_id", |t, _| s(&t.trace_id)),
    float("duration_ms", |t, _| V::F(Some(t.duration_ms))),
    text("route", |t, _| so(&t.route)),
    text("root_span_id", |t, _| {
        V::Id(Hex16::of(t.spans[t.root].span_id))
    }),
    text("root_service", |t, _| s(&t.spans[t.root].service)),
    text("root_name", |t, _| s(&t.spans[t.root].name)),
    bool("error", |t, _| V::B(Some(t.error_origin.is_some()))),
    text("culprit_span_id", |t, _| {
        V::Id(Hex16::of(culprit(t).span_id))
    }),
    text("culprit_service", |t, _| s(&culprit(t).service)),
    text("culprit_name", |t, _| s(&culprit(t).name)),
    text("culprit_kind", |t, _| s(culprit(t).kind.as_str())),
    float("culprit_self_ms", |t, _| V::F(Some(culprit(t).self_ms))),
    float("culprit_share", |t, _| share(t, culprit(t).self_ms)),
    text("culprit_host", |t, _| s(&culprit(t).host)),
    text("culprit_db_system", |t, _| so(&culprit(t).db_system)),
    text("error_span_id", |t, _| match t.error_origin {
        Some(e) => V::Id(Hex16::of(t.spans[e].span_id)),
        None => V::S(None),
    }),
    text("error_service", |t, _| {
        V::S(t.error_origin.map(|e| &*t.spans[e].service))
    }),
    float("start_unix_ms", |t, _| V::F(Some(t.start_unix_ms))),
    bool("failed", |t, _| V::B(Some(t.failed))),
    int("final_status", |t, _| V::I(t.final_status)),
    float("culprit_excess_ms", |t, _| V::F(culprit(t).excess_ms)),
    float("culprit_baseline_ms", |t, _| V::F(culprit(t).baseline_ms)),
    float("culprit_path_ms", |t, _| V::F(Some(culprit(t).path_ms))),
    text("entry_span_id", |t, _| {
        V::Id(Hex16::of(t.spans[t.entry].span_id))
    }),
    text("entry_service", |t, _| s(&t.spans[t.entry].service)),
    ]
);

table!(
    /// `spans`: one row per span (the index is the span's).
    SPAN_COLUMNS,
    fill_spans,
    [
    text("trace_id", |t, _| s(&t.trace_id)),
    text("span_id", |t, i| V::Id(Hex16::of(t.spans[i].span_id))),
    text("parent_id", |t, i| V::Id(Hex16::of(t.spans[i].parent_id))),
    text("service", |t, i| s(&t.spans[i].service)),
    text("host", |t, i| s(&t.spans[i].host)),
    text("name", |t, i| s(&t.spans[i].name)),
    text("kind", |t, i| s(t.spans[i].kind.as_str())),
    float("start_ms", |t, i| V::F(Some(t.spans[i].start_ms))),
    float("end_ms", |t, i| V::F(Some(t.spans[i].end_ms))),
    float("duration_ms", |t, i| V::F(Some(t.spans[i].duration_ms))),
    float("self_ms", |t, i| V::F(Some(t.spans[i].self_ms))),
    float("share", |t, i| share(t, t.spans[i].self_ms)),
    bool("critical", |t, i| V::B(Some(t.spans[i].critical))),
    text("status", |t, i| s(t.spans[i].status.as_str())),
    text("status_message", |t, i| s(&t.spans[i].status_message)),
    text("callee", |t, i| V::S(t.spans[i].callee.as_deref())),
    text("exception_type", |t, i| so(&t.spans[i].exception_type)),
    text(
        "exception_message",
        |t, i| so(&t.spans[i].exception_message),
    ),
    float("wait_ms", |t, i| V::F(t.spans[i].wait_ms)),
    float("path_ms", |t, i| V::F(Some(t.spans[i].path_ms))),
    bool("cache_inferred", |t, i| {
        V::B(Some(t.spans[i].cache_inferred))
    }),
    bool("pool_wait", |t, i| V::B(Some(t.spans[i].pool_wait))),
    bool("client_error", |t, i| V::B(Some(t.spans[i].client_error))),
    text("refused_target", |t, i| {
        V::S(t.spans[i].refused_target.as_deref())
    }),
    int("attempt", |t, i| V::I(t.spans[i].attempt)),
    int("attempts", |t, i| V::I(t.spans[i].attempts)),
    int("failed_attempts", |t, i| V::I(t.spans[i].failed_attempts)),
    float("retry_window_ms", |t, i| V::F(t.spans[i].retry_window_ms)),
    float("retry_gap_ms", |t, i| V::F(t.spans[i].retry_gap_ms)),
    text("retry_trigger", |t, i| so(&t.spans[i].retry_trigger)),
    bool("recovered", |t, i| V::B(Some(t.spans[i].recovered))),
    float("target_retries_per_s", |t, i| {
        V::F(t.spans[i].target_retries_per_s)
    }),
    float("queue_ms", |t, i| V::F(t.spans[i].queue_ms)),
    float("async_wait_ms", |t, i| V::F(t.spans[i].async_wait_ms)),
    float("baseline_ms", |t, i| V::F(t.spans[i].baseline_ms)),
    float("excess_ms", |t, i| V::F(t.spans[i].excess_ms)),
    float("prompt_baseline", |t, i| V::F(t.spans[i].prompt_baseline)),
    ]
);

table!(
    /// `logs`: one row per log record joined to a trace (the index is the
    /// record's): what every record has. Sources add their own columns
    /// (`Source::log_columns`: the gateway's route, status, ...).
    LOG_COLUMNS,
    fill_logs,
    [
    text("trace_id", |t, _| s(&t.trace_id)),
    float("time_ms", |t, i| V::F(Some(t.logs[i].time_ns as f64 / 1e6))),
    text("service", |t, i| s(&t.logs[i].service)),
    int("severity", |t, i| V::I(Some(i64::from(t.logs[i].severity)))),
    text("error_type", |t, i| so(&t.logs[i].error_type)),
    text("body", |t, i| s(&t.logs[i].body)),
    text("span_id", |t, i| so(&t.logs[i].span_id)),
    ]
);

/// A value as a cell of the `spans` table.
trait Cell {
    fn cell(&self) -> V<'_>;
}

impl Cell for Option<String> {
    fn cell(&self) -> V<'_> {
        V::S(self.as_deref())
    }
}
impl Cell for Option<&'static str> {
    fn cell(&self) -> V<'_> {
        V::S(*self)
    }
}
impl Cell for Option<i64> {
    fn cell(&self) -> V<'_> {
        V::I(*self)
    }
}
impl Cell for Option<f64> {
    fn cell(&self) -> V<'_> {
        V::F(*self)
    }
}
impl Cell for Option<bool> {
    fn cell(&self) -> V<'_> {
        V::B(*self)
    }
}

/// A cell function as itself (its closure's types inferred from the bound).
#[inline(always)]
fn cell_of<F: for<'a> Fn(&'a TraceRow, usize) -> V<'a>>(f: F) -> F {
    f
}

/// The cell of attribute `$field` of span `$i`: the declared one, else the
/// field's own.
macro_rules! getter {
    ($field:ident ;) => {
        |t, i| t.spans[i].attrs.$field.cell()
    };
    ($field:ident ; $get:expr) => {
        $get
    };
}

/// Makes the span attributes' columns of `spans` from
/// [`span_attribute_list!`](super::attributes::span_attribute_list).
macro_rules! span_attr_columns {
    ($(
        $(#[doc = $doc:literal])+
        $field:ident: $ty:ty = $col:ident ($conv:path) $keys:expr
            $(, or ($conv2:path) $keys2:expr)?
            $(, column $get:expr)?;
    )*) => {
        /// The span attributes' columns of `spans`, after its derived ones.
        pub static SPAN_ATTRIBUTES: &[Column<TraceRow>] = &[
            $( Column::<TraceRow>::$col(stringify!($field), getter!($field ; $($get)?))
                .doc(concat!($($doc),+)), )*
        ];

        /// Fill the span attributes' columns of a batch (from column `at`
        /// on) with `rows`, row by row with the same cells inlined: one
        /// pass over the spans, not one per attribute (a span's row is
        /// large; a pass per column reads every span again).
        pub fn fill_span_attributes(c: &mut Cols, at: usize, rows: &[(&TraceRow, usize)]) {
            for &(t, i) in rows {
                c.row_at(at, [ $( cell_of(getter!($field ; $($get)?))(t, i), )* ]);
            }
        }
    };
}

super::attributes::span_attribute_list!(span_attr_columns);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_attribute_has_a_column_with_its_doc_and_its_keys() {
        assert_eq!(SPAN_ATTRIBUTES.len(), super::super::attributes::KEYS.len());
        for (c, (name, keys)) in SPAN_ATTRIBUTES.iter().zip(super::super::attributes::KEYS) {
            assert_eq!(c.name, *name);
            assert!(!c.doc.trim().is_empty() && !keys.is_empty(), "{name}");
        }
        let op = super::super::attributes::KEYS
            .iter()
            .find(|k| k.0 == "db_operation")
            .unwrap()
            .1;
        assert_eq!(
            op,
            &[
                "db.operation.name",
                "db.operation",
                "db.query.text",
                "db.statement"
            ]
        );
    }
}
