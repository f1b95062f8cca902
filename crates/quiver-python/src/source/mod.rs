//! Python objects as tables: pandas DataFrames, NumPy arrays, dicts of arrays or lists, and
//! anything that speaks the Arrow PyCapsule protocol (pyarrow, polars, ...).
//!
//! `quiver/_sources.py` (pure Python, so it follows pandas' API rather than its internals)
//! turns the object into column specs; this module wraps each column's memory as Arrow
//! without copying and serves the rows as a DataFusion table: in morsels of up to 100K rows
//! spread over parallel partitions, reading only the projected columns, stopping at a LIMIT.
//! Object columns of `str`/`bytes` are decoded per morsel on worker threads without the GIL
//! ([`strings`]), straight into string views.

pub mod arrays;
pub mod dataset;
pub mod strings;

use std::fmt;
use std::sync::{Arc, Mutex, OnceLock};

use arrow::array::{
    Array, ArrayRef, BooleanArray, RecordBatch, RecordBatchOptions, RecordBatchReader,
};
use arrow::compute::{FilterBuilder, FilterPredicate};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::ffi_stream::{ArrowArrayStreamReader, FFI_ArrowArrayStream};
use async_trait::async_trait;
use datafusion::catalog::{Session as CatalogSession, TableProvider};
use datafusion::common::config::ConfigOptions;
use datafusion::common::stats::Precision;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{DFSchema, Statistics};
use datafusion::datasource::TableType;
use datafusion::error::{DataFusionError, Result as DFResult};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::utils::conjunction;
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown};
use datafusion::physical_expr::utils::{collect_columns, reassign_expr_columns};
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::coop::make_cooperative;
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType, SchedulingType};
use datafusion::physical_plan::filter_pushdown::{
    ChildPushdownResult, FilterPushdownPhase, FilterPushdownPropagation, PushedDown,
};
use datafusion::physical_plan::metrics::{
    BaselineMetrics, ExecutionPlanMetricsSet, MetricBuilder, MetricsSet, RecordOutput,
};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
};
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyList, PyTuple};
use quiver_core::conjunction::{self, ConjunctionExpr};
use quiver_core::literal_compare;
use quiver_core::QuiverError;

use arrays::PyOwner;
use strings::ObjectKind;

use crate::errors::conversion_error;

/// Rows per morsel: big enough that per-batch overhead vanishes, small enough to balance work.
pub const MORSEL_ROWS: usize = 100_000;

/// One column's data.
enum ColumnData {
    /// Arrow arrays covering consecutive rows; `starts[i]` is the first row of `arrays[i]`.
    Chunks {
        arrays: Vec<ArrayRef>,
        starts: Vec<usize>,
    },
    /// A NumPy array of numbers, bools or datetimes, wrapped per morsel.
    Numpy(arrays::NumpyColumn),
    /// A NumPy object array of `str` or `bytes`, decoded per morsel.
    Objects {
        address: usize,
        len: usize,
        kind: ObjectKind,
        nulls: Vec<usize>,
        _owner: Arc<PyOwner>,
    },
    /// An object column converted by Python only when a scan reads it ([`Deferred`]).
    Deferred(Box<Deferred>),
}

/// An object column of bools, ints, floats, dates or datetimes: `_sources.py` typed it from its
/// first value, and [`Inner::convert_deferred`] converts it (at planning, for the columns a scan
/// reads), so a query that does not read it never pays for it.
///
/// A conversion is kept and reused while the column holds the same objects: these Python types
/// are immutable, and the conversion keeps a copy of the object array — a reference to every
/// object, so none can be freed and its address reused — so equal pointers mean equal values.
/// A value assigned in place changes a pointer, and the next scan converts again.
struct Deferred {
    /// The object array the frame holds (read for its pointers only).
    values: arrays::NumpyView,
    /// `convert(copy_of_values)` returns the column's converted spec.
    convert: Py<PyAny>,
    current: Mutex<Option<Arc<Conversion>>>,
}

/// A deferred column converted from a snapshot of its objects.
struct Conversion {
    /// A copy of the object array when it was converted (holds a reference to every object).
    snapshot: arrays::NumpyView,
    /// Never itself `Deferred`.
    column: ColumnData,
}

impl Deferred {
    /// Whether a conversion was made and the column still holds the objects it was made from.
    /// The GIL must be held: Python code cannot assign values while the pointers are read.
    fn is_current(&self, _py: Python<'_>) -> DFResult<bool> {
        let current = self.current()?;
        Ok(current.is_some_and(|conversion| {
            // SAFETY: both are live contiguous object arrays of `len` elements (the table holds
            // the column's array, the conversion its snapshot), read under the GIL.
            let (now, then) = unsafe {
                (
                    std::slice::from_raw_parts(
                        self.values.address as *const usize,
                        self.values.len,
                    ),
                    std::slice::from_raw_parts(
                        conversion.snapshot.address as *const usize,
                        conversion.snapshot.len,
                    ),
                )
            };
            now == then
        }))
    }

    fn current(&self) -> DFResult<Option<Arc<Conversion>>> {
        Ok(self.lock()?.clone())
    }

    fn lock(&self) -> DFResult<std::sync::MutexGuard<'_, Option<Arc<Conversion>>>> {
        self.current
            .lock()
            .map_err(|_| DataFusionError::Internal("a conversion lock was poisoned".into()))
    }
}

/// A column's data: the table's own, or a deferred column's current conversion.
enum Data<'a> {
    Own(&'a ColumnData),
    Converted(Arc<Conversion>),
}

impl std::ops::Deref for Data<'_> {
    type Target = ColumnData;

    fn deref(&self) -> &ColumnData {
        match self {
            Data::Own(column) => column,
            Data::Converted(conversion) => &conversion.column,
        }
    }
}

struct Inner {
    description: String,
    schema: SchemaRef,
    columns: Vec<ColumnData>,
    num_rows: usize,
    morsels: Vec<(usize, usize)>,
    /// Per column, per chunk: the chunk converted to the exposed type (LargeUtf8 → Utf8View),
    /// made on first use and kept with the table — 16 bytes a row, the string data itself is
    /// shared — so a reused table does not convert again at every query. Empty for columns
    /// that need no conversion.
    converted: Vec<Vec<OnceLock<ArrayRef>>>,
    /// The table may serve several queries (its columns read the object's own memory).
    reuse: bool,
    /// Per object column of a reusable table: its decoded strings, taken on first use.
    snapshots: Vec<OnceLock<Option<ObjectSnapshot>>>,
}

/// The strings of an object column, decoded once and reused while the column holds the same
/// objects. Python `str`/`bytes` are immutable, so the same objects mean the same strings; the
/// snapshot holds a reference to each object, so none of them can be freed and its address
/// taken by another object while the snapshot lives — equal pointers are the same objects.
/// A morsel whose pointers changed (a value assigned in place) is decoded afresh.
struct ObjectSnapshot {
    pointers: Vec<usize>,
    _references: PyOwner,
    /// Decoded morsels, by morsel index.
    decoded: Vec<OnceLock<ArrayRef>>,
}

