"""``executemany`` for ``INSERT INTO t [(columns)] VALUES (?, ?, ...)`` in one statement.

Running the INSERT once per parameter row would plan and commit a statement per row (what
makes DuckDB's ``executemany`` take minutes for 100k rows). Instead the rows are gathered,
a chunk at a time, into Arrow record batches typed like the target columns, and appended with
one ``INSERT ... SELECT`` from those batches: one plan, one commit, one data file in a
database directory, and all rows or none.
"""

from __future__ import annotations

import itertools
import re
from operator import itemgetter

from quiver.errors import ConversionError, InvalidInputError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from quiver import Connection

# Rows converted per Arrow batch: big enough that pyarrow's per-call overhead vanishes, small
# enough that a generator's rows are released as they go.
CHUNK_ROWS = 65_536

# Run on the text after `?` became `$n` (quiver._params). The VALUES list must hold nothing
# but placeholders; anything else (expressions, several rows, ON CONFLICT) runs row by row.
_INSERT_VALUES = re.compile(
    r"""^\s*INSERT\s+INTO\s+(?P<table>[^\s(]+|"(?:[^"]|"")*"(?:\.[^\s(]+)*)\s*
        (?:\((?P<columns>[^()]*)\))?\s*
        VALUES\s*\((?P<values>[^()'"]*)\)\s*;?\s*$""",
    re.IGNORECASE | re.DOTALL | re.VERBOSE,
)
_PLACEHOLDER = re.compile(r"\$(?:(\d+)|([A-Za-z_]\w*))")


class InsertPlan:
    """The target of a bulk INSERT and, per target column, the placeholder filling it."""

    __slots__ = ("columns", "keys", "table")

    def __init__(self, table: str, columns: str | None, keys: list) -> None:
        self.table = table
        self.columns = columns
        self.keys = keys

    @staticmethod
    def of(sql: str) -> InsertPlan | None:
        """The plan for ``sql`` (with ``$n``/``$name`` placeholders), or None when ``sql`` is
        not a single-row ``INSERT ... VALUES`` of placeholders only."""
        match = _INSERT_VALUES.match(sql)
        if match is None:
            return None
        keys: list = []
        for item in match.group("values").split(","):
            placeholder = _PLACEHOLDER.fullmatch(item.strip())
            if placeholder is None:
                return None
            number, name = placeholder.groups()
            keys.append(int(number) - 1 if number else name)
        if len({type(k) for k in keys}) != 1:
            return None
        return InsertPlan(match.group("table"), match.group("columns"), keys)

    def run(self, connection: Connection, rows: Any, width: int) -> int:
        """Appends every parameter row of ``rows`` (sequences of ``width`` values, or dicts
        for ``$name``); returns how many. Nothing is appended if any row is bad."""
        import pyarrow as pa

        target = connection.sql(f"SELECT {self.columns or '*'} FROM {self.table} LIMIT 0").arrow()
        if target.num_columns != len(self.keys):
            # Let the engine report the mismatch as it would for a single execute().
            raise _Fallback
        types = [field.type for field in target.schema]
        names = [f"c{i}" for i in range(len(types))]
        schema = pa.schema([pa.field(n, t) for n, t in zip(names, types)])
        # Rows of tuples whose k-th value fills the k-th placeholder, each placeholder once,
        # convert in one pyarrow call (a struct array, split into its fields), with no Python
        # objects made per row or per value.
        struct = None
        if isinstance(self.keys[0], int) and sorted(self.keys) == list(range(width)):
            by_placeholder = [None] * width
            for key, type_ in zip(self.keys, types):
                by_placeholder[key] = type_
            struct = pa.struct([pa.field(f"p{k}", t) for k, t in enumerate(by_placeholder)])
        batches = []
        done = 0
        for chunk in _chunks(rows):
            arrays = _struct_arrays(chunk, struct, self.keys) if struct is not None else None
            if arrays is None:
                columns = self._columns(chunk, width, done)
                arrays = [
                    _array(values, type_, self.keys[i], done)
                    for i, (values, type_) in enumerate(zip(columns, types))
                ]
            batches.append(pa.RecordBatch.from_arrays(arrays, schema=schema))
            done += len(chunk)
        if done == 0:
            return 0
        # The engine finds the batches as this frame's variable (one underscore: two would be
        # mangled in a class), as it finds any DataFrame: a
        # registered table would land in a database directory's catalog.
        _quiver_executemany_rows = pa.Table.from_batches(batches, schema)
        into = f"{self.table} ({self.columns})" if self.columns is not None else self.table
        connection.sql(f"INSERT INTO {into} SELECT * FROM _quiver_executemany_rows")
        return done

    def _columns(self, chunk: list, width: int, first: int) -> list:
        """The chunk's values, one list per target column."""
        if isinstance(self.keys[0], str):
            columns = []
            for key in self.keys:
                try:
                    columns.append(list(map(_ValueOf(key), chunk)))
                except (KeyError, TypeError):
                    for index, row in enumerate(chunk):
                        if not isinstance(row, dict) or _ValueOf(key).missing(row):
                            raise InvalidInputError(
                                f"executemany: parameter row {first + index} has no value for "
                                f"${key}"
                            ) from None
                    raise
            return columns
        lengths = set(map(_length, chunk))
        if lengths != {width}:
            for index, row in enumerate(chunk):
                if _length(row) != width:
                    raise InvalidInputError(
                        f"executemany: parameter row {first + index} has "
                        f"{_describe_length(row)} but the statement has {width} placeholder(s)"
                    )
        # Not zip(*chunk): that makes an iterator object per row, and the garbage collector
        # then walks every live row again and again.
        return [list(map(itemgetter(key), chunk)) for key in self.keys]


