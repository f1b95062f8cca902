//! A statement's result as Python sees it: rows stream from the running query until something
//! needs them all (then they are kept, so `df()` after `show()` does not run the query twice);
//! everything leaves through the Arrow C stream interface (`__arrow_c_stream__`).

use std::ffi::CString;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use arrow::error::ArrowError;
use arrow::ffi_stream::FFI_ArrowArrayStream;
use arrow::record_batch::RecordBatchReader;
use futures::FutureExt;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyCapsule};
use quiver_core::format::{format_batches, FormatOptions};
use quiver_core::{OutputFormat, QueryResult, QueryStats};

use crate::errors::{internal_error, invalid_input, to_py};
use crate::runtime;

enum State {
    Running(QueryResult),
    Done(Vec<RecordBatch>),
    /// Streamed out by `record_batches`; the rows are gone.
    Consumed,
}

/// The result of one statement (`quiver._quiver.Result`; the public class wraps it).
#[pyclass(module = "quiver._quiver", name = "Result", frozen)]
pub struct ResultHandle {
    schema: SchemaRef,
    returns_rows: bool,
    /// Rows inserted, updated or deleted, for a DML statement that reported them.
    rows_affected: Option<u64>,
    format: Option<OutputFormat>,
    state: Mutex<State>,
    stats: Mutex<Option<QueryStats>>,
    /// `(callback, seconds)` from [`ResultHandle::watch`].
    watcher: Mutex<Option<(Py<PyAny>, f64)>>,
}

impl std::fmt::Debug for ResultHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResultHandle")
            .field("schema", &self.schema)
            .field("returns_rows", &self.returns_rows)
            .finish()
    }
}

impl ResultHandle {
    pub fn new(result: QueryResult) -> ResultHandle {
        ResultHandle {
            schema: result.schema(),
            returns_rows: result.returns_rows(),
            rows_affected: None,
            format: result.format(),
            state: Mutex::new(State::Running(result)),
            stats: Mutex::new(None),
            watcher: Mutex::new(None),
        }
    }

    fn lock(&self) -> PyResult<std::sync::MutexGuard<'_, State>> {
        self.state
            .lock()
            .map_err(|_| internal_error("a result was poisoned by an earlier failure".into()))
    }

    /// Runs the query to the end (GIL released, Ctrl-C cancels) and keeps the rows.
    pub fn materialize(&self, py: Python<'_>) -> PyResult<Vec<RecordBatch>> {
        let running = {
            let mut state = self.lock()?;
            match std::mem::replace(&mut *state, State::Consumed) {
                State::Done(batches) => {
                    let copy = batches.clone();
                    *state = State::Done(batches);
                    return Ok(copy);
                }
                State::Consumed => return Err(invalid_input(
                    "the result was already streamed out by record_batches(); run the query again"
                        .into(),
                )),
                State::Running(result) => result,
            }
        };
        let reporter = self
            .watcher
            .lock()
            .ok()
            .and_then(|watcher| watcher.as_ref().map(|(c, s)| (c.clone_ref(py), *s)))
            .map(|(callback, after)| runtime::Reporter {
                progress: running.progress(),
                callback,
                after: Duration::from_secs_f64(after.max(0.0)),
            });
        let (batches, stats) = runtime::wait_reporting(
            py,
            async move { running.collect_with_stats().await.map_err(to_py) },
            reporter.as_ref(),
        )?;
        if let Ok(mut slot) = self.stats.lock() {
            *slot = Some(stats);
        }
        let mut state = self.lock()?;
        *state = State::Done(batches.clone());
        Ok(batches)
    }

    fn export(
        py: Python<'_>,
        reader: Box<dyn RecordBatchReader + Send>,
    ) -> PyResult<Bound<'_, PyCapsule>> {
        let stream = FFI_ArrowArrayStream::new(reader);
        let name = CString::new("arrow_array_stream").map_err(|e| internal_error(e.to_string()))?;
        PyCapsule::new(py, stream, Some(name))
    }
}

#[pymethods]
impl ResultHandle {
    /// Column names.
    #[getter]
    fn columns(&self) -> Vec<String> {
        self.schema
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect()
    }

    /// Arrow type names, one per column.
    #[getter]
    fn types(&self) -> Vec<String> {
        self.schema
            .fields()
            .iter()
            .map(|f| f.data_type().to_string())
            .collect()
    }

