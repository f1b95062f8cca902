//! Python column objects to Arrow arrays: NumPy buffers wrapped without copying (the buffer
//! holds a reference to the NumPy array, so Python frees Python's memory), masks to validity
//! bitmaps, and Arrow C Data Interface chunks imported as they are.

use std::panic::AssertUnwindSafe;
use std::ptr::NonNull;
use std::sync::Arc;

use arrow::array::{
    make_array, Array, ArrayRef, BooleanArray, Date32Array, Decimal128Array, DictionaryArray,
    PrimitiveArray,
};
use arrow::buffer::{Buffer, NullBuffer, ScalarBuffer};
use arrow::compute::FilterPredicate;
use arrow::datatypes::{
    ArrowPrimitiveType, DataType, DurationMicrosecondType, DurationMillisecondType,
    DurationNanosecondType, DurationSecondType, Float16Type, Float32Type, Float64Type, Int16Type,
    Int32Type, Int64Type, Int8Type, TimeUnit, TimestampMicrosecondType, TimestampMillisecondType,
    TimestampNanosecondType, TimestampSecondType, UInt16Type, UInt32Type, UInt64Type, UInt8Type,
};
use arrow::ffi::{from_ffi, FFI_ArrowArray, FFI_ArrowSchema};
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyDict, PyTuple};

use crate::errors::conversion_error;

/// Keeps a Python object alive for as long as an Arrow buffer points into it. Dropping it
/// without the GIL is fine: PyO3 defers the decref to the next time the GIL is taken.
#[derive(Debug)]
pub struct PyOwner(AssertUnwindSafe<Py<PyAny>>);

impl PyOwner {
    pub fn new(object: &Bound<'_, PyAny>) -> PyOwner {
        PyOwner(AssertUnwindSafe(object.clone().unbind()))
    }

    /// The object (the GIL is held).
    pub fn object<'py>(&self, py: Python<'py>) -> Bound<'py, PyAny> {
        self.0.bind(py).clone()
    }
}

/// A 1-D NumPy array as seen through `__array_interface__`.
#[derive(Clone)]
pub struct NumpyView {
    pub address: usize,
    pub len: usize,
    pub typestr: String,
    itemsize: usize,
    pub owner: Arc<PyOwner>,
}

impl NumpyView {
    pub fn new(column: &str, array: &Bound<'_, PyAny>) -> PyResult<NumpyView> {
        let interface = array.getattr("__array_interface__")?;
        let interface = interface.cast::<PyDict>()?;
        let get = |key: &str| -> PyResult<Bound<'_, PyAny>> {
            interface.get_item(key)?.ok_or_else(|| {
                conversion_error(format!(
                    "column \"{column}\": __array_interface__ has no \"{key}\""
                ))
            })
        };
        let shape: Vec<usize> = get("shape")?.extract()?;
        let typestr: String = get("typestr")?.extract()?;
        let data = get("data")?;
        let data = data.cast::<PyTuple>()?;
        let address: usize = data.get_item(0)?.extract()?;
        let [len] = shape.as_slice() else {
            return Err(conversion_error(format!(
                "column \"{column}\": expected a 1-D array, got shape {shape:?}"
            )));
        };
        let itemsize = typestr
            .get(2..)
            .and_then(|digits| digits.split('[').next())
            .and_then(|digits| digits.parse::<usize>().ok())
            .unwrap_or(0);
        let strides = get("strides")?;
        if !strides.is_none() {
            let strides: Vec<isize> = strides.extract()?;
            if strides.as_slice() != [itemsize as isize] && *len > 1 {
                return Err(conversion_error(format!(
                    "column \"{column}\": the array is not contiguous (strides {strides:?})"
                )));
            }
        }
        Ok(NumpyView {
            address,
            len: *len,
            typestr,
            itemsize,
            owner: Arc::new(PyOwner::new(array)),
        })
    }

    /// Elements `start..start + len` (the caller keeps them in bounds).
    fn slice(&self, start: usize, len: usize) -> NumpyView {
        NumpyView {
            address: self.address + start * self.itemsize,
            len,
            typestr: self.typestr.clone(),
            itemsize: self.itemsize,
            owner: Arc::clone(&self.owner),
        }
    }

    /// The first `len` elements as a zero-copy Arrow buffer of `T`, or a copy when the data is
    /// not aligned for `T` (a NumPy view at an odd offset).
    fn scalars<T: ArrowPrimitiveType>(&self) -> ScalarBuffer<T::Native> {
        let size = std::mem::size_of::<T::Native>();
        let bytes = self.len * size;
        let aligned = self
            .address
            .is_multiple_of(std::mem::align_of::<T::Native>());
        match NonNull::new(self.address as *mut u8) {
            Some(pointer) if aligned && self.len > 0 => {
                // SAFETY: NumPy owns `bytes` bytes at `pointer`; `owner` keeps the array alive
                // as long as the buffer exists, and the buffer is never written through.
                let buffer = unsafe {
                    Buffer::from_custom_allocation(pointer, bytes, Arc::clone(&self.owner) as _)
                };
                ScalarBuffer::new(buffer, 0, self.len)
            }
            _ => {
                let mut values = Vec::with_capacity(self.len);
                for index in 0..self.len {
                    // SAFETY: in bounds of the array NumPy described; read_unaligned copes with
                    // any alignment.
                    values.push(unsafe {
                        std::ptr::read_unaligned((self.address as *const T::Native).add(index))
                    });
                }
                ScalarBuffer::from(values)
            }
        }
    }
}

