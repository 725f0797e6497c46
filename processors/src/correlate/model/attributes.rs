//! Span attributes a rule reads as they are, each declared once: its
//! column in `spans`, the attribute keys it is read from (the first
//! present wins: the current semantic-convention name, then the older
//! ones) and its type. A new attribute for a rule is one line in
//! [`SPAN_ATTRIBUTES`]; what the analysis derives from spans (self time,
//! retries, waits) stays in [`SpanRow`](super::trace::SpanRow).

use opentelemetry_proto::tonic::common::v1::{any_value, KeyValue};

use super::table::{Cols, Ty, V};
use super::trace::TraceRow;

/// A span attribute read as it is.
#[derive(Debug)]
pub struct SpanAttribute {
    /// Its column in `spans`.
    pub column: &'static str,
    /// The keys it is read from, the first present wins.
    pub keys: &'static [&'static str],
    /// Its type (a value of another type is read as this one when it can
    /// be: an integer as text, `"42"` as an integer).
    pub ty: Ty,
}

impl SpanAttribute {
    /// A text attribute.
    pub const fn text(column: &'static str, keys: &'static [&'static str]) -> Self {
        SpanAttribute {
            column,
            keys,
            ty: Ty::Text,
        }
    }
    /// An integer attribute.
    pub const fn int(column: &'static str, keys: &'static [&'static str]) -> Self {
        SpanAttribute {
            column,
            keys,
            ty: Ty::Int,
        }
    }
    /// A float attribute.
    pub const fn float(column: &'static str, keys: &'static [&'static str]) -> Self {
        SpanAttribute {
            column,
            keys,
            ty: Ty::Float,
        }
    }
    /// A boolean attribute.
    pub const fn bool(column: &'static str, keys: &'static [&'static str]) -> Self {
        SpanAttribute {
            column,
            keys,
            ty: Ty::Bool,
        }
    }
}

/// The span attributes rules read as they are.
pub static SPAN_ATTRIBUTES: &[SpanAttribute] = &[
    // The table a database call touched (and the name before semconv 1.25).
    SpanAttribute::text("db_collection", &["db.collection.name", "db.sql.table"]),
    // The thread that ran the span (the Java agent's, by default), whose
    // profile samples are the span's where a profiler names threads.
    SpanAttribute::text("thread_name", &["thread.name"]),
];

/// A span's declared text attribute `column` ([`SPAN_ATTRIBUTES`]), if it
/// has one.
pub fn text<'a>(span: &'a super::trace::SpanRow, column: &str) -> Option<&'a str> {
    let k = SPAN_ATTRIBUTES.iter().position(|a| a.column == column)?;
    match span.attributes.get(k)? {
        Some(Value::Text(s)) => Some(s),
        _ => None,
    }
}

pub use super::trace::AttrValue as Value;

/// The value of `v` as type `ty`, when it reads as one.
fn value_of(v: &any_value::Value, ty: Ty) -> Option<Value> {
    use any_value::Value as A;
    Some(match (ty, v) {
        (Ty::Text, A::StringValue(s)) => Value::Text(s.clone()),
        (Ty::Text, A::IntValue(i)) => Value::Text(i.to_string()),
        (Ty::Text, A::DoubleValue(d)) => Value::Text(d.to_string()),
        (Ty::Text, A::BoolValue(b)) => Value::Text(b.to_string()),
        (Ty::Int, A::IntValue(i)) => Value::Int(*i),
        (Ty::Int, A::StringValue(s)) => Value::Int(s.trim().parse().ok()?),
        (Ty::Float, A::DoubleValue(d)) => Value::Float(*d),
        (Ty::Float, A::IntValue(i)) => Value::Float(*i as f64),
        (Ty::Float, A::StringValue(s)) => Value::Float(s.trim().parse().ok()?),
        (Ty::Bool, A::BoolValue(b)) => Value::Bool(*b),
        (Ty::Bool, A::StringValue(s)) => Value::Bool(s.eq_ignore_ascii_case("true")),
        _ => return None,
    })
}

/// A value as a cell.
fn cell(v: &Value) -> V<'_> {
    match v {
        Value::Text(s) => V::S(Some(s)),
        Value::Int(i) => V::I(Some(*i)),
        Value::Float(f) => V::F(Some(*f)),
        Value::Bool(b) => V::B(Some(*b)),
    }
}

/// The declared attributes of a span, in [`SPAN_ATTRIBUTES`]' order (empty,
/// without allocating, when it has none of them).
pub fn read(attrs: &[KeyValue]) -> Vec<Option<Value>> {
    let found = |a: &SpanAttribute| {
        a.keys.iter().find_map(|k| {
            let v = attrs
                .iter()
                .find(|kv| kv.key == *k)?
                .value
                .as_ref()?
                .value
                .as_ref()?;
            value_of(v, a.ty)
        })
    };
    if !SPAN_ATTRIBUTES
        .iter()
        .any(|a| a.keys.iter().any(|k| attrs.iter().any(|kv| kv.key == *k)))
    {
        return Vec::new();
    }
    SPAN_ATTRIBUTES.iter().map(found).collect()
}

/// Fill the attributes' columns of `spans`, from column `at` on.
pub fn fill(c: &mut Cols, at: usize, rows: &[(&TraceRow, usize)]) {
    for (k, _) in SPAN_ATTRIBUTES.iter().enumerate() {
        c.fill_with(at + k, rows, |t, i| {
            t.spans[i]
                .attributes
                .get(k)
                .and_then(Option::as_ref)
                .map_or(V::S(None), cell)
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_proto::tonic::common::v1::AnyValue;

    fn kv(k: &str, v: any_value::Value) -> KeyValue {
        KeyValue {
            key: k.into(),
            value: Some(AnyValue { value: Some(v) }),
            ..Default::default()
        }
    }

    #[test]
    fn an_attribute_is_read_by_its_first_present_key_and_nothing_allocates_without_one() {
        assert!(read(&[kv("http.route", any_value::Value::StringValue("/x".into()))]).is_empty());
        assert_eq!(
            value_of(&any_value::Value::StringValue("42".into()), Ty::Int),
            Some(Value::Int(42))
        );
        assert_eq!(value_of(&any_value::Value::BoolValue(true), Ty::Int), None);
    }
}