impl ObjectSnapshot {
    /// Takes the GIL (scans run while the calling Python thread waits with it released).
    fn take(address: usize, len: usize, morsels: usize) -> Option<ObjectSnapshot> {
        Python::attach(|py| {
            // SAFETY: `address` is the data of the live object array of `len` elements the
            // table holds; with the GIL held no one changes it while it is copied.
            let pointers =
                unsafe { std::slice::from_raw_parts(address as *const usize, len) }.to_vec();
            let objects = pointers.iter().map(|&pointer| {
                // SAFETY: each element of an object array is a valid object reference;
                // from_borrowed_ptr takes a new reference to it for the list.
                unsafe { Bound::from_borrowed_ptr(py, pointer as *mut pyo3::ffi::PyObject) }
            });
            let list = PyList::new(py, objects).ok()?;
            Some(ObjectSnapshot {
                pointers,
                _references: PyOwner::new(list.as_any()),
                decoded: (0..morsels).map(|_| OnceLock::new()).collect(),
            })
        })
    }
}

/// [`Inner::converted`] for `columns` as `schema` exposes them.
fn conversion_slots(schema: &Schema, columns: &[ColumnData]) -> Vec<Vec<OnceLock<ArrayRef>>> {
    columns
        .iter()
        .zip(schema.fields())
        .map(|(column, field)| match column {
            ColumnData::Chunks { arrays, .. }
                if arrays.iter().any(|a| a.data_type() != field.data_type()) =>
            {
                arrays.iter().map(|_| OnceLock::new()).collect()
            }
            _ => Vec::new(),
        })
        .collect()
}

/// A Python object as a DataFusion table. It holds the object's arrays, not the object.
#[derive(Clone)]
pub struct PythonTable {
    inner: Arc<Inner>,
    /// Every column reads memory the object owns (or immutable Arrow data), none a conversion
    /// made for this table: the table stays right while the object's arrays are the same.
    pub live: bool,
}

impl fmt::Debug for PythonTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PythonTable")
            .field("source", &self.inner.description)
            .field("rows", &self.inner.num_rows)
            .finish()
    }
}

/// The type a table exposes for an array type: strings as views (DataFusion's fastest string
/// path), everything else unchanged.
fn exposed_type(data_type: &DataType) -> DataType {
    match data_type {
        DataType::Utf8 | DataType::LargeUtf8 => DataType::Utf8View,
        other => other.clone(),
    }
}

impl PythonTable {
    /// A table from what `quiver._sources.normalize` made of an object (the GIL is held).
    fn from_normalized(py: Python<'_>, normalized: &Bound<'_, PyTuple>) -> PyResult<PythonTable> {
        let tag: String = normalized.get_item(0)?.extract()?;
        let description: String = normalized.get_item(1)?.extract()?;
        match tag.as_str() {
            "stream" => PythonTable::from_stream(description, &normalized.get_item(2)?),
            "columns" => {
                let num_rows: usize = normalized.get_item(2)?.extract()?;
                let specs = normalized.get_item(3)?;
                let specs = specs.cast::<PyList>()?;
                let live = match normalized.get_item(4) {
                    Ok(live) => live.extract()?,
                    Err(_) => false,
                };
                PythonTable::from_columns(py, description, num_rows, specs, live)
            }
            other => Err(conversion_error(format!("unknown source kind {other}"))),
        }
    }

    fn from_stream(description: String, producer: &Bound<'_, PyAny>) -> PyResult<PythonTable> {
        let capsule = producer.call_method0("__arrow_c_stream__")?;
        let capsule = capsule.cast::<PyCapsule>()?;
        let pointer = capsule
            .pointer_checked(Some(c"arrow_array_stream"))
            .map_err(|_| conversion_error("expected an \"arrow_array_stream\" capsule".into()))?
            .as_ptr() as *mut FFI_ArrowArrayStream;
        // SAFETY: an "arrow_array_stream" capsule holds a valid stream; from_raw moves it out
        // and marks the original released, so the capsule's destructor does not free it twice.
        let reader = unsafe { ArrowArrayStreamReader::from_raw(pointer) }
            .map_err(|e| conversion_error(format!("invalid Arrow stream: {e}")))?;
        let stream_schema = reader.schema();
        let mut batches = Vec::new();
        for batch in reader {
            batches.push(
                batch.map_err(|e| conversion_error(format!("reading the Arrow stream: {e}")))?,
            );
        }
        let mut columns = Vec::with_capacity(stream_schema.fields().len());
        let mut fields = Vec::with_capacity(stream_schema.fields().len());
        let mut starts = Vec::with_capacity(batches.len());
        let mut rows = 0;
        for batch in &batches {
            starts.push(rows);
            rows += batch.num_rows();
        }
        for (index, field) in stream_schema.fields().iter().enumerate() {
            let arrays = batches
                .iter()
                .map(|b| Arc::clone(b.column(index)))
                .collect();
            columns.push(ColumnData::Chunks {
                arrays,
                starts: starts.clone(),
            });
            fields.push(
                field
                    .as_ref()
                    .clone()
                    .with_data_type(exposed_type(field.data_type())),
            );
        }
        // Morsels follow the batches (no copies at chunk boundaries), split when too large.
        let mut morsels = Vec::new();
        for batch in &batches {
            let start = morsels
                .last()
                .map(|(s, l): &(usize, usize)| s + l)
                .unwrap_or(0);
            let mut offset = 0;
            while offset < batch.num_rows() {
                let len = MORSEL_ROWS.min(batch.num_rows() - offset);
                morsels.push((start + offset, len));
                offset += len;
            }
        }
        let schema = Schema::new_with_metadata(fields, stream_schema.metadata().clone());
        let converted = conversion_slots(&schema, &columns);
        Ok(PythonTable {
            inner: Arc::new(Inner {
                description,
                schema: Arc::new(schema),
                columns,
                num_rows: rows,
                morsels,
                converted,
                reuse: false,
                snapshots: Vec::new(),
            }),
            live: true,
        })
    }

