"""Python objects as tables: what each kind of object becomes, column by column.

The Rust extension calls :func:`normalize` with the GIL held. It returns either
``("stream", description, producer)`` for anything that speaks the Arrow PyCapsule stream
protocol, or ``("columns", description, num_rows, specs[, live])`` with one spec per column
(``live``: every spec reads the object's own memory, so the table may be reused, see
:func:`table`):

* ``("numpy", name, array, mask, tz, nan_as_null)``: a contiguous 1-D NumPy array of numbers,
  bools, datetime64 or timedelta64; wrapped without copying. ``mask`` (True = missing) is a
  pandas masked array's mask.
* ``("objects", name, array, "str" | "bytes", null_objects)``: an object array of ``str`` or
  ``bytes``, decoded on worker threads without the GIL.
* ``("arrow", name, chunks)``: Arrow-backed pandas columns, imported without copying.
* ``("categorical", name, codes, categories_spec)``: a dictionary-encoded column.
* ``("decimal", name, scaled_ints, precision, scale)``: ``decimal.Decimal`` objects.
* ``("deferred", name, sample_spec, convert, array)``: an object array of bools, ints, floats,
  dates or datetimes, typed like ``sample_spec`` (its first value) and converted by
  ``convert(copy_of_array)`` only when a scan reads it; the conversion is reused while the array
  holds the same objects (see :func:`_object_column`).

Only the modules an object comes from are imported: ``import quiver`` imports none of pandas,
NumPy, pyarrow or polars.
"""

from __future__ import annotations

import datetime
import decimal
import operator
import sys
import weakref
from typing import Any

from quiver.errors import ConversionError, InvalidInputError

_TABLE_TYPES = {
    ("pandas", "DataFrame"),
    ("pandas", "Series"),
    ("polars", "DataFrame"),
    ("polars", "LazyFrame"),
    ("pyarrow", "Table"),
    ("pyarrow", "RecordBatch"),
    ("pyarrow", "RecordBatchReader"),
    ("pyarrow", "Dataset"),
    ("pyarrow", "FileSystemDataset"),
    ("pyarrow", "InMemoryDataset"),
    ("pyarrow", "UnionDataset"),
    ("numpy", "ndarray"),
}


def _kind(obj: Any) -> tuple[str, str]:
    cls = type(obj)
    return cls.__module__.split(".")[0], cls.__name__


def is_table_like(obj: Any) -> bool:
    """Whether a variable is something a query can read by its name (DataFrame-like)."""
    if _kind(obj) in _TABLE_TYPES:
        return True
    if isinstance(obj, type):
        return False
    return hasattr(obj, "__arrow_c_stream__")


def can_scan(obj: Any) -> bool:
    """Whether :func:`normalize` accepts the object (table-like objects and dicts of columns)."""
    return is_table_like(obj) or (
        isinstance(obj, dict) and bool(obj) and all(isinstance(k, str) for k in obj)
    )


# --- tables reused across queries ------------------------------------------------------------

_CACHE_LIMIT = 64
_cache: dict = {}  # id(object) -> (weakref to it, fingerprint, _quiver.Table, _Layout or None)


def table(obj: Any, words: Any = None):
    """The engine's table for ``obj``. Building one costs milliseconds for a wide frame, so it is
    kept (under a weak reference: it never keeps the object alive) and reused while the object's
    columns are still the same arrays. A table reads those arrays where they live at every
    scan, so values changed in place are seen; a column replaced, added, dropped or renamed, or
    a changed row count, gives a different fingerprint and a new table. Object columns of dates,
    datetimes and numbers are converted when first read and again after a value changed (see
    :func:`_object_column`). Objects whose columns had to be converted up front (categoricals,
    decimals, 2-D arrays, dicts, ...) and objects that can change without a visible trace
    (polars frames, datasets) are converted at every query.

    ``words``: the lowercased words of a query that can only reach the columns they name (the
    engine then shows it no others). A DataFrame whose block layout is unchanged is then
    checked only in the blocks of those columns: a full check walks every column of a wide
    frame, which cost a ``SELECT count(*)`` a sixth of its time."""
    from quiver import _quiver

    if _kind(obj) == ("pyarrow", "RecordBatchReader"):
        return _read_once(obj)
    key = id(obj)
    entry = _cache.get(key)
    if entry is not None and entry[0]() is obj:
        if words is not None and entry[3] is not None and entry[3].unchanged(obj, words):
            return entry[2]
        fingerprint = _fingerprint(obj)
        if fingerprint is not None and _same(entry[1], fingerprint):
            if entry[3] is None or not entry[3].same_layout(obj):
                _cache[key] = (*entry[:3], _Layout.of(obj))
            return entry[2]
    else:
        fingerprint = _fingerprint(obj)
    built = _quiver.Table(obj)
    if fingerprint is None or not built.reusable:
        return built
    try:
        ref = weakref.ref(obj, _forget(key))
    except TypeError:
        return built
    if key not in _cache and len(_cache) >= _CACHE_LIMIT:
        _cache.pop(next(iter(_cache)))
    _cache[key] = (ref, fingerprint, built, _Layout.of(obj))
    return built


