//! Python `str` and `bytes` objects to Arrow without the GIL, by reading CPython's object
//! layouts directly (the technique of chDB's DataFrame scan, here in Rust).
//!
//! A NumPy object array is a contiguous array of `PyObject*`. The array (held by the table)
//! keeps every element alive and `str`/`bytes` objects are immutable, so worker threads may read
//! them while the GIL is released. Only *compact* strings (every `str` CPython ≥ 3.3 creates
//! outside deprecated APIs) are read directly: their characters follow the header as ASCII,
//! Latin-1, UCS-2 or UCS-4 code units. Anything else — a `str` subclass, a legacy string, a
//! layout this build does not recognise — takes the C API under the GIL, one object at a time.
//! The layout is verified against the C API once at import; a mismatch turns the direct path
//! off for the whole process rather than risk a wrong answer.

use std::sync::OnceLock;

use arrow::array::{ArrayRef, BinaryViewBuilder, StringViewBuilder};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString};
use std::sync::Arc;

/// Where CPython keeps things, for this interpreter version (default, non-free-threaded build).
#[derive(Debug, Clone, Copy)]
pub struct Layout {
    /// `type(str)`, `type(bytes)`, `type(float)` and `None`, as addresses.
    str_type: usize,
    bytes_type: usize,
    float_type: usize,
    none: usize,
    /// `sizeof(PyASCIIObject)`: where an ASCII compact string's characters start.
    ascii_header: usize,
    /// `sizeof(PyCompactUnicodeObject)`: where a non-ASCII compact string's code units start.
    compact_header: usize,
    /// Python < 3.12 has a `ready` bit; a string that is not ready has no canonical data yet.
    has_ready_bit: bool,
    /// False when the self-check at import failed: every object then goes through the C API.
    direct: bool,
}

static LAYOUT: OnceLock<Layout> = OnceLock::new();

const OFFSET_TYPE: usize = 8;
const OFFSET_LENGTH: usize = 16;
const OFFSET_STATE: usize = 32;
const BYTES_DATA: usize = 32;
const FLOAT_VALUE: usize = 16;

impl Layout {
    fn detect(py: Python<'_>) -> Layout {
        let version = py.version_info();
        let (ascii_header, compact_header, has_ready_bit) =
            if (version.major, version.minor) < (3, 12) {
                (48, 72, true)
            } else {
                (40, 56, false)
            };
        let mut layout = Layout {
            str_type: py.get_type::<PyString>().as_ptr() as usize,
            bytes_type: py.get_type::<PyBytes>().as_ptr() as usize,
            float_type: py.get_type::<pyo3::types::PyFloat>().as_ptr() as usize,
            none: py.None().as_ptr() as usize,
            ascii_header,
            compact_header,
            has_ready_bit,
            // Free-threaded builds have a different object header.
            direct: cfg!(target_endian = "little") && cfg!(target_pointer_width = "64"),
        };
        if layout.direct && !layout.self_check(py) {
            layout.direct = false;
        }
        layout
    }

    /// Decodes known strings and bytes both ways and compares.
    fn self_check(&self, py: Python<'_>) -> bool {
        let samples = [
            "",
            "abc",
            "h\u{e9}llo",
            "\u{20ac}uro",
            "x\u{1F600}y",
            "\u{ff}\u{100}",
        ];
        for sample in samples {
            let object = PyString::new(py, sample);
            // Make sure CPython has not cached UTF-8 only: we read the canonical data.
            let mut text = String::new();
            // SAFETY: `object` is a live str for the duration of the call, GIL held.
            match unsafe { self.read_str(object.as_ptr() as usize, &mut text) } {
                Ok(Some(decoded)) if decoded == sample => {}
                _ => return false,
            }
        }
        let bytes = PyBytes::new(py, b"ab\x00c");
        // SAFETY: as above.
        match unsafe { self.read_bytes(bytes.as_ptr() as usize) } {
            Some(data) if data == b"ab\x00c" => {}
            _ => return false,
        }
        true
    }

    /// The object's type, as an address.
    ///
    /// # Safety
    /// `object` must point to a live Python object.
    unsafe fn type_of(object: usize) -> usize {
        // SAFETY: every object starts with ob_refcnt then ob_type (caller guarantees liveness).
        unsafe { *((object + OFFSET_TYPE) as *const usize) }
    }