    fn from_columns(
        py: Python<'_>,
        description: String,
        num_rows: usize,
        specs: &Bound<'_, PyList>,
        live: bool,
    ) -> PyResult<PythonTable> {
        let mut fields = Vec::with_capacity(specs.len());
        let mut columns = Vec::with_capacity(specs.len());
        let mut names = std::collections::HashSet::new();
        for spec in specs.iter() {
            let spec = spec.cast::<PyTuple>()?;
            let name: String = spec.get_item(1)?.extract()?;
            if !names.insert(name.clone()) {
                return Err(crate::errors::invalid_input(format!(
                    "duplicate column name \"{name}\": rename the columns so each is unique"
                )));
            }
            let (column, data_type) = if spec.get_item(0)?.extract::<String>()? == "deferred" {
                // ("deferred", name, sample_spec, convert, values)
                let sample = spec.get_item(2)?;
                let (_, data_type) = column_from_spec(py, &name, sample.cast::<PyTuple>()?)?;
                let values = arrays::NumpyView::new(&name, &spec.get_item(4)?)?;
                if !values.typestr.ends_with('O') {
                    return Err(conversion_error(format!(
                        "column \"{name}\": expected an object array"
                    )));
                }
                let deferred = Deferred {
                    values,
                    convert: spec.get_item(3)?.unbind(),
                    current: Mutex::new(None),
                };
                (ColumnData::Deferred(Box::new(deferred)), data_type)
            } else {
                column_from_spec(py, &name, spec)?
            };
            let len = column_len(&column);
            if len != num_rows {
                return Err(conversion_error(format!(
                    "column \"{name}\" has {len} rows, the table {num_rows}"
                )));
            }
            fields.push(Field::new(&name, data_type, true));
            columns.push(column);
        }
        let morsels = morsels(num_rows, &columns);
        let schema = Schema::new(fields);
        let converted = conversion_slots(&schema, &columns);
        let snapshots = columns.iter().map(|_| OnceLock::new()).collect();
        Ok(PythonTable {
            inner: Arc::new(Inner {
                description,
                schema: Arc::new(schema),
                columns,
                num_rows,
                morsels,
                converted,
                reuse: live,
                snapshots,
            }),
            live,
        })
    }
}

/// Morsels of up to [`MORSEL_ROWS`] rows that never cross a boundary between the chunks of an
/// Arrow-backed column (a pandas column read from Parquet has one chunk per row group), so a
/// morsel is a zero-copy slice of every column instead of a concatenation. Columns chunked
/// differently from each other could cut the rows into slivers; then plain morsels it is.
fn morsels(num_rows: usize, columns: &[ColumnData]) -> Vec<(usize, usize)> {
    let mut boundaries: Vec<usize> = columns
        .iter()
        .filter_map(|column| match column {
            ColumnData::Chunks { starts, .. } if starts.len() > 1 => Some(starts.iter().copied()),
            _ => None,
        })
        .flatten()
        .filter(|&start| start > 0 && start < num_rows)
        .collect();
    boundaries.sort_unstable();
    boundaries.dedup();
    if boundaries.len() > 2 * num_rows.div_ceil(MORSEL_ROWS) + 16 {
        boundaries.clear();
    }
    boundaries.push(num_rows);
    let mut morsels = Vec::new();
    let mut start = 0;
    for end in boundaries {
        while start < end {
            let len = MORSEL_ROWS.min(end - start);
            morsels.push((start, len));
            start += len;
        }
    }
    morsels
}

/// Any supported Python object as a table, and whether the table may be reused by later
/// queries (see `quiver._sources.table`). A pyarrow Dataset is read lazily, when scanned.
pub fn table_from_python(
    py: Python<'_>,
    object: &Bound<'_, PyAny>,
) -> PyResult<(Arc<dyn TableProvider>, bool)> {
    let sources = py.import("quiver._sources")?;
    let normalized = sources.call_method1("normalize", (object,))?;
    let normalized = normalized.cast::<PyTuple>()?;
    let tag: String = normalized.get_item(0)?.extract()?;
    if tag == "dataset" {
        let description: String = normalized.get_item(1)?.extract()?;
        let table = dataset::DatasetTable::new(py, &normalized.get_item(2)?, description)?;
        return Ok((Arc::new(table), false));
    }
    let table = PythonTable::from_normalized(py, normalized)?;
    let live = table.live;
    Ok((Arc::new(table), live))
}

fn column_len(column: &ColumnData) -> usize {
    match column {
        ColumnData::Chunks { arrays, starts } => match (arrays.last(), starts.last()) {
            (Some(array), Some(start)) => start + array.len(),
            _ => 0,
        },
        ColumnData::Numpy(column) => column.len(),
        ColumnData::Objects { len, .. } => *len,
        ColumnData::Deferred(deferred) => deferred.values.len,
    }
}

/// One column spec from `_sources.py` → its data and the type the table exposes.
fn column_from_spec(
    py: Python<'_>,
    name: &str,
    spec: &Bound<'_, PyTuple>,
) -> PyResult<(ColumnData, DataType)> {
    let kind: String = spec.get_item(0)?.extract()?;
    let single = |array: ArrayRef| {
        let data_type = exposed_type(array.data_type());
        (
            ColumnData::Chunks {
                arrays: vec![array],
                starts: vec![0],
            },
            data_type,
        )
    };
    match kind.as_str() {
        // ("numpy", name, array, mask, tz, nan_as_null)
        "numpy" => {
            let mask = spec.get_item(3)?;
            let tz: Option<String> = spec.get_item(4)?.extract()?;
            let nan_as_null: bool = spec.get_item(5)?.extract()?;
            let column =
                arrays::NumpyColumn::new(name, &spec.get_item(2)?, Some(&mask), tz, nan_as_null)?;
            let data_type = exposed_type(column.data_type());
            Ok((ColumnData::Numpy(column), data_type))
        }
        // ("objects", name, array, "str" | "bytes", [null sentinels])
        "objects" => {
            let array = spec.get_item(2)?;
            let view = arrays::NumpyView::new(name, &array)?;
            if !view.typestr.ends_with('O') {
                return Err(conversion_error(format!(
                    "column \"{name}\": expected an object array"
                )));
            }
            let kind = match spec.get_item(3)?.extract::<String>()?.as_str() {
                "bytes" => ObjectKind::Bytes,
                _ => ObjectKind::Str,
            };
            let nulls: Vec<usize> = spec
                .get_item(4)?
                .cast::<PyList>()?
                .iter()
                .map(|o| o.as_ptr() as usize)
                .collect();
            strings::init(py);
            let data_type = match kind {
                ObjectKind::Str => DataType::Utf8View,
                ObjectKind::Bytes => DataType::BinaryView,
            };
            Ok((
                ColumnData::Objects {
                    address: view.address,
                    len: view.len,
                    kind,
                    nulls,
                    _owner: Arc::new(PyOwner::new(&array)),
                },
                data_type,
            ))
        }
        // ("arrow", name, [chunks with __arrow_c_array__])
        "arrow" => {
            let chunks = spec.get_item(2)?;
            let chunks = chunks.cast::<PyList>()?;
            let mut arrays = Vec::with_capacity(chunks.len());
            let mut starts = Vec::with_capacity(chunks.len());
            let mut rows = 0;
            for chunk in chunks.iter() {
                let array = arrays::import_c_array(name, &chunk)?;
                starts.push(rows);
                rows += array.len();
                arrays.push(array);
            }
            let data_type = match arrays.first() {
                Some(array) => exposed_type(array.data_type()),
                None => DataType::Null,
            };
            Ok((ColumnData::Chunks { arrays, starts }, data_type))
        }
        // ("categorical", name, codes, categories_spec)
        "categorical" => {
            let categories = spec.get_item(3)?;
            let categories = categories.cast::<PyTuple>()?;
            let (values, _) = column_from_spec(py, name, categories)?;
            let values = match values {
                ColumnData::Chunks { arrays, .. } => match arrays.as_slice() {
                    [one] => Arc::clone(one),
                    many => {
                        let refs: Vec<&dyn Array> = many.iter().map(|a| a.as_ref()).collect();
                        arrow::compute::concat(&refs)
                            .map_err(|e| conversion_error(format!("column \"{name}\": {e}")))?
                    }
                },
                ColumnData::Numpy(column) => {
                    column.slice(0, column.len()).map_err(conversion_error)?
                }
                ColumnData::Objects {
                    address,
                    len,
                    kind,
                    nulls,
                    ..
                } => decode_objects(name, address, 0, len, kind, &nulls)
                    .map_err(|e| conversion_error(e.to_string()))?,
                ColumnData::Deferred(_) => {
                    return Err(conversion_error(format!(
                        "column \"{name}\": categories must be converted before the codes"
                    )))
                }
            };
            let array = arrays::dictionary_array(name, &spec.get_item(2)?, values)?;
            let data_type = array.data_type().clone();
            Ok((
                ColumnData::Chunks {
                    arrays: vec![array],
                    starts: vec![0],
                },
                data_type,
            ))
        }
        // ("decimal", name, [int | None], precision, scale)
        "decimal" => {
            let precision: u8 = spec.get_item(3)?.extract()?;
            let scale: i8 = spec.get_item(4)?.extract()?;
            let array = arrays::decimal_array(name, &spec.get_item(2)?, precision, scale)?;
            Ok(single(array))
        }
        other => Err(conversion_error(format!(
            "column \"{name}\": unknown column kind {other}"
        ))),
    }
}

