//! placeholder
use pyo3::prelude::*;

#[pymodule]
fn _quiver(_m: &Bound<'_, PyModule>) -> PyResult<()> {
    Ok(())
}