/// Whether `test` holds for any of `values`. Each slice is checked this way for a sentinel
/// (NaT, NaN) or a masked row, so it runs over every row a query reads: blocks without an early
/// exit inside let the compiler vectorise the test, where `Iterator::any` goes one value at a
/// time.
fn any<T>(values: &[T], test: impl Fn(&T) -> bool) -> bool {
    values
        .chunks(256)
        .any(|block| block.iter().fold(false, |found, v| found | test(v)))
}

/// A validity bitmap from a NumPy boolean mask (True = missing), as pandas' masked arrays keep.
fn mask_nulls(view: &NumpyView) -> Option<NullBuffer> {
    // SAFETY: `view` describes `len` bytes of a live boolean array (checked by NumpyColumn::new;
    // `owner` keeps it alive).
    let missing = unsafe { std::slice::from_raw_parts(view.address as *const u8, view.len) };
    if !any(missing, |&m| m != 0) {
        return None;
    }
    Some(NullBuffer::from_iter(missing.iter().map(|&m| m == 0)))
}

fn combine(a: Option<NullBuffer>, b: Option<NullBuffer>) -> Option<NullBuffer> {
    NullBuffer::union(a.as_ref(), b.as_ref())
}

fn primitive<T: ArrowPrimitiveType>(
    view: &NumpyView,
    nulls: Option<NullBuffer>,
    missing_value: Option<T::Native>,
) -> ArrayRef
where
    T::Native: PartialEq,
{
    let values = view.scalars::<T>();
    let sentinel_nulls = missing_value.and_then(|missing| {
        if any(&values, |v| *v == missing) {
            Some(NullBuffer::from_iter(values.iter().map(|v| *v != missing)))
        } else {
            None
        }
    });
    Arc::new(PrimitiveArray::<T>::new(
        values,
        combine(nulls, sentinel_nulls),
    ))
}

fn float<T: ArrowPrimitiveType>(
    view: &NumpyView,
    nulls: Option<NullBuffer>,
    nan_as_null: bool,
) -> ArrayRef
where
    T::Native: num_like::IsNan,
{
    let values = view.scalars::<T>();
    let nan_nulls = if nan_as_null && any(&values, |v| v.is_nan_value()) {
        Some(NullBuffer::from_iter(
            values.iter().map(|v| !v.is_nan_value()),
        ))
    } else {
        None
    };
    Arc::new(PrimitiveArray::<T>::new(values, combine(nulls, nan_nulls)))
}

use num_like::IsNan;

mod num_like {
    pub trait IsNan {
        fn is_nan_value(&self) -> bool;
    }
    impl IsNan for f64 {
        fn is_nan_value(&self) -> bool {
            self.is_nan()
        }
    }
    impl IsNan for f32 {
        fn is_nan_value(&self) -> bool {
            self.is_nan()
        }
    }
}

/// A NumPy column (numeric, bool, datetime64, timedelta64) read where it lives: every scan
/// wraps the rows it needs ([`NumpyColumn::slice`]) instead of converting once, so a value
/// changed in place in the NumPy array (or the pandas frame over it) is what the next query sees.
/// Numeric and temporal data are wrapped, not copied; validity bitmaps (a pandas mask, NaN, NaT)
/// and packed booleans are built per slice, on the scan's worker threads.
pub struct NumpyColumn {
    column: String,
    values: NumpyView,
    mask: Option<NumpyView>,
    tz: Option<Arc<str>>,
    nan_as_null: bool,
    data_type: DataType,
}