fn decode_objects(
    column: &str,
    address: usize,
    start: usize,
    len: usize,
    kind: ObjectKind,
    nulls: &[usize],
) -> DFResult<ArrayRef> {
    if len == 0 {
        return Ok(match kind {
            ObjectKind::Str => Arc::new(arrow::array::StringViewArray::new_null(0)),
            ObjectKind::Bytes => Arc::new(arrow::array::BinaryViewArray::new_null(0)),
        });
    }
    // SAFETY: `address` is the data of a live object array of at least `start + len` elements
    // (the table holds the array; morsels never exceed the row count).
    let objects = unsafe { std::slice::from_raw_parts((address as *const usize).add(start), len) };
    strings::decode(objects, start, kind, nulls).map_err(|error| objects_error(column, kind, error))
}

fn objects_error(column: &str, kind: ObjectKind, error: strings::DecodeError) -> DataFusionError {
    let message = match error {
        strings::DecodeError::WrongType { row, type_name } => {
            let expected = match kind {
                ObjectKind::Str => "str",
                ObjectKind::Bytes => "bytes",
            };
            format!(
                "column \"{column}\", row {row}: expected {expected} (or None), got a Python {type_name}"
            )
        }
        strings::DecodeError::Surrogate { row } => format!(
            "column \"{column}\", row {row}: the string holds a lone surrogate, which has no UTF-8 form"
        ),
    };
    QuiverError::Conversion(message).into_datafusion()
}

impl Inner {
    /// Rows `start..start + len` of column `index`, as the table's schema types it.
    fn column(&self, index: usize, start: usize, len: usize) -> DFResult<ArrayRef> {
        let field = self.schema.field(index);
        let data = self.data(index)?;
        let array = match &*data {
            ColumnData::Chunks { arrays, starts } => {
                let slots = &self.converted[index];
                if slots.is_empty() {
                    slice_chunks(starts, start, len, |i| Ok(Arc::clone(&arrays[i])))?
                } else {
                    slice_chunks(starts, start, len, |i| {
                        if let Some(done) = slots[i].get() {
                            return Ok(Arc::clone(done));
                        }
                        let converted = exposed(Arc::clone(&arrays[i]), field.data_type())?;
                        // Another partition may have won the race; either result is the same.
                        Ok(Arc::clone(slots[i].get_or_init(|| converted)))
                    })?
                }
            }
            ColumnData::Numpy(column) => column
                .slice(start, len)
                .map_err(|e| QuiverError::Conversion(e).into_datafusion())?,
            ColumnData::Objects {
                address,
                len: rows,
                kind,
                nulls,
                ..
            } => match self.snapshot_morsel(index, *address, *rows, start, len, true) {
                Some((snapshot, morsel)) => match snapshot.decoded[morsel].get() {
                    Some(done) => Arc::clone(done),
                    None => {
                        let objects = &snapshot.pointers[start..start + len];
                        let array = strings::decode(objects, start, *kind, nulls)
                            .map_err(|e| objects_error(field.name(), *kind, e))?;
                        Arc::clone(snapshot.decoded[morsel].get_or_init(|| array))
                    }
                },
                None => decode_objects(field.name(), *address, start, len, *kind, nulls)?,
            },
            ColumnData::Deferred(_) => return Err(not_converted(field.name())),
        };
        exposed(array, field.data_type())
    }

