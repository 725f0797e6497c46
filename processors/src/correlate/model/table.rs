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
    /// An id as hex text (empty when zero).
    Id(super::trace::Hex16),
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
    #[inline]
    pub fn row<'a>(&mut self, cells: impl IntoIterator<Item = V<'a>>) {
        self.row_at(0, cells);
    }
    /// Append a row's cells to the columns from `at` on (the rest of a
    /// row whose first columns another pass filled).
    #[inline]
    pub fn row_at<'a>(&mut self, at: usize, cells: impl IntoIterator<Item = V<'a>>) {
        for (c, v) in self.cols.iter_mut().skip(at).zip(cells) {
            append(c, v);
        }
    }
    /// Fill column `at` with declared column `col` over `rows`.
    pub fn fill<R: ?Sized>(&mut self, at: usize, col: &Column<R>, rows: &[(&R, usize)]) {
        self.fill_with(at, rows, col.get);
    }
    /// Fill column `at` with `cell` over `rows`.
    pub fn fill_with<R: ?Sized>(
        &mut self,
        at: usize,
        rows: &[(&R, usize)],
        cell: impl for<'a> Fn(&'a R, usize) -> V<'a>,
    ) {
        if let Some(b) = self.cols.get_mut(at) {
            for (r, i) in rows {
                append(b, cell(r, *i));
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

/// Append a cell to its column's builder (null when the kinds differ).
#[inline(always)]
fn append(c: &mut Col, v: V<'_>) {
    match (c, v) {
        (Col::S(x), V::S(v)) => x.append_option(v),
        (Col::S(x), V::Id(h)) => x.append_value(h.as_str()),
        (Col::F(x), V::F(v)) => x.append_option(v),
        (Col::I(x), V::I(v)) => x.append_option(v),
        (Col::B(x), V::B(v)) => x.append_option(v),
        (Col::S(x), _) => x.append_null(),
        (Col::F(x), _) => x.append_null(),
        (Col::I(x), _) => x.append_null(),
        (Col::B(x), _) => x.append_null(),
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

impl serde::Serialize for V<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            V::S(Some(v)) => s.serialize_str(v),
            V::Id(h) => s.serialize_str(h.as_str()),
            V::F(Some(v)) => s.serialize_f64(*v),
            V::I(Some(v)) => s.serialize_i64(*v),
            V::B(Some(v)) => s.serialize_bool(*v),
            _ => s.serialize_none(),
        }
    }
}

/// Row `i`'s cells of `cols` as a map, the empty ones left out; written
/// as it is serialized, without a copy.
pub struct Cells<'a, R: ?Sized> {
    /// The row source.
    pub row: &'a R,
    /// The row.
    pub i: usize,
    /// The columns.
    pub cols: &'a [&'a Column<R>],
}

impl<R: ?Sized> serde::Serialize for Cells<'_, R> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(None)?;
        for c in self.cols {
            let v = (c.get)(self.row, self.i);
            if !v.is_empty() {
                m.serialize_entry(c.name, &v)?;
            }
        }
        m.end()
    }
}

impl V<'_> {
    /// Whether the cell is empty (null).
    pub fn is_empty(&self) -> bool {
        matches!(self, V::S(None) | V::F(None) | V::I(None) | V::B(None))
    }
    /// The cell as text (`None` when empty).
    pub fn text(&self) -> Option<String> {
        match self {
            V::S(v) => v.map(str::to_string),
            V::Id(h) => Some(h.as_str().to_string()),
            V::F(v) => v.map(|x| x.to_string()),
            V::I(v) => v.map(|x| x.to_string()),
            V::B(v) => v.map(|x| x.to_string()),
        }
    }
}

/// An unsigned count as an integer cell.
pub fn count(x: u64) -> V<'static> {
    V::I(Some(i64::try_from(x).unwrap_or(i64::MAX)))
}

/// The Arrow type of a declared column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ty {
    /// Text.
    Text,
    /// Float.
    Float,
    /// Integer.
    Int,
    /// Boolean.
    Bool,
}

impl Ty {
    /// Its name in the reference.
    pub fn name(self) -> &'static str {
        match self {
            Ty::Text => "text",
            Ty::Float => "float",
            Ty::Int => "integer",
            Ty::Bool => "boolean",
        }
    }
    /// The Arrow field of a column `name` of this type.
    pub fn field(self, name: &str) -> Field {
        match self {
            Ty::Text => utf8(name),
            Ty::Float => f64f(name),
            Ty::Int => i64f(name),
            Ty::Bool => boolf(name),
        }
    }
}