impl NumpyColumn {
    /// `tz` makes datetime64 a zoned timestamp (pandas keeps zoned values as UTC);
    /// `nan_as_null` turns NaN into NULL (pandas' missing float); `mask` is True where missing.
    pub fn new(
        column: &str,
        array: &Bound<'_, PyAny>,
        mask: Option<&Bound<'_, PyAny>>,
        tz: Option<String>,
        nan_as_null: bool,
    ) -> PyResult<NumpyColumn> {
        let values = NumpyView::new(column, array)?;
        let mask = match mask {
            Some(mask) if !mask.is_none() => {
                let view = NumpyView::new(column, mask)?;
                if view.len != values.len || !view.typestr.ends_with("b1") {
                    return Err(conversion_error(format!(
                        "column \"{column}\": the mask must be a boolean array of {} elements",
                        values.len
                    )));
                }
                Some(view)
            }
            _ => None,
        };
        let mut column = NumpyColumn {
            column: column.to_string(),
            values,
            mask,
            tz: tz.map(Arc::from),
            nan_as_null,
            data_type: DataType::Null,
        };
        column.data_type = column
            .slice(0, 0)
            .map_err(conversion_error)?
            .data_type()
            .clone();
        Ok(column)
    }

    pub fn len(&self) -> usize {
        self.values.len
    }

    pub fn data_type(&self) -> &DataType {
        &self.data_type
    }

    /// Rows `start..start + len` as an Arrow array (`start + len` must not pass the end).
    /// Needs no GIL: the error is a message for the caller to wrap.
    pub fn slice(&self, start: usize, len: usize) -> Result<ArrayRef, String> {
        self.wrap(start, len, true)
    }

    /// Rows `start..start + len`, with NaT and NaN as NULL (`sentinels`) or left as values.
    fn wrap(&self, start: usize, len: usize, sentinels: bool) -> Result<ArrayRef, String> {
        let end = start.checked_add(len).filter(|end| *end <= self.values.len);
        if end.is_none() {
            return Err(format!(
                "column \"{}\": rows {start}..{} are outside its {} rows",
                self.column,
                start.saturating_add(len),
                self.values.len
            ));
        }
        let nulls = self
            .mask
            .as_ref()
            .and_then(|m| mask_nulls(&m.slice(start, len)));
        numpy_array(
            &self.column,
            &self.values.slice(start, len),
            nulls,
            &self.tz,
            self.nan_as_null,
            sentinels,
        )
    }

    /// The rows of `start..start + len` that `predicate` selects (it was built over `len`
    /// rows). NaT and NaN become NULL after the selection, so a selective filter checks only
    /// the rows it keeps instead of every row of the range.
    pub fn select(
        &self,
        start: usize,
        len: usize,
        predicate: &FilterPredicate,
    ) -> Result<ArrayRef, String> {
        let code = self.values.typestr.get(1..).unwrap_or_default();
        let sentinel = code.starts_with("M8[") || code.starts_with("m8[");
        let nan = self.nan_as_null && (code == "f4" || code == "f8");
        // datetime64[D] becomes Date32 by a conversion that needs its NaT first.
        let late = code != "M8[D]" && (sentinel || nan);
        let raw = self.wrap(start, len, !late)?;
        let kept = predicate.filter(&raw).map_err(|e| e.to_string())?;
        if !late {
            return Ok(kept);
        }
        match kept.data_type() {
            DataType::Float32 => null_where::<Float32Type>(kept, |v| v.is_nan()),
            DataType::Float64 => null_where::<Float64Type>(kept, |v| v.is_nan()),
            // Every datetime64 and timedelta64 unit is 64 bits wide, NaT the smallest value.
            DataType::Timestamp(..) | DataType::Duration(_) => {
                null_where::<Int64Type>(kept, |v| *v == i64::MIN)
            }
            _ => Ok(kept),
        }
    }
}

/// `array` with NULL wherever `test` holds of a value (`T` only needs the array's physical
/// layout: the data type, a timestamp's zone included, is kept).
fn null_where<T: ArrowPrimitiveType>(
    array: ArrayRef,
    test: impl Fn(&T::Native) -> bool,
) -> Result<ArrayRef, String> {
    let data = array.to_data();
    let Some(values) = data.buffers().first() else {
        return Ok(array);
    };
    let values: ScalarBuffer<T::Native> =
        ScalarBuffer::new(values.clone(), data.offset(), data.len());
    if !any(&values, &test) {
        return Ok(array);
    }
    let found = NullBuffer::from_iter(values.iter().map(|v| !test(v)));
    let nulls = combine(data.nulls().cloned(), Some(found));
    let data = data
        .into_builder()
        .nulls(nulls)
        .build()
        .map_err(|e| e.to_string())?;
    Ok(make_array(data))
}