    /// Column `index`'s data; for a deferred column, its current conversion.
    fn data(&self, index: usize) -> DFResult<Data<'_>> {
        match &self.columns[index] {
            ColumnData::Deferred(deferred) => match deferred.current()? {
                Some(conversion) => Ok(Data::Converted(conversion)),
                None => Err(not_converted(self.schema.field(index).name())),
            },
            column => Ok(Data::Own(column)),
        }
    }

    /// Converts the deferred columns among `columns` that have no conversion of their current
    /// objects. Takes the GIL (planning runs while the calling Python thread waits with it
    /// released); a conversion error (a mixed column) is a `ConversionError` naming the column
    /// and row.
    fn convert_deferred(&self, columns: &[usize]) -> DFResult<()> {
        for &index in columns {
            let ColumnData::Deferred(deferred) = &self.columns[index] else {
                continue;
            };
            if Python::attach(|py| deferred.is_current(py))? {
                continue;
            }
            let field = self.schema.field(index);
            let conversion = Python::attach(|py| -> PyResult<Conversion> {
                // Convert a copy, so the snapshot is exactly what was converted even if Python
                // code runs (and assigns values) while the conversion does.
                let copy = deferred.values.owner.object(py).call_method0("copy")?;
                let snapshot = arrays::NumpyView::new(field.name(), &copy)?;
                let spec = deferred.convert.bind(py).call1((copy,))?;
                let (column, data_type) =
                    column_from_spec(py, field.name(), spec.cast::<PyTuple>()?)?;
                let len = deferred.values.len;
                if &data_type != field.data_type() || column_len(&column) != len {
                    return Err(conversion_error(format!(
                        "column \"{}\": converted to {} rows of {data_type}, expected {len} of {}",
                        field.name(),
                        column_len(&column),
                        field.data_type()
                    )));
                }
                Ok(Conversion { snapshot, column })
            })
            .map_err(|error| {
                Python::attach(|py| {
                    if error.is_instance_of::<pyo3::exceptions::PyKeyboardInterrupt>(py) {
                        // Ctrl-C during the conversion (it runs on the waiting thread): make it
                        // pending again, so the caller raises it as KeyboardInterrupt.
                        // SAFETY: PyErr_SetInterrupt only sets a flag; it may be called anytime.
                        unsafe { pyo3::ffi::PyErr_SetInterrupt() };
                        return QuiverError::Cancelled.into_datafusion();
                    }
                    let value = error.value(py);
                    // quiver's own ConversionError says what is wrong; anything else also
                    // names the exception's type.
                    let message = match value.get_type().name() {
                        Ok(name) if name == "ConversionError" => value.to_string(),
                        Ok(name) => format!("column \"{}\": {name}: {value}", field.name()),
                        Err(_) => value.to_string(),
                    };
                    QuiverError::Conversion(message).into_datafusion()
                })
            })?;
            *deferred.lock()? = Some(Arc::new(conversion));
        }
        Ok(())
    }

    /// For a whole morsel of object column `index` of a reusable table: the column's snapshot
    /// and the morsel's index in it, if the morsel's objects are still the snapshot's. With
    /// `take`, a column without a snapshot gets one now (its first full decode); without, only
    /// an existing snapshot is looked at — taking one holds the GIL to reference every object
    /// of the column, which a scan that decodes a few selected rows must not pay for.
    fn snapshot_morsel(
        &self,
        index: usize,
        address: usize,
        rows: usize,
        start: usize,
        len: usize,
        take: bool,
    ) -> Option<(&ObjectSnapshot, usize)> {
        if !self.reuse {
            return None;
        }
        let morsel = self.morsels.binary_search(&(start, len)).ok()?;
        let slot = self.snapshots.get(index)?;
        let snapshot = if take {
            slot.get_or_init(|| ObjectSnapshot::take(address, rows, self.morsels.len()))
        } else {
            slot.get()?
        };
        let snapshot = snapshot.as_ref()?;
        // SAFETY: the table holds the live object array; the morsel is within its rows.
        let now = unsafe { std::slice::from_raw_parts((address as *const usize).add(start), len) };
        (now == &snapshot.pointers[start..start + len]).then_some((snapshot, morsel))
    }

    /// The rows of `start..start + len` that `mask` selects, of column `index`: only those rows
    /// are cast or decoded.
    fn selected(
        &self,
        index: usize,
        start: usize,
        len: usize,
        mask: &BooleanArray,
        predicate: &FilterPredicate,
    ) -> DFResult<ArrayRef> {
        let field = self.schema.field(index);
        let data = self.data(index)?;
        let array = match &*data {
            ColumnData::Chunks { arrays, starts } => {
                let slots = &self.converted[index];
                // Chunks converted by an earlier query are used as they are; otherwise only the
                // selected rows are converted (by `exposed` below). All or none: a morsel
                // crossing chunks must not mix types.
                let converted = !slots.is_empty() && slots.iter().all(|slot| slot.get().is_some());
                predicate.filter(&slice_chunks(starts, start, len, |i| {
                    Ok(match slots.get(i).and_then(|slot| slot.get()) {
                        Some(done) if converted => Arc::clone(done),
                        _ => Arc::clone(&arrays[i]),
                    })
                })?)?
            }
            ColumnData::Numpy(column) => column
                .select(start, len, predicate)
                .map_err(|e| QuiverError::Conversion(e).into_datafusion())?,
            ColumnData::Objects {
                address,
                len: rows,
                kind,
                nulls,
                ..
            } if self
                .snapshot_morsel(index, *address, *rows, start, len, false)
                .is_some_and(|(snapshot, morsel)| snapshot.decoded[morsel].get().is_some()) =>
            {
                predicate.filter(&self.column(index, start, len)?)?
            }
            ColumnData::Objects {
                address,
                kind,
                nulls,
                ..
            } => {
                // SAFETY: as in decode_objects: the table holds the live object array, and the
                // morsel is within its rows.
                let objects = unsafe {
                    std::slice::from_raw_parts((*address as *const usize).add(start), len)
                };
                let gathered: Vec<usize> = mask
                    .values()
                    .set_indices()
                    .map(|row| objects[row])
                    .collect();
                match strings::decode(&gathered, start, *kind, nulls) {
                    Ok(array) => array,
                    // Decode the whole morsel to name the right row.
                    Err(_) => predicate.filter(&decode_objects(
                        field.name(),
                        *address,
                        start,
                        len,
                        *kind,
                        nulls,
                    )?)?,
                }
            }
            ColumnData::Deferred(_) => return Err(not_converted(field.name())),
        };
        exposed(array, field.data_type())
    }

    /// The rows `start..start + len` of the projected columns.
    fn batch(
        &self,
        projection: &[usize],
        schema: &SchemaRef,
        start: usize,
        len: usize,
    ) -> DFResult<RecordBatch> {
        let columns = projection
            .iter()
            .map(|&index| self.column(index, start, len))
            .collect::<DFResult<Vec<_>>>()?;
        let options = RecordBatchOptions::new().with_row_count(Some(len));
        Ok(RecordBatch::try_new_with_options(
            Arc::clone(schema),
            columns,
            &options,
        )?)
    }

    /// The rows of `start..start + len` that pass every one of `filters` (at least one), or
    /// None if no row does. The filters' columns are read first; the other projected columns
    /// only for the rows that passed (late materialisation: `SELECT * ... WHERE` decodes few
    /// strings, and `ORDER BY t LIMIT 10` reads the other columns only for rows within the
    /// TopK's current bound). Within an `AND` chain, a NumPy column is read only for the rows
    /// the conjuncts before it kept ([`ConjunctionExpr::evaluate_lazily`]).
    fn filtered_batch(
        &self,
        projection: &[usize],
        schema: &SchemaRef,
        filters: &[Arc<ScanFilter>],
        start: usize,
        len: usize,
    ) -> DFResult<Option<RecordBatch>> {
        // The filters run in turn; each after the first only while some row passes.
        // Columns the first filter read for every row, to be filtered rather than read again.
        let mut whole: Vec<(usize, ArrayRef)> = Vec::new();
        let mut mask: Option<BooleanArray> = None;
        let mut selected = 0;
        for (position, filter) in filters.iter().enumerate() {
            if let (0, Some(progressive)) =
                (position, filter.predicate.downcast_ref::<ConjunctionExpr>())
            {
                // Each conjunct's columns are read when it runs, for the rows still passing.
                let passed = progressive.evaluate_lazily(&filter.schema, len, |column, rows| {
                    let Some(&index) = filter.columns.get(column) else {
                        return Err(DataFusionError::Internal(format!(
                            "filter column {column} is not among the scan filter's {} columns",
                            filter.columns.len()
                        )));
                    };
                    if let (Some(rows), ColumnData::Numpy(_)) = (rows, &*self.data(index)?) {
                        // Only the rows still passing, NaT and NaN checked on them alone.
                        return self.selected(index, start, len, &rows.mask, &rows.predicate);
                    }
                    // Other columns are read whole, so that their conversion (to string views,
                    // from Python objects) is kept for the next query.
                    let array = self.column(index, start, len)?;
                    whole.push((index, Arc::clone(&array)));
                    Ok(match rows {
                        None => array,
                        Some(rows) => rows.predicate.filter(&array)?,
                    })
                })?;
                selected = passed.true_count();
                if selected == 0 {
                    return Ok(None);
                }
                mask = Some(passed);
                continue;
            }
            let inputs = filter
                .columns
                .iter()
                .map(|&index| self.column(index, start, len))
                .collect::<DFResult<Vec<_>>>()?;
            let options = RecordBatchOptions::new().with_row_count(Some(len));
            let batch =
                RecordBatch::try_new_with_options(Arc::clone(&filter.schema), inputs, &options)?;
            let passed = conjunction::mask(filter.predicate.evaluate(&batch)?, len)?;
            let passed = match mask {
                Some(earlier) => arrow::compute::and(&earlier, &passed)?,
                None => passed,
            };
            selected = passed.true_count();
            if selected == 0 {
                return Ok(None);
            }
            mask = Some(passed);
            if position == 0 {
                whole = filter
                    .columns
                    .iter()
                    .copied()
                    .zip(batch.columns().iter().cloned())
                    .collect();
            }
        }
        let Some(mask) = mask else {
            return Ok(Some(self.batch(projection, schema, start, len)?));
        };
        let input_column = |index: usize| {
            whole
                .iter()
                .find(|(column, _)| *column == index)
                .map(|(_, array)| array)
        };
        let mut columns = Vec::with_capacity(projection.len());
        if selected == len {
            for &index in projection {
                columns.push(match input_column(index) {
                    Some(column) => Arc::clone(column),
                    None => self.column(index, start, len)?,
                });
            }
        } else if !projection.is_empty() {
            // Optimising the predicate (precomputed slices or indices) pays off only when it
            // filters more than one column.
            let builder = FilterBuilder::new(&mask);
            let predicate = if projection.len() > 1 {
                builder.optimize().build()
            } else {
                builder.build()
            };
            for &index in projection {
                columns.push(match input_column(index) {
                    Some(column) => predicate.filter(column)?,
                    None => self.selected(index, start, len, &mask, &predicate)?,
                });
            }
        }
        let options = RecordBatchOptions::new().with_row_count(Some(selected));
        Ok(Some(RecordBatch::try_new_with_options(
            Arc::clone(schema),
            columns,
            &options,
        )?))
    }
}