/// A column declared once: its name, its type, and how to read its cell
/// from row `i` of a row source `R`. The schema and the batches are both
/// derived from one list of them, so they cannot drift apart; a new column
/// is one line.
pub struct Column<R: ?Sized> {
    /// Its name in SQL.
    pub name: &'static str,
    /// Its type.
    pub ty: Ty,
    /// Its cell for row `i`.
    pub get: for<'a> fn(&'a R, usize) -> V<'a>,
    /// What it holds, for the generated table reference (empty: none yet).
    pub doc: &'static str,
}

impl<R: ?Sized> std::fmt::Debug for Column<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Column({} {:?})", self.name, self.ty)
    }
}

impl<R: ?Sized> Column<R> {
    /// A text column.
    pub const fn text(name: &'static str, get: for<'a> fn(&'a R, usize) -> V<'a>) -> Self {
        Column {
            name,
            ty: Ty::Text,
            get,
            doc: "",
        }
    }
    /// A float column.
    pub const fn float(name: &'static str, get: for<'a> fn(&'a R, usize) -> V<'a>) -> Self {
        Column {
            name,
            ty: Ty::Float,
            get,
            doc: "",
        }
    }
    /// An integer column.
    pub const fn int(name: &'static str, get: for<'a> fn(&'a R, usize) -> V<'a>) -> Self {
        Column {
            name,
            ty: Ty::Int,
            get,
            doc: "",
        }
    }
    /// A boolean column.
    pub const fn bool(name: &'static str, get: for<'a> fn(&'a R, usize) -> V<'a>) -> Self {
        Column {
            name,
            ty: Ty::Bool,
            get,
            doc: "",
        }
    }
    /// The same column, saying what it holds.
    pub const fn doc(mut self, doc: &'static str) -> Self {
        self.doc = doc;
        self
    }
    /// Its Arrow field.
    pub fn field(&self) -> Field {
        self.ty.field(self.name)
    }
}

/// A row of a per-trace table: the trace it belongs to and what was joined.
#[derive(Debug)]
pub struct Traced<T> {
    /// The trace's id (hex).
    pub trace_id: String,
    /// The joined row.
    pub row: T,
}

/// What a table is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// The rules read it each tick, one or more rows per analysed trace.
    Rules,
    /// The alert rules read it: the state as last collected.
    Alerts,
}

/// A table declared once: its name, what it holds and its columns, each
/// with its name, type, cell and doc. Its schema, its batches and its
/// reference (the correlate README's table list) all come from here.
pub struct Declared<R: 'static> {
    /// Its name in SQL.
    pub name: &'static str,
    /// What one row is.
    pub doc: &'static str,
    /// Who reads it.
    pub purpose: Purpose,
    /// Its columns, in order.
    pub columns: &'static [Column<R>],
}

impl<R> Declared<R> {
    /// Its schema.
    pub fn schema(&self) -> SchemaRef {
        schema_of(self.columns)
    }
    /// A batch of `rows`, every column filled from its declaration.
    pub fn batch(&self, rows: &[R]) -> Result<Table, String> {
        let sch = self.schema();
        let mut c = Cols::new(&sch, rows.len());
        let at: Vec<(&R, usize)> = rows.iter().map(|r| (r, 0)).collect();
        for (i, col) in self.columns.iter().enumerate() {
            c.fill(i, col, &at);
        }
        Ok((self.name, sch.clone(), c.finish(sch)?))
    }
    /// What it is, for the reference.
    pub fn about(&self) -> About {
        About {
            name: self.name,
            doc: self.doc,
            purpose: self.purpose,
            columns: self.columns.iter().map(|c| (c.name, c.ty, c.doc)).collect(),
        }
    }
}

/// A declared table as the reference and the planner see it.
#[derive(Debug, Clone)]
pub struct About {
    /// Its name in SQL.
    pub name: &'static str,
    /// What one row is.
    pub doc: &'static str,
    /// Who reads it.
    pub purpose: Purpose,
    /// Its columns: name, type and doc.
    pub columns: Vec<(&'static str, Ty, &'static str)>,
}

impl About {
    /// Its schema.
    pub fn schema(&self) -> SchemaRef {
        schema(self.columns.iter().map(|(n, t, _)| t.field(n)).collect())
    }
    /// Its reference in Markdown: a heading, what a row is, and a table of
    /// its columns.
    pub fn markdown(&self) -> String {
        let mut out = format!("#### `{}`\n\n{}\n\n", self.name, self.doc);
        out += "| Column | Type | What it holds |\n|---|---|---|\n";
        for (name, ty, doc) in &self.columns {
            out += &format!("| `{name}` | {} | {doc} |\n", ty.name());
        }
        out
    }
}

/// The schema of declared columns.
pub fn schema_of<R: ?Sized>(cols: &[Column<R>]) -> SchemaRef {
    schema(cols.iter().map(Column::field).collect())
}