    /// Whether the statement produces rows to show (a query) rather than a status (DDL).
    #[getter]
    fn returns_rows(&self) -> bool {
        self.returns_rows
    }

    /// Rows inserted, updated or deleted by a DML statement (`None` for other statements):
    /// DB-API's `rowcount`.
    #[getter]
    fn rows_affected(&self) -> Option<u64> {
        self.rows_affected
    }

    /// The name of the `FORMAT` the statement asked for, if any.
    #[getter]
    fn requested_format(&self) -> Option<&'static str> {
        self.format.map(|f| f.name())
    }

    /// Calls `callback(rows_read, bytes_read, seconds, done)` while the query runs to its end,
    /// once it has run `after` seconds (and once more with `done=True` when it finishes).
    #[pyo3(signature = (callback, after=1.0))]
    fn watch(&self, callback: Py<PyAny>, after: f64) -> PyResult<()> {
        let mut watcher = self
            .watcher
            .lock()
            .map_err(|_| internal_error("poisoned progress watcher".into()))?;
        *watcher = Some((callback, after));
        Ok(())
    }

    /// Runs the query to the end; returns the row count.
    fn fetch(&self, py: Python<'_>) -> PyResult<usize> {
        Ok(self.materialize(py)?.iter().map(|b| b.num_rows()).sum())
    }

    /// (elapsed seconds, rows read, bytes read), after running the query to the end.
    fn stats(&self, py: Python<'_>) -> PyResult<(f64, u64, u64)> {
        if matches!(*self.lock()?, State::Running(_)) {
            self.materialize(py)?;
        }
        let stats = self
            .stats
            .lock()
            .map_err(|_| internal_error("poisoned statistics".into()))?;
        Ok(match stats.as_ref() {
            Some(s) => (s.elapsed.as_secs_f64(), s.rows_read, s.bytes_read),
            None => (0.0, 0, 0),
        })
    }

    /// The Arrow PyCapsule stream protocol: every row, as a C stream.
    #[pyo3(signature = (requested_schema=None))]
    fn __arrow_c_stream__<'py>(
        &self,
        py: Python<'py>,
        requested_schema: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyCapsule>> {
        let _ = requested_schema; // The schema is the query's; a consumer casts if it must.
        let batches = self.materialize(py)?;
        let reader = BatchesReader {
            schema: Arc::clone(&self.schema),
            batches: batches.into_iter(),
        };
        ResultHandle::export(py, Box::new(reader))
    }

    /// Streams the rows in batches of `rows` rows without keeping them (a running query is
    /// read as it produces; the result is then consumed).
    fn stream<'py>(&self, py: Python<'py>, rows: usize) -> PyResult<Bound<'py, PyCapsule>> {
        if rows == 0 {
            return Err(invalid_input(
                "the batch size must be at least 1 row".into(),
            ));
        }
        let source: Source = {
            let mut state = self.lock()?;
            match std::mem::replace(&mut *state, State::Consumed) {
                State::Running(result) => Source::Running(Box::new(result)),
                State::Done(batches) => {
                    let copy = batches.clone();
                    *state = State::Done(batches);
                    Source::Batches(copy.into_iter())
                }
                State::Consumed => {
                    return Err(invalid_input(
                        "the result was already streamed out; run the query again".into(),
                    ))
                }
            }
        };
        let reader = Rebatcher {
            schema: Arc::clone(&self.schema),
            source,
            rows,
            pending: Vec::new(),
            pending_rows: 0,
            done: false,
        };
        ResultHandle::export(py, Box::new(reader))
    }

    /// The rows in one of the CLI's output formats ("CSV", "JSONEachRow", "Pretty", "Parquet", ...).
    fn format<'py>(&self, py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyBytes>> {
        let format: OutputFormat = name
            .parse()
            .map_err(|e: quiver_core::format::FormatError| invalid_input(e.to_string()))?;
        let batches = self.materialize(py)?;
        let schema = Arc::clone(&self.schema);
        let stats = self
            .stats
            .lock()
            .ok()
            .and_then(|s| s.clone())
            .unwrap_or_default();
        let bytes = py
            .detach(|| {
                let options = FormatOptions::default();
                format_batches(format, schema, &batches, &options, &stats)
            })
            .map_err(|e| to_py(quiver_core::QuiverError::from(e)))?;
        Ok(PyBytes::new(py, &bytes))
    }
}