fn not_converted(column: &str) -> DataFusionError {
    DataFusionError::Internal(format!(
        "column \"{column}\" was read before its conversion from Python objects"
    ))
}

/// An array as the table exposes its type (string views for strings).
fn exposed(array: ArrayRef, data_type: &DataType) -> DFResult<ArrayRef> {
    if array.data_type() == data_type {
        Ok(array)
    } else {
        Ok(arrow::compute::cast(&array, data_type)?)
    }
}

/// Filters pushed into a scan, as one predicate over the columns it reads. The pushdown is
/// `Exact`: no filter runs above the scan, so every pushed filter must be applied here.
struct ScanFilter {
    /// Table column indices the predicate reads, in `schema`'s order.
    columns: Vec<usize>,
    schema: SchemaRef,
    predicate: Arc<dyn PhysicalExpr>,
    display: String,
}

impl ScanFilter {
    /// None when there is no filter; an error when one cannot be planned (it must not be
    /// dropped: DataFusion counts on the scan to apply it).
    fn new(
        state: &dyn CatalogSession,
        table: &Schema,
        filters: &[Expr],
    ) -> DFResult<Option<ScanFilter>> {
        let Some(conjunction) = conjunction(filters.iter().cloned()) else {
            return Ok(None);
        };
        let mut columns = Vec::new();
        for column in conjunction.column_refs() {
            columns.push(table.index_of(column.name())?);
        }
        columns.sort_unstable();
        columns.dedup();
        let schema = Arc::new(table.project(&columns)?);
        let df_schema = DFSchema::try_from(Arc::clone(&schema))?;
        let predicate = state.create_physical_expr(conjunction.clone(), &df_schema)?;
        let predicate = literal_compare::rewrite(predicate)?.data;
        // NULL is false here as in a filter, so an AND chain can run as one progressive pass.
        let predicate = match ConjunctionExpr::try_new(&predicate)? {
            Some(progressive) => Arc::new(progressive),
            None => predicate,
        };
        Ok(Some(ScanFilter {
            columns,
            schema,
            predicate,
            display: conjunction.to_string(),
        }))
    }

    /// A filter a parent operator hands the scan while the query runs — a TopK's current
    /// bound, a hash join's build-side keys — over the scan's `output` columns. The scan
    /// applies it to skip rows before reading the other columns; the parent still applies it
    /// itself, so it may be looser than exact.
    fn runtime(
        table: &Schema,
        output: &Schema,
        predicate: &Arc<dyn PhysicalExpr>,
    ) -> DFResult<ScanFilter> {
        let mut columns = Vec::new();
        for column in collect_columns(predicate) {
            let Some(field) = output.fields().get(column.index()) else {
                return Err(DataFusionError::Internal(format!(
                    "runtime filter column {column} is not among the scan's {} columns",
                    output.fields().len()
                )));
            };
            columns.push(table.index_of(field.name())?);
        }
        columns.sort_unstable();
        columns.dedup();
        let schema = Arc::new(table.project(&columns)?);
        let display = predicate.to_string();
        let predicate = reassign_expr_columns(Arc::clone(predicate), &schema)?;
        Ok(ScanFilter {
            columns,
            schema,
            predicate,
            display,
        })
    }
}

/// Rows `start..start + len` of a chunked column (`chunk(i)` is its i-th chunk, `starts[i]` that
/// chunk's first row): a zero-copy slice within one chunk, a concatenation only where the range
/// crosses chunks.
fn slice_chunks(
    starts: &[usize],
    start: usize,
    len: usize,
    chunk: impl Fn(usize) -> DFResult<ArrayRef>,
) -> DFResult<ArrayRef> {
    let first = match starts.binary_search(&start) {
        Ok(index) => index,
        Err(index) => index.saturating_sub(1),
    };
    let mut pieces: Vec<ArrayRef> = Vec::new();
    let mut row = start;
    let end = start + len;
    for (index, &chunk_start) in starts.iter().enumerate().skip(first) {
        if row >= end {
            break;
        }
        let array = chunk(index)?;
        let chunk_end = chunk_start + array.len();
        if chunk_end <= row {
            continue;
        }
        let take = chunk_end.min(end) - row;
        pieces.push(array.slice(row - chunk_start, take));
        row += take;
    }
    match pieces.as_slice() {
        [one] => Ok(Arc::clone(one)),
        [] => Err(DataFusionError::Internal(format!(
            "rows {start}..{end} are outside the column"
        ))),
        many => {
            let refs: Vec<&dyn Array> = many.iter().map(|a| a.as_ref()).collect();
            Ok(arrow::compute::concat(&refs)?)
        }
    }
}