    /// Reads an exact `str` in compact form. `Ok(None)`: not readable directly (use the C
    /// API). `Err(())`: the string holds a lone surrogate, which has no UTF-8 form.
    ///
    /// # Safety
    /// `object` must point to a live exact `str`, which stays alive while the returned text
    /// is used (ASCII text is borrowed from the object itself).
    unsafe fn read_str<'a>(
        &self,
        object: usize,
        scratch: &'a mut String,
    ) -> std::result::Result<Option<&'a str>, ()> {
        // SAFETY: the caller guarantees a live str; the offsets are those of PyASCIIObject,
        // checked against the C API at import.
        unsafe {
            let length = *((object + OFFSET_LENGTH) as *const isize) as usize;
            let state = *((object + OFFSET_STATE) as *const u32);
            let kind = (state >> 2) & 7;
            let compact = (state >> 5) & 1 == 1;
            let ascii = (state >> 6) & 1 == 1;
            let ready = !self.has_ready_bit || (state >> 7) & 1 == 1;
            if !compact || !ready {
                return Ok(None);
            }
            if ascii {
                let data =
                    std::slice::from_raw_parts((object + self.ascii_header) as *const u8, length);
                // ASCII is UTF-8, read in place (the object outlives the returned borrow).
                return Ok(Some(std::str::from_utf8_unchecked(data)));
            }
            scratch.clear();
            let data = object + self.compact_header;
            match kind {
                1 => {
                    let units = std::slice::from_raw_parts(data as *const u8, length);
                    scratch.reserve(length * 2);
                    scratch.extend(units.iter().map(|&u| char::from(u)));
                }
                2 => {
                    let units = std::slice::from_raw_parts(data as *const u16, length);
                    scratch.reserve(length * 3);
                    for &unit in units {
                        scratch.push(char::from_u32(u32::from(unit)).ok_or(())?);
                    }
                }
                4 => {
                    let units = std::slice::from_raw_parts(data as *const u32, length);
                    scratch.reserve(length * 4);
                    for &unit in units {
                        scratch.push(char::from_u32(unit).ok_or(())?);
                    }
                }
                _ => return Ok(None),
            }
            Ok(Some(scratch.as_str()))
        }
    }

    /// Reads an exact `bytes` object.
    ///
    /// # Safety
    /// `object` must point to a live exact `bytes`.
    unsafe fn read_bytes<'a>(&self, object: usize) -> Option<&'a [u8]> {
        // SAFETY: PyBytesObject is PyObject_VAR_HEAD, ob_shash, then the bytes (checked at import).
        unsafe {
            let length = *((object + OFFSET_LENGTH) as *const isize) as usize;
            Some(std::slice::from_raw_parts(
                (object + BYTES_DATA) as *const u8,
                length,
            ))
        }
    }

    /// Whether `object` is a float NaN (pandas' missing value in object columns).
    ///
    /// # Safety
    /// `object` must point to a live Python object.
    unsafe fn is_nan(&self, object: usize) -> bool {
        // SAFETY: PyFloatObject is PyObject_HEAD then a double.
        unsafe {
            Layout::type_of(object) == self.float_type
                && (*((object + FLOAT_VALUE) as *const f64)).is_nan()
        }
    }
}

/// Reads the layout once (at import, with the GIL).
pub fn init(py: Python<'_>) -> Layout {
    *LAYOUT.get_or_init(|| Layout::detect(py))
}

/// Whether the GIL-free path is on (false if the self-check failed).
pub fn direct_path_enabled(py: Python<'_>) -> bool {
    init(py).direct
}

/// What an object column holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ObjectKind {
    Str,
    Bytes,
}

/// A decoding failure, reported with the column name by the caller.
#[derive(Debug)]
pub enum DecodeError {
    /// A value of another type at `row`.
    WrongType { row: usize, type_name: String },
    /// A `str` with a lone surrogate at `row`.
    Surrogate { row: usize },
}

/// Decodes `objects` (a slice of the column's `PyObject*`s; `first_row` is the row number of
/// its first element) into a `Utf8View` or `BinaryView` array. `nulls` are extra sentinel
/// objects that mean NULL (pandas' `NA` and `NaT`), besides `None` and float NaN.
///
/// Runs without the GIL; objects it cannot read directly are converted under the GIL.
pub fn decode(
    objects: &[usize],
    first_row: usize,
    kind: ObjectKind,
    nulls: &[usize],
) -> std::result::Result<ArrayRef, DecodeError> {
    let Some(layout) = LAYOUT.get().copied() else {
        return Python::attach(|py| {
            init(py);
            decode(objects, first_row, kind, nulls)
        });
    };
    match kind {
        ObjectKind::Str => decode_str(&layout, objects, first_row, nulls),
        ObjectKind::Bytes => decode_bytes(&layout, objects, first_row, nulls),
    }
}