fn numpy_array(
    column: &str,
    view: &NumpyView,
    nulls: Option<NullBuffer>,
    timestamp_tz: &Option<Arc<str>>,
    nan_as_null: bool,
    sentinels: bool,
) -> Result<ArrayRef, String> {
    let code = view.typestr.get(1..).unwrap_or_default().to_string();
    if !(view.typestr.starts_with('<')
        || view.typestr.starts_with('|')
        || view.typestr.starts_with('='))
    {
        return Err(format!(
            "column \"{column}\": big-endian arrays ({}) are not supported; use a native byte order",
            view.typestr
        ));
    }
    // Without `sentinels` NaT and NaN stay values; the caller marks them after a selection.
    let nat = sentinels.then_some(i64::MIN);
    let nan_as_null = nan_as_null && sentinels;
    let array: ArrayRef = match code.as_str() {
        "i1" => primitive::<Int8Type>(view, nulls, None),
        "i2" => primitive::<Int16Type>(view, nulls, None),
        "i4" => primitive::<Int32Type>(view, nulls, None),
        "i8" => primitive::<Int64Type>(view, nulls, None),
        "u1" => primitive::<UInt8Type>(view, nulls, None),
        "u2" => primitive::<UInt16Type>(view, nulls, None),
        "u4" => primitive::<UInt32Type>(view, nulls, None),
        "u8" => primitive::<UInt64Type>(view, nulls, None),
        "f2" => primitive::<Float16Type>(view, nulls, None),
        "f4" => float::<Float32Type>(view, nulls, nan_as_null),
        "f8" => float::<Float64Type>(view, nulls, nan_as_null),
        "b1" => {
            // Arrow packs booleans into bits, so this one copies (to an eighth of the size).
            // SAFETY: `view` describes `len` bytes owned by the live array.
            let bytes = unsafe { std::slice::from_raw_parts(view.address as *const u8, view.len) };
            let values = arrow::buffer::BooleanBuffer::from_iter(bytes.iter().map(|&b| b != 0));
            Arc::new(BooleanArray::new(values, nulls))
        }
        "M8[s]" => with_tz(
            primitive::<TimestampSecondType>(view, nulls, nat),
            timestamp_tz,
            TimeUnit::Second,
        ),
        "M8[ms]" => with_tz(
            primitive::<TimestampMillisecondType>(view, nulls, nat),
            timestamp_tz,
            TimeUnit::Millisecond,
        ),
        "M8[us]" => with_tz(
            primitive::<TimestampMicrosecondType>(view, nulls, nat),
            timestamp_tz,
            TimeUnit::Microsecond,
        ),
        "M8[ns]" => with_tz(
            primitive::<TimestampNanosecondType>(view, nulls, nat),
            timestamp_tz,
            TimeUnit::Nanosecond,
        ),
        "M8[D]" => {
            let days = view.scalars::<Int64Type>();
            let nat_nulls = NullBuffer::from_iter(days.iter().map(|d| *d != i64::MIN));
            let nulls = combine(nulls, (nat_nulls.null_count() > 0).then_some(nat_nulls));
            let values: Vec<i32> = days
                .iter()
                .map(|d| i32::try_from(*d).unwrap_or_default())
                .collect();
            Arc::new(Date32Array::new(ScalarBuffer::from(values), nulls))
        }
        "m8[s]" => primitive::<DurationSecondType>(view, nulls, nat),
        "m8[ms]" => primitive::<DurationMillisecondType>(view, nulls, nat),
        "m8[us]" => primitive::<DurationMicrosecondType>(view, nulls, nat),
        "m8[ns]" => primitive::<DurationNanosecondType>(view, nulls, nat),
        other => {
            return Err(format!(
                "column \"{column}\": NumPy dtype \"{other}\" is not supported"
            ))
        }
    };
    Ok(array)
}

fn with_tz(array: ArrayRef, tz: &Option<Arc<str>>, unit: TimeUnit) -> ArrayRef {
    let Some(tz) = tz else {
        return array;
    };
    let data = array.to_data();
    match data
        .into_builder()
        .data_type(DataType::Timestamp(unit, Some(Arc::clone(tz))))
        .build()
    {
        Ok(data) => make_array(data),
        Err(_) => array,
    }
}