class _Layout:
    """A cached DataFrame's block layout, for checking only the columns a query names: while
    the block manager, its tuple of blocks (pandas makes a new one whenever a column is added,
    dropped, moved or replaced by another block), the column labels and the row index are the
    same objects, a named column can only have changed within its own block, which
    :func:`_block_parts` covers as the full fingerprint does."""

    __slots__ = ("blocks", "by_word", "columns", "index", "manager", "parts")

    @staticmethod
    def of(obj: Any) -> _Layout | None:
        if _kind(obj) != ("pandas", "DataFrame"):
            return None
        try:
            manager = obj._mgr
            blocks = manager.blocks
            numbers = manager.blknos
            layout = _Layout()
            layout.manager = manager
            layout.blocks = blocks
            layout.columns = obj.columns
            layout.index = obj.index
            layout.parts = [_block_parts(block) for block in blocks]
            by_word: dict = {}
            for position, label in enumerate(obj.columns):
                by_word.setdefault(str(label).lower(), set()).add(int(numbers[position]))
            layout.by_word = by_word
            return layout
        except (AttributeError, IndexError, TypeError):
            return None  # another pandas layout: always the full check

    def same_layout(self, obj: Any) -> bool:
        manager = getattr(obj, "_mgr", None)
        return (
            manager is self.manager
            and getattr(manager, "blocks", None) is self.blocks
            and obj.columns is self.columns
            and obj.index is self.index
        )

    def unchanged(self, obj: Any, words: Any) -> bool:
        if not self.same_layout(obj):
            return False
        for word in words:
            for number in self.by_word.get(word, ()):
                now = _block_parts(self.blocks[number])
                if not all(map(operator.is_, now, self.parts[number])):
                    return False
        return True


def _block_parts(block: Any) -> tuple:
    """What must stay the same objects for a block's column(s) to be unchanged."""
    values = block.values
    return (
        block.mgr_locs,
        values,
        values.dtype,
        # pandas' extension arrays swap these on assignment instead of writing in place.
        getattr(values, "_pa_array", None),
        getattr(values, "_ndarray", None),
        getattr(values, "_data", None),
        getattr(values, "_mask", None),
    )


_consumed: weakref.WeakSet = weakref.WeakSet()


def _read_once(reader: Any):
    """A RecordBatchReader yields its rows once: a second query over it would see an empty
    table, a silently wrong answer, so it is an error instead (as reading it twice in pyarrow)."""
    from quiver import _quiver

    if reader in _consumed:
        raise InvalidInputError(
            "this RecordBatchReader was already read by an earlier query and is now empty; "
            "make a new reader, or query a pyarrow Table (reader.read_all()) to read it again"
        )
    _consumed.add(reader)
    return _quiver.Table(reader)


def _forget(key: int):
    # The cache itself, not the module global: at interpreter exit the module's globals may
    # be cleared before the last frames die and call this.
    cache = _cache

    def callback(ref: Any) -> None:
        entry = cache.get(key)
        if entry is not None and entry[0] is ref:
            del cache[key]

    return callback


def _same(old: tuple, new: tuple) -> bool:
    if len(old) != len(new):
        return False
    for a, b in zip(old, new):
        if a is b:
            continue
        if type(a) is type(b) and isinstance(a, (int, str, tuple)) and a == b:
            continue
        return False
    return True


def _fingerprint(obj: Any):
    """What must stay identical for a cached table to still describe ``obj``; None when the
    object's kind is never cached. The cache holds these objects, so identity is exact."""
    module, name = _kind(obj)
    if module == "pyarrow" and name in ("Table", "RecordBatch"):
        return ()  # immutable
    if module == "numpy" and name == "ndarray":
        interface = obj.__array_interface__
        return (interface["typestr"], interface["shape"], interface["data"][0], obj.strides)
    if module == "pandas" and name == "DataFrame":
        blocks = getattr(getattr(obj, "_mgr", None), "blocks", None)
        if blocks is None:
            return None
        parts: list = [obj.columns, len(obj)]
        for block in blocks:
            parts.extend(_block_parts(block))
        return tuple(parts)
    return None