#[async_trait]
impl TableProvider for PythonTable {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.inner.schema)
    }

    fn table_type(&self) -> TableType {
        TableType::Temporary
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> DFResult<Vec<TableProviderFilterPushDown>> {
        // Exact: the scan evaluates the filter with DataFusion's own physical expression (NULL
        // counts as false, as in a WHERE), so no FilterExec is needed above it. Volatile filters
        // (random()) stay above, where they run once per row as written.
        Ok(filters
            .iter()
            .map(|filter| {
                if filter.is_volatile() {
                    TableProviderFilterPushDown::Unsupported
                } else {
                    TableProviderFilterPushDown::Exact
                }
            })
            .collect())
    }

    async fn scan(
        &self,
        state: &dyn CatalogSession,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> DFResult<Arc<dyn ExecutionPlan>> {
        let filter = ScanFilter::new(state, &self.inner.schema, filters)?.map(Arc::new);
        let projection: Vec<usize> = match projection {
            Some(projection) => projection.clone(),
            None => (0..self.inner.schema.fields().len()).collect(),
        };
        // Only the columns this scan reads are converted from Python objects.
        self.inner.convert_deferred(&projection)?;
        if let Some(filter) = &filter {
            self.inner.convert_deferred(&filter.columns)?;
        }
        let schema = Arc::new(self.inner.schema.project(&projection)?);
        let morsels = &self.inner.morsels;
        let partitions = state
            .config_options()
            .execution
            .target_partitions
            .clamp(1, morsels.len().max(1));
        let mut assigned = vec![Vec::new(); partitions];
        for (index, morsel) in morsels.iter().enumerate() {
            assigned[index % partitions].push(*morsel);
        }
        let properties = PlanProperties::new(
            EquivalenceProperties::new(Arc::clone(&schema)),
            Partitioning::UnknownPartitioning(partitions),
            EmissionType::Incremental,
            Boundedness::Bounded,
        )
        // Its stream yields to the runtime (`make_cooperative`), so an abandoned query stops.
        .with_scheduling_type(SchedulingType::Cooperative);
        Ok(Arc::new(PythonScanExec {
            inner: Arc::clone(&self.inner),
            projection,
            schema,
            partitions: assigned,
            limit,
            filter,
            runtime_filters: Vec::new(),
            properties: Arc::new(properties),
            metrics: ExecutionPlanMetricsSet::new(),
        }))
    }

    fn get_table_definition(&self) -> Option<&str> {
        None
    }

    fn statistics(&self) -> Option<Statistics> {
        let mut statistics = Statistics::new_unknown(&self.inner.schema);
        statistics.num_rows = Precision::Exact(self.inner.num_rows);
        Some(statistics)
    }
}

/// `batches` as EXPLAIN ANALYZE shows them in `baseline`: the time spent producing each
/// batch (`elapsed_compute`), and the rows, bytes and batches produced.
fn measured(
    mut batches: impl Iterator<Item = DFResult<RecordBatch>>,
    baseline: BaselineMetrics,
) -> impl Iterator<Item = DFResult<RecordBatch>> {
    std::iter::from_fn(move || {
        let timer = baseline.elapsed_compute().timer();
        let batch = batches.next();
        timer.done();
        if let Some(Ok(batch)) = &batch {
            batch.record_output(&baseline);
        } else {
            // The end, or an error: the partition's end time is now.
            baseline.done();
        }
        batch
    })
}

/// Joins the small batches a filtered scan yields (the rows of one morsel that passed) into
/// batches of about `target` rows; a batch of `target` rows or more passes as it is. Each batch
/// a partition yields crosses to another thread (the partitions' merge): ClickBench's Q19
/// (`WHERE UserID = …`, 29,000 of 5M rows) yielded 75 batches of 400 rows, and the wake-ups
/// took more CPU than the comparisons.
///
/// Not Arrow's `BatchCoalescer`: it copies every row into batches of exactly `target` rows,
/// so a large batch arriving after a few small ones would be cut up and copied whole, where
/// here it passes untouched (and the small ones' string views keep their buffers).
fn coalesced(
    mut batches: impl Iterator<Item = DFResult<RecordBatch>>,
    schema: SchemaRef,
    target: usize,
) -> impl Iterator<Item = DFResult<RecordBatch>> {
    let mut pending: Vec<RecordBatch> = Vec::new();
    let mut rows = 0;
    // A large batch that arrived while small ones were pending: next after them.
    let mut ready: Option<RecordBatch> = None;
    let mut done = false;
    let join = move |pending: &mut Vec<RecordBatch>, rows: &mut usize| {
        *rows = 0;
        let joined = match pending.as_slice() {
            [one] => Ok(one.clone()),
            many => arrow::compute::concat_batches(&schema, many).map_err(DataFusionError::from),
        };
        pending.clear();
        joined
    };
    std::iter::from_fn(move || {
        if let Some(batch) = ready.take() {
            return Some(Ok(batch));
        }
        while !done {
            match batches.next() {
                Some(Ok(batch)) if batch.num_rows() >= target => {
                    if pending.is_empty() {
                        return Some(Ok(batch));
                    }
                    ready = Some(batch);
                    return Some(join(&mut pending, &mut rows));
                }
                Some(Ok(batch)) => {
                    rows += batch.num_rows();
                    pending.push(batch);
                    if rows >= target {
                        return Some(join(&mut pending, &mut rows));
                    }
                }
                Some(Err(error)) => {
                    done = true;
                    pending.clear();
                    return Some(Err(error));
                }
                None => done = true,
            }
        }
        (!pending.is_empty()).then(|| join(&mut pending, &mut rows))
    })
}

/// The scan of a [`PythonTable`].
#[derive(Clone)]
struct PythonScanExec {
    inner: Arc<Inner>,
    projection: Vec<usize>,
    schema: SchemaRef,
    partitions: Vec<Vec<(usize, usize)>>,
    limit: Option<usize>,
    filter: Option<Arc<ScanFilter>>,
    /// Filters handed down by parents at run time (see [`ScanFilter::runtime`]).
    runtime_filters: Vec<Arc<ScanFilter>>,
    properties: Arc<PlanProperties>,
    /// What EXPLAIN ANALYZE shows: the rows returned, the time spent wrapping, decoding and
    /// filtering the morsels (`elapsed_compute`), and the rows read before the pushed filters
    /// (`rows_read`).
    metrics: ExecutionPlanMetricsSet,
}

impl fmt::Debug for PythonScanExec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PythonScanExec")
            .field("source", &self.inner.description)
            .finish()
    }
}

