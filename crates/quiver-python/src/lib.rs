//! `quiver._quiver`: the Rust half of the quiver Python package. The public API is the pure
//! Python package `quiver` (python/quiver); this module gives it a [`Connection`] over a
//! `quiver_core::Session`, Python objects as tables ([`source`]), and results that leave
//! through the Arrow C stream interface ([`result`]). Queries plan and run with the GIL
//! released; Ctrl-C cancels them ([`runtime`]); errors map to `quiver.errors` ([`errors`]).

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod errors;
mod params;
mod result;
mod runtime;
mod source;

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use pyo3::prelude::*;
use pyo3::types::PyList;
use quiver_core::datafusion::catalog::TableProvider;
use quiver_core::datafusion::common::TableReference;
use quiver_core::{ExecuteOptions, ExternalTables, QuiverError, Session, SessionOptions};

use crate::errors::{invalid_input, to_py};
use crate::result::ResultHandle;

/// A quiver session (`quiver.connect()` wraps it).
#[pyclass(module = "quiver._quiver", frozen)]
struct Connection {
    session: Session,
}

/// Resolves unknown table names through the Python-side resolver (which walks the caller's
/// frames). A Python exception raised while converting an object is kept and re-raised as is.
struct PyResolver {
    resolver: Py<PyAny>,
    error: Mutex<Option<PyErr>>,
}

impl PyResolver {
    fn keep(&self, error: PyErr) -> QuiverError {
        let message = Python::attach(|py| error.value(py).to_string());
        if let Ok(mut slot) = self.error.lock() {
            slot.get_or_insert(error);
        }
        QuiverError::Conversion(message)
    }

    fn take_error(&self) -> Option<PyErr> {
        self.error.lock().ok().and_then(|mut slot| slot.take())
    }
}

impl ExternalTables for PyResolver {
    fn lookup(
        &self,
        name: &str,
        words: Option<&HashSet<String>>,
    ) -> quiver_core::Result<Option<Arc<dyn TableProvider>>> {
        Python::attach(|py| {
            let object = self
                .resolver
                .call_method1(py, "lookup", (name, words))
                .map_err(|e| self.keep(e))?;
            if object.is_none(py) {
                return Ok(None);
            }
            let table = match object.cast_bound::<Table>(py) {
                Ok(table) => Arc::clone(&table.get().table),
                Err(_) => {
                    source::table_from_python(py, object.bind(py))
                        .map_err(|e| self.keep(e))?
                        .0
                }
            };
            Ok(Some(table))
        })
    }

    fn candidates(&self) -> Vec<String> {
        Python::attach(|py| {
            self.resolver
                .call_method0(py, "candidates")
                .and_then(|names| names.extract::<Vec<String>>(py))
                .unwrap_or_default()
        })
    }
}

#[pymethods]
impl Connection {
    #[new]
    #[pyo3(signature = (database=None, read_only=false, threads=None))]
    fn new(
        py: Python<'_>,
        database: Option<PathBuf>,
        read_only: bool,
        threads: Option<usize>,
    ) -> PyResult<Connection> {
        let options = SessionOptions {
            database,
            read_only,
            threads,
            memory_limit: None,
        };
        let session = runtime::wait(
            py,
            async move { Session::open(options).await.map_err(to_py) },
        )?;
        Ok(Connection { session })
    }

    /// Runs every statement of `sql`; returns the last one's result. `params` fills `$name` /
    /// `$1` placeholders; `resolver` finds Python objects for unknown table names.
    #[pyo3(signature = (sql, params=None, resolver=None))]
    fn execute(
        &self,
        py: Python<'_>,
        sql: &str,
        params: Option<Bound<'_, PyAny>>,
        resolver: Option<Bound<'_, PyAny>>,
    ) -> PyResult<ResultHandle> {
        let statements = self.session.parse(sql).map_err(to_py)?;
        let params = match params {
            Some(params) if !params.is_none() => Some(params::to_param_values(&params)?),
            _ => None,
        };
        let resolver = resolver.map(|r| PyResolver {
            resolver: r.unbind(),
            error: Mutex::new(None),
        });
        let session = self.session.clone();
        let resolver_ref = resolver.as_ref();
        let outcome = runtime::wait(py, async move {
            let run = async {
                let count = statements.len();
                let mut last = None;
                for (index, statement) in statements.iter().enumerate() {
                    let options = ExecuteOptions {
                        external: resolver_ref.map(|r| r as &dyn ExternalTables),
                        params: params.clone(),
                    };
                    let result = session.execute_with(statement, options).await?;
                    last = Some(if index + 1 < count || !result.returns_rows() {
                        // Statements before the last, and DDL/DML, run to completion now.
                        let (schema, format) = (result.schema(), result.format());
                        let returns_rows = result.returns_rows();
                        let batches = result.collect().await?;
                        ResultHandle::finished(schema, format, returns_rows, &batches)
                    } else {
                        ResultHandle::new(result)
                    });
                }
                Ok::<_, QuiverError>(last)
            };
            Ok(run.await)
        })?;
        // A Python exception raised while converting an object is re-raised as it was.
        let last = outcome.map_err(|error| {
            resolver
                .as_ref()
                .and_then(|r| r.take_error())
                .unwrap_or_else(|| to_py(error))
        })?;
        last.ok_or_else(|| invalid_input("no SQL statement to run".into()))
    }