def normalize(obj: Any):
    module, name = _kind(obj)
    description = f"{module}.{name}"
    if module == "pandas" and name == "DataFrame":
        return _pandas_frame(obj, description)
    if module == "pandas" and name == "Series":
        return _pandas_frame(obj.to_frame(), description)[:4]
    if module == "polars" and name == "LazyFrame":
        return ("stream", description, obj.collect())
    if module == "pyarrow" and name.endswith("Dataset"):
        return ("dataset", description, obj)
    if module == "numpy" and name == "ndarray":
        return _numpy_array(obj, description)
    if isinstance(obj, dict):
        return _dict_of_columns(obj)
    if hasattr(obj, "__arrow_c_stream__"):
        return ("stream", description, obj)
    raise InvalidInputError(
        f"cannot query a {description}: expected a pandas or polars DataFrame, a pyarrow "
        "Table/RecordBatch/Dataset, a NumPy array, a dict of columns, or an object with "
        "__arrow_c_stream__"
    )


# --- pyarrow datasets, read lazily by the engine ------------------------------------------------


def dataset_fragments(dataset: Any) -> int:
    return sum(1 for _ in dataset.get_fragments())


def dataset_readers(dataset: Any, columns: list, partitions: int, partition: int) -> list:
    """Readers of the fragments of partition ``partition`` of ``partitions``, with only
    ``columns``; opened here, read by the engine without the GIL."""
    import pyarrow.dataset as pds

    fragments = list(dataset.get_fragments())[partition::partitions]
    return [
        pds.Scanner.from_fragment(f, schema=dataset.schema, columns=columns).to_reader()
        for f in fragments
    ]


# --- pandas -------------------------------------------------------------------------------


def _pandas_frame(df: Any, description: str):
    names = [_column_name(c) for c in df.columns]
    specs = []
    live = True
    for i, name in enumerate(names):
        spec, column_live = _pandas_column(name, df.iloc[:, i])
        specs.append(spec)
        live = live and column_live
    return ("columns", description, len(df), specs, live)


def _column_name(label: Any) -> str:
    if isinstance(label, str):
        return label
    if isinstance(label, tuple):  # MultiIndex columns
        return "_".join(str(part) for part in label)
    return str(label)


def _pandas_column(name: str, series: Any):
    """The column's spec, and whether it reads the frame's own memory (True) or a conversion
    made here (False: a table built from it must not outlive this query)."""
    import numpy as np
    import pandas as pd

    dtype = series.dtype
    array = series.array
    if isinstance(dtype, pd.CategoricalDtype):
        codes = np.ascontiguousarray(series.cat.codes.to_numpy())
        categories, _ = _pandas_column(name, pd.Series(series.cat.categories))
        return ("categorical", name, codes, _eager(categories)), False
    if hasattr(array, "__arrow_array__") and _arrow_backed(array):
        chunked = array.__arrow_array__()
        return ("arrow", name, list(getattr(chunked, "chunks", [chunked]))), True
    if isinstance(dtype, pd.StringDtype):
        # StringDtype("python"): an object array of str, with pd.NA (or NaN) for missing.
        values = getattr(array, "_ndarray", None)
        if values is None:
            values = np.asarray(array, dtype=object)
        contiguous = np.ascontiguousarray(values)
        spec = ("objects", name, contiguous, "str", _null_objects())
        return spec, contiguous is getattr(array, "_ndarray", None)
    if isinstance(dtype, pd.DatetimeTZDtype):
        utc = getattr(array, "_ndarray", None)  # the UTC instants, as datetime64
        if utc is None or utc.ndim != 1:
            utc = series.dt.tz_convert("UTC").dt.tz_localize(None).to_numpy()
        contiguous = np.ascontiguousarray(utc)
        spec = ("numpy", name, contiguous, None, str(dtype.tz), False)
        return spec, contiguous is getattr(array, "_ndarray", None)
    mask = getattr(array, "_mask", None)
    data = getattr(array, "_data", None)
    if mask is not None and data is not None:  # Int64, boolean, Float64 ...
        contiguous = (np.ascontiguousarray(data), np.ascontiguousarray(mask))
        spec = ("numpy", name, contiguous[0], contiguous[1], None, False)
        return spec, contiguous[0] is data and contiguous[1] is mask
    if isinstance(dtype, np.dtype):
        values = series.to_numpy()
        spec = _numpy_column(name, values, nan_as_null=True)
        # to_numpy() of a NumPy-backed column is a view of the frame's block.
        kept = spec[4] if spec[0] == "deferred" else spec[2]
        return spec, spec[0] in ("numpy", "objects", "deferred") and kept is values
    raise ConversionError(f'column "{name}": pandas dtype {dtype} is not supported')