/// Dictionary codes (pandas Categorical: -1 = missing) and their values.
pub fn dictionary_array(
    column: &str,
    codes: &Bound<'_, PyAny>,
    values: ArrayRef,
) -> PyResult<ArrayRef> {
    let view = NumpyView::new(column, codes)?;
    let code = view.typestr.get(1..).unwrap_or_default().to_string();
    let values = match values.data_type() {
        DataType::Utf8View => arrow::compute::cast(&values, &DataType::Utf8)
            .map_err(|e| conversion_error(format!("column \"{column}\": {e}")))?,
        _ => values,
    };
    let wrap = |e: arrow::error::ArrowError| conversion_error(format!("column \"{column}\": {e}"));
    let array: ArrayRef = match code.as_str() {
        "i1" => {
            let keys = primitive_keys::<Int8Type>(&view, -1);
            Arc::new(DictionaryArray::try_new(keys, values).map_err(wrap)?)
        }
        "i2" => {
            let keys = primitive_keys::<Int16Type>(&view, -1);
            Arc::new(DictionaryArray::try_new(keys, values).map_err(wrap)?)
        }
        "i4" => {
            let keys = primitive_keys::<Int32Type>(&view, -1);
            Arc::new(DictionaryArray::try_new(keys, values).map_err(wrap)?)
        }
        "i8" => {
            let keys = primitive_keys::<Int64Type>(&view, -1);
            Arc::new(DictionaryArray::try_new(keys, values).map_err(wrap)?)
        }
        other => {
            return Err(conversion_error(format!(
                "column \"{column}\": categorical codes of dtype \"{other}\" are not supported"
            )))
        }
    };
    Ok(array)
}

fn primitive_keys<T: ArrowPrimitiveType>(view: &NumpyView, missing: T::Native) -> PrimitiveArray<T>
where
    T::Native: PartialEq,
{
    let values = view.scalars::<T>();
    let nulls = if values.contains(&missing) {
        // A null key's value must still be a valid index.
        Some(NullBuffer::from_iter(values.iter().map(|v| *v != missing)))
    } else {
        None
    };
    match nulls {
        Some(nulls) => {
            let zero = T::Native::default();
            let fixed: Vec<T::Native> = values
                .iter()
                .map(|v| if *v == missing { zero } else { *v })
                .collect();
            PrimitiveArray::<T>::new(ScalarBuffer::from(fixed), Some(nulls))
        }
        None => PrimitiveArray::<T>::new(values, None),
    }
}

/// Python ints (already scaled) or None → decimal128(precision, scale).
pub fn decimal_array(
    column: &str,
    values: &Bound<'_, PyAny>,
    precision: u8,
    scale: i8,
) -> PyResult<ArrayRef> {
    let values: Vec<Option<i128>> = values.extract()?;
    let array = Decimal128Array::from(values)
        .with_precision_and_scale(precision, scale)
        .map_err(|e| conversion_error(format!("column \"{column}\": {e}")))?;
    Ok(Arc::new(array))
}

/// An object with `__arrow_c_array__` (one chunk of a pyarrow/polars column, or any producer of
/// the Arrow PyCapsule protocol), imported without copying.
pub fn import_c_array(column: &str, chunk: &Bound<'_, PyAny>) -> PyResult<ArrayRef> {
    let pair = chunk.call_method0("__arrow_c_array__")?;
    let (schema_capsule, array_capsule): (Bound<'_, PyCapsule>, Bound<'_, PyCapsule>) =
        pair.extract()?;
    let bad = |expected: &str| {
        conversion_error(format!(
            "column \"{column}\": expected an \"{expected}\" capsule"
        ))
    };
    let schema_ptr = schema_capsule
        .pointer_checked(Some(c"arrow_schema"))
        .map_err(|_| bad("arrow_schema"))?
        .as_ptr() as *const FFI_ArrowSchema;
    let array_ptr = array_capsule
        .pointer_checked(Some(c"arrow_array"))
        .map_err(|_| bad("arrow_array"))?
        .as_ptr() as *mut FFI_ArrowArray;
    // SAFETY: the capsules follow the Arrow PyCapsule protocol. The array is moved out (its
    // slot marked released, so the capsule's destructor does nothing); the schema is borrowed
    // for the duration of the import.
    let data = unsafe {
        let array = std::ptr::replace(array_ptr, FFI_ArrowArray::empty());
        from_ffi(array, &*schema_ptr)
    }
    .map_err(|e| conversion_error(format!("column \"{column}\": invalid Arrow data: {e}")))?;
    Ok(make_array(data))
}
