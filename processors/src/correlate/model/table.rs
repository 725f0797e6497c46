//! Arrow tables as the rules and alerts read them: column helpers and a
//! row builder whose cells are borrowed.

use datafusion::arrow::array::{
    ArrayRef, BooleanBuilder, Float64Builder, Int64Builder, RecordBatch, StringBuilder,
};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use std::sync::Arc;

/// A table: its name, schema and rows.
pub type Table = (&'static str, SchemaRef, RecordBatch);

/// A text column.
pub fn utf8(name: &str) -> Field {
    Field::new(name, DataType::Utf8, true)
}
/// A float column.
pub fn f64f(name: &str) -> Field {
    Field::new(name, DataType::Float64, true)
}
/// An integer column.
pub fn i64f(name: &str) -> Field {
    Field::new(name, DataType::Int64, true)
}
/// A boolean column.
pub fn boolf(name: &str) -> Field {
    Field::new(name, DataType::Boolean, true)
}

/// A schema of these fields.
pub fn schema(fields: Vec<Field>) -> SchemaRef {
    Arc::new(Schema::new(fields))
}

/// Column builders, one Arrow builder per column; cells are borrowed, so a
/// row costs no allocation of its own.
pub struct Cols {
    cols: Vec<Col>,
}

/// A column builder.
pub enum Col {
    /// Text.
    S(StringBuilder),
    /// Float.
    F(Float64Builder),
    /// Integer.
    I(Int64Builder),
    /// Boolean.
    B(BooleanBuilder),
}

/// A cell.
pub enum V<'a> {
    /// Text.
    S(Option<&'a str>),
    /// Float.
    F(Option<f64>),
    /// Integer.
    I(Option<i64>),
    /// Boolean.
    B(Option<bool>),
}

impl Cols {
    /// Builders sized for `rows` rows (no regrowth while filling).
    pub fn new(schema: &Schema, rows: usize) -> Self {
        Cols {
            cols: schema
                .fields()
                .iter()
                .map(|f| match f.data_type() {
                    DataType::Float64 => Col::F(Float64Builder::with_capacity(rows)),
                    DataType::Int64 => Col::I(Int64Builder::with_capacity(rows)),
                    DataType::Boolean => Col::B(BooleanBuilder::with_capacity(rows)),
                    _ => Col::S(StringBuilder::with_capacity(rows, rows * 16)),
                })
                .collect(),
        }
    }
    /// Append a row.
    pub fn row<'a>(&mut self, cells: impl IntoIterator<Item = V<'a>>) {
        for (c, v) in self.cols.iter_mut().zip(cells) {
            match (c, v) {
                (Col::S(x), V::S(v)) => x.append_option(v),
                (Col::F(x), V::F(v)) => x.append_option(v),
                (Col::I(x), V::I(v)) => x.append_option(v),
                (Col::B(x), V::B(v)) => x.append_option(v),
                (Col::S(x), _) => x.append_null(),
                (Col::F(x), _) => x.append_null(),
                (Col::I(x), _) => x.append_null(),
                (Col::B(x), _) => x.append_null(),
            }
        }
    }
    /// The rows as a batch of `schema`.
    pub fn finish(self, schema: SchemaRef) -> Result<RecordBatch, String> {
        let arrays: Vec<ArrayRef> = self
            .cols
            .into_iter()
            .map(|c| -> ArrayRef {
                match c {
                    Col::S(mut b) => Arc::new(b.finish()),
                    Col::F(mut b) => Arc::new(b.finish()),
                    Col::I(mut b) => Arc::new(b.finish()),
                    Col::B(mut b) => Arc::new(b.finish()),
                }
            })
            .collect();
        RecordBatch::try_new(schema, arrays).map_err(|e| e.to_string())
    }
}

/// A text cell.
pub fn s(x: &str) -> V<'_> {
    V::S(Some(x))
}
/// An optional text cell.
pub fn so(x: &Option<String>) -> V<'_> {
    V::S(x.as_deref())
}

/// An unsigned count as an integer cell.
pub fn count(x: u64) -> V<'static> {
    V::I(Some(i64::try_from(x).unwrap_or(i64::MAX)))
}