struct BatchesReader {
    schema: SchemaRef,
    batches: std::vec::IntoIter<RecordBatch>,
}

impl Iterator for BatchesReader {
    type Item = Result<RecordBatch, ArrowError>;
    fn next(&mut self) -> Option<Self::Item> {
        self.batches.next().map(Ok)
    }
}

impl RecordBatchReader for BatchesReader {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }
}

enum Source {
    Running(Box<QueryResult>),
    Batches(std::vec::IntoIter<RecordBatch>),
}

/// Re-cuts a stream of batches into batches of exactly `rows` rows (the last may be shorter).
struct Rebatcher {
    schema: SchemaRef,
    source: Source,
    rows: usize,
    pending: Vec<RecordBatch>,
    pending_rows: usize,
    done: bool,
}

impl Rebatcher {
    fn pull(&mut self) -> Option<Result<RecordBatch, ArrowError>> {
        match &mut self.source {
            Source::Batches(batches) => batches.next().map(Ok),
            Source::Running(result) => {
                // Called by the consumer (pyarrow releases the GIL while reading a C stream).
                let runtime = match runtime::runtime() {
                    Ok(runtime) => runtime,
                    Err(e) => return Some(Err(ArrowError::ExternalError(Box::new(e)))),
                };
                // A panic while the consumer pulls is an error of the stream, not a crash.
                let next = std::panic::AssertUnwindSafe(result.next_batch()).catch_unwind();
                match runtime.block_on(next) {
                    Ok(batch) => {
                        batch.map(|batch| batch.map_err(|e| ArrowError::ExternalError(Box::new(e))))
                    }
                    Err(panic) => Some(Err(ArrowError::ExternalError(Box::new(
                        runtime::panicked(panic),
                    )))),
                }
            }
        }
    }

    fn take(&mut self, rows: usize) -> Result<RecordBatch, ArrowError> {
        let batch = arrow::compute::concat_batches(&self.schema, &self.pending)?;
        let out = batch.slice(0, rows);
        let rest = batch.slice(rows, batch.num_rows() - rows);
        self.pending_rows = rest.num_rows();
        self.pending = if rest.num_rows() > 0 {
            vec![rest]
        } else {
            Vec::new()
        };
        Ok(out)
    }
}

impl Iterator for Rebatcher {
    type Item = Result<RecordBatch, ArrowError>;

    fn next(&mut self) -> Option<Self::Item> {
        while !self.done && self.pending_rows < self.rows {
            match self.pull() {
                Some(Ok(batch)) => {
                    self.pending_rows += batch.num_rows();
                    self.pending.push(batch);
                }
                Some(Err(error)) => {
                    self.done = true;
                    return Some(Err(error));
                }
                None => self.done = true,
            }
        }
        if self.pending_rows == 0 {
            return None;
        }
        let rows = self.rows.min(self.pending_rows);
        Some(self.take(rows))
    }
}

impl RecordBatchReader for Rebatcher {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }
}

impl ResultHandle {
    /// The result of a statement that already ran to completion (DDL, DML, COPY); `batches`
    /// are what it produced, kept only for the row count DML reports.
    pub fn finished(
        schema: SchemaRef,
        format: Option<OutputFormat>,
        returns_rows: bool,
        batches: &[RecordBatch],
    ) -> ResultHandle {
        ResultHandle {
            schema,
            returns_rows,
            rows_affected: dml_count(batches),
            format,
            state: Mutex::new(State::Done(Vec::new())),
            stats: Mutex::new(None),
            watcher: Mutex::new(None),
        }
    }
}

/// DataFusion's DML plans (INSERT, UPDATE, DELETE, COPY) produce one `count: UInt64` row; the
/// sum of that column, or `None` for a statement with any other output.
fn dml_count(batches: &[RecordBatch]) -> Option<u64> {
    let mut total = None;
    for batch in batches {
        let schema = batch.schema();
        let [field] = schema.fields().as_ref() else {
            return None;
        };
        if field.name() != "count" {
            return None;
        }
        let counts = batch
            .column(0)
            .as_any()
            .downcast_ref::<arrow::array::UInt64Array>()?;
        let sum: u64 = counts.iter().flatten().sum();
        total = Some(total.unwrap_or(0) + sum);
    }
    total
}