/// How many objects ahead of the one decoded the next are asked for. Each object is its own
/// allocation, so every one is a cache miss (ClickBench Q39 over object columns: 90% of the
/// decode's time on the load of the first object's type); a miss takes ~100 ns and a row's
/// decode ~10, so about ten must be on their way at once.
const OBJECTS_AHEAD: usize = 16;

/// Asks for the two cache lines of the object [`OBJECTS_AHEAD`] places after `index`: the header, and
/// the characters of a string up to ~90 bytes long.
#[inline(always)]
fn prefetch_ahead(objects: &[usize], index: usize) {
    if let Some(&object) = objects.get(index + OBJECTS_AHEAD) {
        let at = object as *const u8;
        quiver_agg::prefetch(at);
        quiver_agg::prefetch(at.wrapping_add(64));
    }
}

fn is_null(layout: &Layout, object: usize, nulls: &[usize]) -> bool {
    // SAFETY: `object` comes from the column's object array, which the table keeps alive.
    object == layout.none || nulls.contains(&object) || unsafe { layout.is_nan(object) }
}

fn decode_str(
    layout: &Layout,
    objects: &[usize],
    first_row: usize,
    nulls: &[usize],
) -> std::result::Result<ArrayRef, DecodeError> {
    let mut builder = StringViewBuilder::with_capacity(objects.len());
    let mut scratch = String::new();
    for (index, &object) in objects.iter().enumerate() {
        prefetch_ahead(objects, index);
        if is_null(layout, object, nulls) {
            builder.append_null();
            continue;
        }
        // SAFETY: live object (see is_null).
        let exact_str = unsafe { Layout::type_of(object) } == layout.str_type;
        if exact_str && layout.direct {
            // SAFETY: a live exact str.
            match unsafe { layout.read_str(object, &mut scratch) } {
                Ok(Some(text)) => {
                    builder.append_value(text);
                    continue;
                }
                Ok(None) => {}
                Err(()) => {
                    return Err(DecodeError::Surrogate {
                        row: first_row + index,
                    })
                }
            }
        }
        match slow_str(object) {
            SlowValue::Text(text) => builder.append_value(&text),
            SlowValue::Surrogate => {
                return Err(DecodeError::Surrogate {
                    row: first_row + index,
                })
            }
            SlowValue::WrongType(type_name) => {
                return Err(DecodeError::WrongType {
                    row: first_row + index,
                    type_name,
                })
            }
        }
    }
    Ok(Arc::new(builder.finish()))
}

fn decode_bytes(
    layout: &Layout,
    objects: &[usize],
    first_row: usize,
    nulls: &[usize],
) -> std::result::Result<ArrayRef, DecodeError> {
    let mut builder = BinaryViewBuilder::with_capacity(objects.len());
    for (index, &object) in objects.iter().enumerate() {
        prefetch_ahead(objects, index);
        if is_null(layout, object, nulls) {
            builder.append_null();
            continue;
        }
        // SAFETY: live object.
        if layout.direct && unsafe { Layout::type_of(object) } == layout.bytes_type {
            // SAFETY: a live exact bytes object.
            if let Some(data) = unsafe { layout.read_bytes(object) } {
                builder.append_value(data);
                continue;
            }
        }
        let value = Python::attach(|py| {
            // SAFETY: the object array keeps `object` alive; the GIL is held.
            let any = unsafe { Bound::from_borrowed_ptr(py, object as *mut pyo3::ffi::PyObject) };
            match any.cast::<PyBytes>() {
                Ok(bytes) => Ok(bytes.as_bytes().to_vec()),
                Err(_) => Err(type_name(&any)),
            }
        });
        match value {
            Ok(data) => builder.append_value(&data),
            Err(type_name) => {
                return Err(DecodeError::WrongType {
                    row: first_row + index,
                    type_name,
                })
            }
        }
    }
    Ok(Arc::new(builder.finish()))
}

enum SlowValue {
    Text(String),
    Surrogate,
    WrongType(String),
}

/// A `str` subclass, a non-compact string, or not a string at all: ask CPython, under the GIL.
fn slow_str(object: usize) -> SlowValue {
    Python::attach(|py| {
        // SAFETY: the object array keeps `object` alive; the GIL is held.
        let any = unsafe { Bound::from_borrowed_ptr(py, object as *mut pyo3::ffi::PyObject) };
        match any.cast::<PyString>() {
            Ok(text) => match text.to_cow() {
                Ok(text) => SlowValue::Text(text.into_owned()),
                Err(_) => SlowValue::Surrogate,
            },
            Err(_) => SlowValue::WrongType(type_name(&any)),
        }
    })
}

fn type_name(any: &Bound<'_, PyAny>) -> String {
    any.get_type()
        .name()
        .map(|name| name.to_string())
        .unwrap_or_else(|_| "<unknown>".to_string())
}