def _arrow_backed(array: Any) -> bool:
    import pandas as pd

    dtype = array.dtype
    if isinstance(dtype, pd.ArrowDtype):
        return True
    return isinstance(dtype, pd.StringDtype) and dtype.storage == "pyarrow"


def _null_objects() -> list:
    nulls = []
    pandas = sys.modules.get("pandas")
    if pandas is not None:
        nulls.extend([pandas.NA, pandas.NaT])
    return nulls


# --- NumPy and plain Python ------------------------------------------------------------------


def _numpy_column(name: str, values: Any, nan_as_null: bool = False):
    import numpy as np

    kind = values.dtype.kind
    if values.ndim != 1:
        raise ConversionError(f'column "{name}": expected a 1-D array, got {values.ndim}-D')
    if kind in "US":  # fixed-width NumPy strings
        values = values.astype(object)
        kind = "O"
    if kind == "O":
        return _object_column(name, np.ascontiguousarray(values))
    if kind not in "biufmM":
        raise ConversionError(f'column "{name}": NumPy dtype {values.dtype} is not supported')
    if not values.dtype.isnative:
        values = values.astype(values.dtype.newbyteorder("="))
    return ("numpy", name, np.ascontiguousarray(values), None, None, nan_as_null)


def _numpy_array(array: Any, description: str):
    import numpy as np

    if array.dtype.names:  # structured / record array
        specs = [_numpy_column(n, np.ascontiguousarray(array[n])) for n in array.dtype.names]
        return ("columns", description, len(array), specs)
    if array.ndim == 1:
        spec = _numpy_column("column0", array)
        return ("columns", description, len(array), [spec], spec[2] is array)
    if array.ndim == 2:
        specs = [
            _numpy_column(f"column{j}", np.ascontiguousarray(array[:, j]))
            for j in range(array.shape[1])
        ]
        return ("columns", description, array.shape[0], specs)
    raise InvalidInputError(f"cannot query a {array.ndim}-D NumPy array (only 1-D and 2-D)")


def _dict_of_columns(columns: dict):
    import numpy as np

    specs = []
    length = None
    for name, values in columns.items():
        if not isinstance(values, np.ndarray):
            values = list(values)
            if any(isinstance(v, (str, bytes, decimal.Decimal)) or v is None for v in values):
                values = np.array(values, dtype=object)
            else:
                values = np.asarray(values)
        if length is None:
            length = len(values)
        elif len(values) != length:
            raise InvalidInputError(
                f'column "{name}" has {len(values)} values, the first column {length}'
            )
        specs.append(_numpy_column(str(name), values))
    return ("columns", "dict", length or 0, specs)


def _is_null(value: Any) -> bool:
    if value is None:
        return True
    if isinstance(value, float) and value != value:
        return True
    pandas = sys.modules.get("pandas")
    return pandas is not None and (value is pandas.NA or value is pandas.NaT)


def _object_column(name: str, values: Any):
    """An object column: str/bytes go to the GIL-free decoder; other types are checked and
    converted here (a mixed column is an error naming the first offending row).

    Bools, ints, floats, dates and datetimes are converted only if a query reads the column: the
    spec is ``("deferred", name, spec of the first value, convert, values)``, which fixes the
    column's type now; the engine runs ``convert(copy of values)`` when a scan needs the column,
    and reuses that conversion while ``values`` holds the same (immutable) objects. (pandas reads
    Parquet dates as objects, so ``SELECT count(*)`` over such a frame would otherwise convert
    the dates at every query.) Decimals are converted now: their precision and scale need every
    value."""
    import functools

    import numpy as np

    first = None
    for value in values:
        if not _is_null(value):
            first = value
            break
    if first is None or isinstance(first, str):
        return ("objects", name, values, "str", _null_objects())
    if isinstance(first, bytes):
        return ("objects", name, values, "bytes", _null_objects())
    if isinstance(first, decimal.Decimal):
        return _converted_objects(name, first, values)
    sample = _converted_objects(name, first, np.array([first], dtype=object))
    convert = functools.partial(_converted_objects, name, first)
    return ("deferred", name, sample, convert, values)


def _eager(spec: tuple) -> tuple:
    """The spec with a deferred conversion done now."""
    return spec[3](spec[4]) if spec[0] == "deferred" else spec