    /// Makes `object` (a DataFrame, Arrow table, NumPy array, ...) queryable as `name` until
    /// unregistered; replaces an earlier registration of that name.
    fn register(&self, py: Python<'_>, name: &str, object: Bound<'_, PyAny>) -> PyResult<()> {
        let (table, _) = source::table_from_python(py, &object)?;
        let ctx = self.session.context();
        let reference = TableReference::bare(name);
        let _ = ctx.deregister_table(reference.clone());
        ctx.register_table(reference, table)
            .map_err(|e| to_py(QuiverError::from(e)))?;
        Ok(())
    }

    /// Removes a registered object (no error if there is none, as in DuckDB).
    fn unregister(&self, name: &str) -> PyResult<()> {
        let ctx = self.session.context();
        ctx.deregister_table(TableReference::bare(name))
            .map_err(|e| to_py(QuiverError::from(e)))?;
        Ok(())
    }

    /// Names of the tables and views in the default schema.
    fn table_names(&self) -> Vec<String> {
        let ctx = self.session.context();
        let state = ctx.state();
        let defaults = &state.config_options().catalog;
        ctx.catalog(&defaults.default_catalog)
            .and_then(|c| c.schema(&defaults.default_schema))
            .map(|s| {
                let mut names = s.table_names();
                names.sort();
                names
            })
            .unwrap_or_default()
    }
}

/// A Python object made into a table once, for `quiver._sources.table` to reuse across queries.
#[pyclass(module = "quiver._quiver", frozen)]
struct Table {
    table: Arc<dyn TableProvider>,
    reusable: bool,
}

#[pymethods]
impl Table {
    #[new]
    fn new(py: Python<'_>, object: Bound<'_, PyAny>) -> PyResult<Table> {
        let (table, reusable) = source::table_from_python(py, &object)?;
        Ok(Table { table, reusable })
    }

    /// Whether the table reads the object's own memory and so may serve later queries.
    #[getter]
    fn reusable(&self) -> bool {
        self.reusable
    }

    fn __repr__(&self) -> String {
        format!(
            "<quiver table: {} columns, reusable={}>",
            self.table.schema().fields().len(),
            self.reusable
        )
    }
}

/// Whether strings are read without the GIL (false if the layout self-check failed).
#[pyfunction]
fn _direct_strings(py: Python<'_>) -> bool {
    source::strings::direct_path_enabled(py)
}

/// The table a Python object becomes, for tests: (column names, Arrow type names).
#[pyfunction]
fn _describe_source(py: Python<'_>, object: Bound<'_, PyAny>) -> PyResult<Py<PyList>> {
    let (table, _) = source::table_from_python(py, &object)?;
    let schema = table.schema();
    let pairs: Vec<(String, String)> = schema
        .fields()
        .iter()
        .map(|f| (f.name().clone(), f.data_type().to_string()))
        .collect();
    Ok(PyList::new(py, pairs)?.unbind())
}

/// Ends the Postgres sessions the process keeps, waiting up to `seconds` (at interpreter
/// exit, so the servers do not log them as lost connections); whether all ended in time.
#[pyfunction]
fn _close_postgres_connections(py: Python<'_>, seconds: f64) -> bool {
    let limit = std::time::Duration::from_secs_f64(seconds.clamp(0.0, 60.0));
    py.detach(|| quiver_core::close_postgres_connections(limit))
}

#[pymodule]
fn _quiver(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Connection>()?;
    m.add_class::<ResultHandle>()?;
    m.add_class::<Table>()?;
    m.add_function(wrap_pyfunction!(_direct_strings, m)?)?;
    m.add_function(wrap_pyfunction!(_describe_source, m)?)?;
    m.add_function(wrap_pyfunction!(_close_postgres_connections, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
