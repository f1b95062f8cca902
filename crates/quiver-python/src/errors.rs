//! The one place where Rust errors become Python exceptions. The exception classes live in
//! `quiver/errors.py` (a tree rooted at `quiver.Error`); this module instantiates them by name.

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyModule;
use quiver_core::QuiverError;

static ERRORS: PyOnceLock<Py<PyModule>> = PyOnceLock::new();

fn errors_module(py: Python<'_>) -> PyResult<&Bound<'_, PyModule>> {
    ERRORS
        .get_or_try_init(py, || Ok(py.import("quiver.errors")?.unbind()))
        .map(|module| module.bind(py))
}

/// A `quiver.<class_name>` exception with `message`.
pub fn quiver_exception(py: Python<'_>, class_name: &str, message: String) -> PyErr {
    match errors_module(py).and_then(|module| module.getattr(class_name)) {
        Ok(class) => match class.call1((message.clone(),)) {
            Ok(instance) => PyErr::from_value(instance),
            Err(error) => error,
        },
        // quiver/errors.py is part of the package; without it, say so rather than lose the error.
        Err(_) => PyRuntimeError::new_err(format!("{class_name}: {message}")),
    }
}

/// Maps a [`QuiverError`] to its exception class (`ParserError` carries `line` and `column`).
pub fn to_py(error: QuiverError) -> PyErr {
    Python::attach(|py| {
        let class = match &error {
            QuiverError::Parser { .. } => "ParserError",
            QuiverError::Catalog(_) => "CatalogError",
            QuiverError::InvalidInput(_) => "InvalidInputError",
            QuiverError::Conversion(_) => "ConversionError",
            QuiverError::Io(_) => "IOError",
            QuiverError::Format(_) => "InvalidInputError",
            QuiverError::Database(_) => "DatabaseDirectoryError",
            QuiverError::Cancelled => "QueryCancelled",
            QuiverError::NotImplemented(_) => "NotImplementedError",
            QuiverError::ResourcesExhausted(_) => "OutOfMemoryError",
            QuiverError::Execution(_) => "ExecutionError",
            QuiverError::Internal(_) => "InternalError",
        };
        let exception = quiver_exception(py, class, error.to_string());
        if let QuiverError::Parser { line, column, .. } = &error {
            let value = exception.value(py);
            let _ = value.setattr("line", *line);
            let _ = value.setattr("column", *column);
        }
        exception
    })
}

/// A bug in quiver, reported as `quiver.InternalError` rather than a panic.
pub fn internal_error(message: String) -> PyErr {
    Python::attach(|py| quiver_exception(py, "InternalError", message))
}

/// Bad data in a Python object: `quiver.ConversionError`.
pub fn conversion_error(message: String) -> PyErr {
    Python::attach(|py| quiver_exception(py, "ConversionError", message))
}

/// Bad arguments: `quiver.InvalidInputError`.
pub fn invalid_input(message: String) -> PyErr {
    Python::attach(|py| quiver_exception(py, "InvalidInputError", message))
}