def _converted_objects(name: str, first: Any, values: Any):
    """The spec of an object column of bools, ints, floats, decimals, datetimes or dates, whose
    first non-null value is ``first``: converted, every value checked."""
    import numpy as np

    def check(types: tuple, label: str) -> np.ndarray:
        mask = np.zeros(len(values), dtype=bool)
        for row, value in enumerate(values):
            if _is_null(value):
                mask[row] = True
            elif (
                not isinstance(value, types)
                or (label == "int" and isinstance(value, bool))
                or (label == "date" and isinstance(value, datetime.datetime))
            ):
                raise ConversionError(
                    f'column "{name}", row {row}: expected {label} (or None), '
                    f"got a Python {type(value).__name__}"
                )
        return mask

    if isinstance(first, bool):
        mask = check((bool, np.bool_), "bool")
        data = np.array([bool(v) if not m else False for v, m in zip(values, mask)], dtype=bool)
        return ("numpy", name, data, mask, None, False)
    if isinstance(first, int):
        mask = check((int, np.integer), "int")
        try:
            data = np.array([int(v) if not m else 0 for v, m in zip(values, mask)], dtype=np.int64)
        except OverflowError as error:
            raise ConversionError(f'column "{name}": an integer does not fit in 64 bits') from error
        return ("numpy", name, data, mask, None, False)
    if isinstance(first, float):
        mask = check((float, int, np.floating), "float")
        data = np.array(
            [float(v) if not m else 0.0 for v, m in zip(values, mask)], dtype=np.float64
        )
        return ("numpy", name, data, mask, None, False)
    if isinstance(first, decimal.Decimal):
        return _decimal_column(name, values, check((decimal.Decimal,), "Decimal"))
    if isinstance(first, datetime.datetime):
        mask = check((datetime.datetime,), "datetime")
        aware = first.tzinfo is not None
        micros = []
        for value, missing in zip(values, mask):
            if missing:
                micros.append(0)
                continue
            if (value.tzinfo is not None) != aware:
                raise ConversionError(
                    f'column "{name}": mixes datetimes with and without a time zone'
                )
            if aware:
                value = value.astimezone(datetime.timezone.utc).replace(tzinfo=None)
            micros.append(np.datetime64(value, "us").astype(np.int64))
        data = np.array(micros, dtype=np.int64).view("datetime64[us]")
        return ("numpy", name, data, mask, "UTC" if aware else None, False)
    if isinstance(first, datetime.date):
        # pandas reads Parquet date32 columns as objects of datetime.date: convert them in C
        # when the column holds nothing else (checked by type, so a datetime is never truncated),
        # a million values at a time: Ctrl-C is seen between two C calls, and the chunks are
        # whole morsels.
        step = 1_000_000
        pieces = [values[i : i + step] for i in range(0, len(values), step)] or [values]
        if all(set(map(type, piece)) <= {datetime.date, type(None)} for piece in pieces):
            try:
                import pyarrow as pa
            except ImportError:
                data = np.array(values, dtype="datetime64[D]")  # None -> NaT -> NULL
                return ("numpy", name, data, None, None, False)
            return ("arrow", name, [pa.array(piece, type=pa.date32()) for piece in pieces])
        mask = check((datetime.date,), "date")
        days = [
            0 if missing else np.datetime64(value, "D").astype(np.int64)
            for value, missing in zip(values, mask)
        ]
        data = np.array(days, dtype=np.int64).view("datetime64[D]")
        return ("numpy", name, data, mask, None, False)
    raise ConversionError(
        f'column "{name}": values of Python type {type(first).__name__} are not supported'
    )


def _decimal_column(name: str, values: Any, mask: Any):
    scale = 0
    digits = 1
    for value, missing in zip(values, mask):
        if missing:
            continue
        if not value.is_finite():
            raise ConversionError(f'column "{name}": Decimal {value} is not a finite number')
        sign, value_digits, exponent = value.as_tuple()
        scale = max(scale, -exponent)
        digits = max(digits, len(value_digits) + exponent)
    precision = digits + scale
    if precision > 38:
        raise ConversionError(
            f'column "{name}": Decimal values need {precision} digits; decimal128 holds 38'
        )
    scaled = []
    for value, missing in zip(values, mask):
        if missing:
            scaled.append(None)
            continue
        sign, value_digits, exponent = value.as_tuple()
        unscaled = int("".join(map(str, value_digits)) or "0") * 10 ** (exponent + scale)
        scaled.append(-unscaled if sign else unscaled)
    return ("decimal", name, scaled, max(precision, 1), scale)