class _Fallback(Exception):
    """The statement cannot take the bulk path; run it row by row."""


class _ValueOf:
    """``row[key]`` or ``row["$" + key]``, for dict parameter rows."""

    __slots__ = ("_get", "_key")

    def __init__(self, key: str) -> None:
        self._key = key
        self._get = itemgetter(key)

    def __call__(self, row: dict) -> Any:
        try:
            return self._get(row)
        except KeyError:
            return row["$" + self._key]

    def missing(self, row: dict) -> bool:
        return self._key not in row and "$" + self._key not in row


def _length(row: Any) -> int:
    if isinstance(row, (str, bytes, dict)):
        return -1
    try:
        return len(row)
    except TypeError:
        return -1


def _describe_length(row: Any) -> str:
    length = _length(row)
    if length < 0:
        return f"a {type(row).__name__} instead of a sequence of values"
    return f"{length} value(s)"


def _chunks(rows: Any):
    """Lists of up to CHUNK_ROWS rows; slices of a list or tuple, islices of anything else."""
    if isinstance(rows, (list, tuple)):
        for start in range(0, len(rows), CHUNK_ROWS):
            yield rows[start : start + CHUNK_ROWS]
        return
    iterator = iter(rows)
    while True:
        chunk = list(itertools.islice(iterator, CHUNK_ROWS))
        if not chunk:
            return
        yield chunk


def _struct_arrays(chunk: list, struct: Any, keys: list) -> list | None:
    """The chunk's columns through one struct conversion, or None when the chunk is not all
    tuples or pyarrow refuses it (the row-checking path then says which row is wrong)."""
    import pyarrow as pa

    # Only tuples: a dict would convert to a struct by key (all NULL here), silently.
    if set(map(type, chunk)) != {tuple}:
        return None
    try:
        fields = pa.array(chunk, type=struct).flatten()
    except _conversion_errors():
        return None
    return [fields[key] for key in keys]


def _array(values: Any, type_: Any, key: Any, first: int) -> Any:
    """``values`` as an Arrow array of the column's type. Values pyarrow cannot convert
    directly (a date given as text, an int for a string column) go through an array of their
    own Python type and a cast, much as the engine casts them in a single-row INSERT."""
    import pyarrow as pa

    try:
        return pa.array(values, type=type_)
    except _conversion_errors():
        pass
    # Convert each Python type's values on their own, then put the converted values back in
    # row order (through Python objects: only mixed-type columns come here).
    positions: dict[type, list[int]] = {}
    for index, value in enumerate(values):
        positions.setdefault(type(value), []).append(index)
    if len(positions) == 1:
        return _same_type_array(list(values), type_, key, first, list(range(len(values))))
    converted = [None] * len(values)
    for indices in positions.values():
        part = _same_type_array([values[i] for i in indices], type_, key, first, indices)
        for index, value in zip(indices, part.to_pylist()):
            converted[index] = value
    return pa.array(converted, type=type_)


def _same_type_array(values: list, type_: Any, key: Any, first: int, indices: list) -> Any:
    import pyarrow as pa

    for attempt in (lambda v: pa.array(v, type=type_), lambda v: pa.array(v).cast(type_)):
        try:
            return attempt(values)
        except _conversion_errors():
            pass
    label = f"${key + 1}" if isinstance(key, int) else f"${key}"
    for value, index in zip(values, indices):
        try:
            pa.array([value]).cast(type_)
        except _conversion_errors():
            raise ConversionError(
                f"executemany: parameter {label} of row {first + index}: "
                f"{type(value).__name__} value {value!r:.60} does not convert to {type_}"
            ) from None
    raise ConversionError(
        f"executemany: the {type(values[0]).__name__} values of parameter {label} do not "
        f"convert to {type_}"
    )


def _conversion_errors() -> tuple:
    import pyarrow as pa

    return (
        pa.ArrowInvalid,
        pa.ArrowTypeError,
        pa.ArrowNotImplementedError,
        OverflowError,
        TypeError,
        ValueError,
    )
