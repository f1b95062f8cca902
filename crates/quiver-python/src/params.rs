//! Python values for `$name` / `$1` placeholders. Values travel as typed scalars, never as
//! SQL text.

use std::collections::HashMap;

use datafusion::common::{ParamValues, ScalarValue};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};

use crate::errors::invalid_input;

/// `params`: a dict (named placeholders) or a list/tuple (`$1`, `$2`, ...).
pub fn to_param_values(params: &Bound<'_, PyAny>) -> PyResult<ParamValues> {
    if let Ok(dict) = params.cast::<PyDict>() {
        let mut map = HashMap::with_capacity(dict.len());
        for (key, value) in dict.iter() {
            let key: String = key
                .extract()
                .map_err(|_| invalid_input("parameter names must be strings".to_string()))?;
            let key = key.trim_start_matches('$').to_string();
            map.insert(key.clone(), scalar(&key, &value)?.into());
        }
        return Ok(ParamValues::Map(map));
    }
    if params.is_instance_of::<PyList>() || params.is_instance_of::<PyTuple>() {
        let mut list = Vec::new();
        for (index, value) in params.try_iter()?.enumerate() {
            list.push(scalar(&format!("${}", index + 1), &value?)?.into());
        }
        return Ok(ParamValues::List(list));
    }
    Err(invalid_input(format!(
        "params must be a dict (for $name) or a list (for $1, $2, ...), not {}",
        params.get_type().name()?
    )))
}

fn scalar(name: &str, value: &Bound<'_, PyAny>) -> PyResult<ScalarValue> {
    if value.is_none() {
        return Ok(ScalarValue::Null);
    }
    if value.is_instance_of::<PyBool>() {
        return Ok(ScalarValue::Boolean(Some(value.extract()?)));
    }
    if value.is_instance_of::<PyInt>() {
        return match value.extract::<i64>() {
            Ok(v) => Ok(ScalarValue::Int64(Some(v))),
            Err(_) => match value.extract::<u64>() {
                Ok(v) => Ok(ScalarValue::UInt64(Some(v))),
                Err(_) => Err(invalid_input(format!(
                    "parameter {name}: the integer does not fit in 64 bits"
                ))),
            },
        };
    }
    if value.is_instance_of::<PyFloat>() {
        return Ok(ScalarValue::Float64(Some(value.extract()?)));
    }
    if value.is_instance_of::<PyString>() {
        return Ok(ScalarValue::Utf8(Some(value.extract()?)));
    }
    if value.is_instance_of::<PyBytes>() {
        return Ok(ScalarValue::Binary(Some(value.extract()?)));
    }
    // datetime.datetime / date / Decimal: by their text, typed on the Python side.
    let type_name = value.get_type().name()?.to_string();
    let module = value.get_type().module()?.to_string();
    match (module.as_str(), type_name.as_str()) {
        ("datetime", "datetime") => {
            let has_tz = !value.getattr("tzinfo")?.is_none();
            let text: String = value.call_method0("isoformat")?.extract()?;
            let parsed = ScalarValue::try_from_string(
                text,
                &datafusion::arrow::datatypes::DataType::Timestamp(
                    datafusion::arrow::datatypes::TimeUnit::Microsecond,
                    has_tz.then(|| "+00:00".into()),
                ),
            );
            parsed.map_err(|e| invalid_input(format!("parameter {name}: {e}")))
        }
        ("datetime", "date") => {
            let text: String = value.call_method0("isoformat")?.extract()?;
            ScalarValue::try_from_string(text, &datafusion::arrow::datatypes::DataType::Date32)
                .map_err(|e| invalid_input(format!("parameter {name}: {e}")))
        }
        ("datetime", "time") => {
            // DB-API's `Time`: microseconds since midnight. A UTC offset has no SQL TIME type
            // to go to, so it is refused rather than dropped.
            if !value.getattr("tzinfo")?.is_none() {
                return Err(invalid_input(format!(
                    "parameter {name}: a time with a tzinfo is not supported (TIME has no time zone)"
                )));
            }
            let part = |field: &str| -> PyResult<i64> { value.getattr(field)?.extract() };
            let micros = ((part("hour")? * 60 + part("minute")?) * 60 + part("second")?)
                * 1_000_000
                + part("microsecond")?;
            Ok(ScalarValue::Time64Microsecond(Some(micros)))
        }
        ("decimal", "Decimal") => {
            let text: String = value.str()?.extract()?;
            let (digits, scale) = match text.split_once('.') {
                Some((whole, fraction)) => (format!("{whole}{fraction}"), fraction.len()),
                None => (text.clone(), 0),
            };
            let unscaled: i128 = digits.parse().map_err(|_| {
                invalid_input(format!(
                    "parameter {name}: Decimal {text} is not a finite decimal"
                ))
            })?;
            let precision = digits.trim_start_matches('-').len().clamp(1, 38) as u8;
            Ok(ScalarValue::Decimal128(
                Some(unscaled),
                precision.max(scale as u8),
                scale as i8,
            ))
        }
        _ => Err(invalid_input(format!(
            "parameter {name}: values of type {module}.{type_name} are not supported \
             (use None, bool, int, float, str, bytes, Decimal, date, time or datetime)"
        ))),
    }
}