impl DisplayAs for PythonScanExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let columns: Vec<&str> = self
            .projection
            .iter()
            .map(|&i| self.inner.schema.field(i).name().as_str())
            .collect();
        write!(
            f,
            "PythonScan: {}, rows={}, partitions={}, projection=[{}]",
            self.inner.description,
            self.inner.num_rows,
            self.partitions.len(),
            columns.join(", ")
        )?;
        if let Some(filter) = &self.filter {
            write!(f, ", filter=[{}]", filter.display)?;
        }
        for filter in &self.runtime_filters {
            write!(f, ", runtime_filter=[{}]", filter.display)?;
        }
        if let Some(limit) = self.limit {
            write!(f, ", limit={limit}")?;
        }
        Ok(())
    }
}

impl ExecutionPlan for PythonScanExec {
    fn name(&self) -> &'static str {
        "PythonScanExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        Vec::new()
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> DFResult<TreeNodeRecursion>,
    ) -> DFResult<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn with_new_children(
        self: Arc<Self>,
        _children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> DFResult<Arc<dyn ExecutionPlan>> {
        Ok(self)
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> DFResult<SendableRecordBatchStream> {
        let morsels = self.partitions.get(partition).cloned().ok_or_else(|| {
            DataFusionError::Internal(format!("PythonScanExec has no partition {partition}"))
        })?;
        let inner = Arc::clone(&self.inner);
        let projection = self.projection.clone();
        let schema = Arc::clone(&self.schema);
        let batch_schema = Arc::clone(&schema);
        let filters: Vec<Arc<ScanFilter>> = self
            .filter
            .iter()
            .chain(self.runtime_filters.iter())
            .cloned()
            .collect();
        let baseline = BaselineMetrics::new(&self.metrics, partition);
        let rows_read = MetricBuilder::new(&self.metrics).counter("rows_read", partition);
        let mut remaining = self.limit.unwrap_or(usize::MAX);
        let mut morsels = morsels.into_iter();
        let next = move || {
            while remaining > 0 {
                let (start, len) = morsels.next()?;
                if filters.is_empty() {
                    let len = len.min(remaining);
                    remaining -= len;
                    rows_read.add(len);
                    return Some(inner.batch(&projection, &batch_schema, start, len));
                }
                rows_read.add(len);
                match inner.filtered_batch(&projection, &batch_schema, &filters, start, len) {
                    Ok(None) => continue,
                    Ok(Some(batch)) => {
                        let rows = batch.num_rows().min(remaining);
                        remaining -= rows;
                        return Some(Ok(batch.slice(0, rows)));
                    }
                    Err(error) => {
                        remaining = 0;
                        return Some(Err(error));
                    }
                }
            }
            None
        };
        let batches = std::iter::from_fn(next);
        // A filter's batches are joined up to the session's batch size, unless a parent's
        // runtime filter (a TopK's bound) should see each morsel's rows as soon as they pass.
        let batches: Box<dyn Iterator<Item = DFResult<RecordBatch>> + Send> =
            if self.filter.is_some() && self.runtime_filters.is_empty() {
                let target = context.session_config().batch_size().max(1);
                Box::new(coalesced(batches, Arc::clone(&schema), target))
            } else {
                Box::new(batches)
            };
        let batches = futures::stream::iter(measured(batches, baseline));
        // Every batch is ready at once: without a yield now and then, a task that
        // aggregates the scan never gives its thread back, nor stops when it is aborted.
        Ok(make_cooperative(Box::pin(RecordBatchStreamAdapter::new(
            schema, batches,
        ))))
    }

    #[allow(deprecated)] // DataFusion 55 moves this to StatisticsContext.
    fn partition_statistics(&self, partition: Option<usize>) -> DFResult<Arc<Statistics>> {
        // Each partition stops at the limit on its own.
        let partition_rows = |morsels: &Vec<(usize, usize)>| {
            let rows: usize = morsels.iter().map(|(_, len)| len).sum();
            self.limit.map_or(rows, |limit| rows.min(limit))
        };
        let rows = match partition {
            Some(p) => self.partitions.get(p).map(partition_rows).unwrap_or(0),
            None => self.partitions.iter().map(partition_rows).sum(),
        };
        let mut statistics = Statistics::new_unknown(&self.schema);
        statistics.num_rows = if self.filter.is_none() && self.runtime_filters.is_empty() {
            Precision::Exact(rows)
        } else {
            Precision::Inexact(rows) // an upper bound
        };
        Ok(Arc::new(statistics))
    }

    fn supports_limit_pushdown(&self) -> bool {
        true
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }

    /// Takes the filters parents hand down after planning (a TopK's bound, a hash join's
    /// keys) as runtime filters. The parents keep applying them: each is reported not pushed.
    fn handle_child_pushdown_result(
        &self,
        phase: FilterPushdownPhase,
        child_pushdown_result: ChildPushdownResult,
        _config: &ConfigOptions,
    ) -> DFResult<FilterPushdownPropagation<Arc<dyn ExecutionPlan>>> {
        let filters = child_pushdown_result.parent_filters;
        let unsupported = vec![PushedDown::No; filters.len()];
        // Under a LIMIT the scan stops after its first rows: filtering before counting them
        // would return other rows than the plan asks for.
        if phase != FilterPushdownPhase::Post || filters.is_empty() || self.limit.is_some() {
            return Ok(FilterPushdownPropagation::with_parent_pushdown_result(
                unsupported,
            ));
        }
        let mut runtime_filters = self.runtime_filters.clone();
        for filter in &filters {
            // A filter the scan cannot evaluate is left to the parent.
            if let Ok(runtime) =
                ScanFilter::runtime(&self.inner.schema, &self.schema, &filter.filter)
            {
                runtime_filters.push(Arc::new(runtime));
            }
        }
        let scan = PythonScanExec {
            runtime_filters,
            metrics: ExecutionPlanMetricsSet::new(),
            ..self.clone()
        };
        Ok(
            FilterPushdownPropagation::with_parent_pushdown_result(unsupported)
                .with_updated_node(Arc::new(scan) as Arc<dyn ExecutionPlan>),
        )
    }

    fn fetch(&self) -> Option<usize> {
        self.limit
    }

    fn with_fetch(&self, limit: Option<usize>) -> Option<Arc<dyn ExecutionPlan>> {
        // Runtime filters skip rows before the limit counts them (see above).
        if limit.is_some() && !self.runtime_filters.is_empty() {
            return None;
        }
        Some(Arc::new(PythonScanExec {
            limit,
            metrics: ExecutionPlanMetricsSet::new(),
            ..self.clone()
        }))
    }
}
