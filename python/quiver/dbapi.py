"""quiver as a PEP 249 (DB-API 2.0) module.

    import quiver.dbapi as db       # or just `import quiver`: the same names live there
    con = db.connect()              # in memory; db.connect("dir") for a database directory
    cur = con.cursor()
    cur.execute("CREATE TABLE t (i BIGINT, s VARCHAR)")
    cur.executemany("INSERT INTO t VALUES (?, ?)", ((i, str(i)) for i in range(100_000)))
    cur.execute("SELECT s FROM t WHERE i < ?", [3]).fetchall()

``paramstyle`` is ``"qmark"``; quiver's own ``$1`` and ``$name`` placeholders work too.

``threadsafety`` is 2: threads may share the module and connections (queries from several
threads on one connection run in parallel), but not cursors — a cursor holds the position in
one result, so give each thread its own.

Transactions: quiver commits every statement when it completes (autocommit), and each
statement is atomic — in memory, and in a database directory, where a statement's data files
are published by one catalog rename, so a failed or killed statement leaves the previous
state. There are no multi-statement transactions: ``BEGIN`` raises ``NotSupportedError``.
``Connection.commit()`` therefore has nothing to do, and ``Connection.rollback()`` succeeds
when there is nothing to undo (no statement changed anything since the last ``commit()`` or
``rollback()``) and raises ``NotSupportedError`` otherwise, rather than pretend it undid them.
"""

from __future__ import annotations

import datetime
import time

from quiver.errors import (
    DatabaseError,
    DataError,
    Error,
    IntegrityError,
    InterfaceError,
    InternalError,
    NotSupportedError,
    OperationalError,
    ProgrammingError,
    Warning,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import Any

    from quiver import Connection

__all__ = [
    "BINARY",
    "DATETIME",
    "NUMBER",
    "ROWID",
    "STRING",
    "Binary",
    "Connection",
    "Cursor",
    "DataError",
    "DatabaseError",
    "Date",
    "DateFromTicks",
    "Error",
    "IntegrityError",
    "InterfaceError",
    "InternalError",
    "NotSupportedError",
    "OperationalError",
    "ProgrammingError",
    "Time",
    "TimeFromTicks",
    "Timestamp",
    "TimestampFromTicks",
    "Warning",
    "apilevel",
    "connect",  # noqa: F822 (module __getattr__ below)
    "paramstyle",
    "threadsafety",
]

apilevel = "2.0"
threadsafety = 2
paramstyle = "qmark"


def __getattr__(name: str) -> Any:
    # `connect` and `Connection` live in the package, which imports this module first.
    if name in ("connect", "Connection"):
        import quiver

        return getattr(quiver, name)
    raise AttributeError(f"module 'quiver.dbapi' has no attribute {name!r}")


# --- constructors ----------------------------------------------------------------------------
Date = datetime.date
Time = datetime.time
Timestamp = datetime.datetime
Binary = bytes


def DateFromTicks(ticks: float) -> datetime.date:
    """The local date at ``ticks`` seconds since the epoch."""
    return Date(*time.localtime(ticks)[:3])


def TimeFromTicks(ticks: float) -> datetime.time:
    """The local time of day at ``ticks`` seconds since the epoch."""
    return Time(*time.localtime(ticks)[3:6])


def TimestampFromTicks(ticks: float) -> datetime.datetime:
    """The local date and time at ``ticks`` seconds since the epoch."""
    return Timestamp(*time.localtime(ticks)[:6])


# --- type objects ------------------------------------------------------------------------------
class _TypeObject:
    """Compares equal to the ``type_code`` (a ``pyarrow.DataType``) of every column of its
    kind, as PEP 249 asks: ``cursor.description[0][1] == quiver.NUMBER``."""

    __slots__ = ("_is", "_name")

    def __init__(self, name: str, *predicates: str) -> None:
        self._name = name
        self._is = predicates

    def __eq__(self, other: object) -> bool:
        if isinstance(other, _TypeObject):
            return other is self
        if not type(other).__module__.startswith("pyarrow"):
            return NotImplemented
        import pyarrow.types as types

        return any(getattr(types, predicate)(other) for predicate in self._is)

    def __ne__(self, other: object) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    def __hash__(self) -> int:
        return hash(self._name)

    def __repr__(self) -> str:
        return f"quiver.{self._name}"


STRING = _TypeObject("STRING", "is_string", "is_large_string", "is_string_view")
BINARY = _TypeObject(
    "BINARY", "is_binary", "is_large_binary", "is_fixed_size_binary", "is_binary_view"
)
NUMBER = _TypeObject("NUMBER", "is_integer", "is_floating", "is_decimal")
DATETIME = _TypeObject("DATETIME", "is_date", "is_time", "is_timestamp")
# quiver tables have no row ids: no column is of this type.
ROWID = _TypeObject("ROWID")


def _description(schema: Any) -> list[tuple]:
    """PEP 249's seven-tuples: name, type_code, display_size, internal_size, precision,
    scale, null_ok."""
    import pyarrow.types as types

    columns = []
    for field in schema:
        type_ = field.type
        try:
            internal_size = type_.byte_width
        except ValueError:  # variable width
            internal_size = None
        precision = scale = None
        if types.is_decimal(type_):
            precision, scale = type_.precision, type_.scale
        columns.append((field.name, type_, None, internal_size, precision, scale, field.nullable))
    return columns


# --- cursor --------------------------------------------------------------------------------------
class Cursor:
    """Runs statements on a connection and fetches their rows as tuples.

    ``execute`` runs the statement to its end, so its errors are raised there and
    ``rowcount`` is known: the rows a query returned, the rows an INSERT appended, -1 for
    other statements.
    """

    __slots__ = (
        "_buffer",
        "_closed",
        "_next",
        "_position",
        "_ran",
        "_table",
        "arraysize",
        "connection",
        "description",
        "rowcount",
    )

    # Rows turned into tuples at a time: one Arrow-to-Python conversion per this many rows
    # (per-row conversion would cost more than the query).
    _CONVERT_ROWS = 1024

    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        #: Rows ``fetchmany()`` returns by default.
        self.arraysize = 1
        self.description: list[tuple] | None = None
        self.rowcount = -1
        self._table: Any = None
        self._position = 0  # rows of _table converted into _buffer so far
        self._buffer: list[tuple] = []
        self._next = 0  # the next row of _buffer to hand out
        self._ran = False
        self._closed = False

    @property
    def lastrowid(self) -> None:
        """Always None: quiver tables have no row ids."""
        return None

    # --- running statements -------------------------------------------------------------
    def execute(self, operation: str, parameters: Any = None) -> Cursor:
        """Runs ``operation`` with ``parameters`` (a sequence for ``?`` and ``$1``, a dict
        for ``$name``); returns the cursor, so ``cur.execute(...).fetchall()`` works."""
        connection = self._check()
        self._reset()
        result = connection.sql(operation, _sequence(parameters), _depth=2)
        self._take(result)
        return self

    def executemany(self, operation: str, seq_of_parameters: Any) -> Cursor:
        """Runs ``operation`` once per parameter row of ``seq_of_parameters`` (any iterable,
        generators included).

        ``INSERT INTO t [(columns)] VALUES (?, ...)`` with only placeholders in VALUES is one
        statement however many rows: they are gathered into Arrow batches and appended
        together, all or none. Other statements run once per row.
        """
        import itertools

        from quiver._executemany import InsertPlan, _Fallback
        from quiver._params import Placeholders

        connection = self._check()
        self._reset()
        placeholders = Placeholders(operation)
        plan = InsertPlan.of(placeholders.sql)
        if plan is not None:
            if isinstance(seq_of_parameters, (list, tuple)):
                rows = seq_of_parameters  # sliced into chunks without copying rows one by one
                first = rows[0] if rows else _NO_ROWS
            else:
                iterator = iter(seq_of_parameters)
                first = next(iterator, _NO_ROWS)
                rows = itertools.chain((first,), iterator)
            if first is _NO_ROWS:
                self._ran = True
                self.rowcount = 0
                return self
            placeholders.check(_sequence(first))
            try:
                count = plan.run(connection, rows, placeholders.positional)
            except _Fallback:
                seq_of_parameters = rows
            else:
                self._ran = True
                self.rowcount = count
                return self
        total = 0
        counted = True
        for parameters in seq_of_parameters:
            result = connection.sql(operation, _sequence(parameters), _depth=2)
            self._take(result)
            counted = counted and self.rowcount >= 0
            total += max(self.rowcount, 0)
        self.rowcount = total if counted else -1
        return self

    def _take(self, result: Any) -> None:
        self._ran = True
        if result._handle.returns_rows:
            table = result.arrow()
            self._table = table
            self.description = _description(table.schema)
            self.rowcount = table.num_rows
        else:
            affected = result._handle.rows_affected
            self.rowcount = -1 if affected is None else affected

    def _reset(self) -> None:
        self._table = None
        self._position = 0
        self._buffer = []
        self._next = 0
        self._ran = False
        self.description = None
        self.rowcount = -1

    # --- fetching ----------------------------------------------------------------------------
    def fetchone(self) -> tuple | None:
        """The next row, or None after the last."""
        self._rows_table()
        if self._next == len(self._buffer) and not self._fill(1):
            return None
        row = self._buffer[self._next]
        self._next += 1
        return row

    def fetchmany(self, size: int | None = None) -> list[tuple]:
        """The next ``size`` rows (default ``arraysize``); fewer, or none, at the end."""
        self._rows_table()
        if size is None:
            size = self.arraysize
        if size < 0:
            raise ProgrammingError(f"fetchmany: size must be 0 or more, not {size}")
        rows: list[tuple] = []
        while len(rows) < size:
            if self._next == len(self._buffer) and not self._fill(size - len(rows)):
                break
            part = self._buffer[self._next : self._next + size - len(rows)]
            self._next += len(part)
            rows.extend(part)
        return rows

    def fetchall(self) -> list[tuple]:
        """Every remaining row."""
        table = self._rows_table()
        rows = self._buffer[self._next :]
        self._buffer, self._next = [], 0
        if self._fill(table.num_rows - self._position):
            rows.extend(self._buffer)
            self._buffer = []
        return rows

    def _rows_table(self) -> Any:
        self._check()
        if self._table is None:
            if not self._ran:
                raise ProgrammingError(
                    "no statement has been executed on this cursor (or the last one failed)"
                )
            raise ProgrammingError("the last statement returned no rows to fetch")
        return self._table

    def _fill(self, wanted: int) -> int:
        """Replaces ``_buffer`` with the next ``wanted`` rows or more (whole chunks of
        ``_CONVERT_ROWS``) as tuples; returns how many (0 at the end)."""
        table = self._table
        count = min(max(wanted, self._CONVERT_ROWS), table.num_rows - self._position)
        if count <= 0:
            return 0
        part = table.slice(self._position, count)
        self._position += count
        columns = [column.to_pylist() for column in part.columns]
        self._buffer = list(zip(*columns)) if columns else [() for _ in range(count)]
        self._next = 0
        return count

    def __iter__(self) -> Iterator[tuple]:
        return self

    def __next__(self) -> tuple:
        row = self.fetchone()
        if row is None:
            raise StopIteration
        return row

    # --- the rest of PEP 249 ---------------------------------------------------------------
    def setinputsizes(self, sizes: Any) -> None:
        """Accepted and ignored: parameters are typed by their Python values."""
        self._check()

    def setoutputsize(self, size: int, column: int | None = None) -> None:
        """Accepted and ignored: quiver returns whole values."""
        self._check()

    setoutputsizes = setoutputsize

    def close(self) -> None:
        """Frees the rows; later calls on the cursor raise ``ProgrammingError``."""
        self._closed = True
        self._reset()

    def __enter__(self) -> Cursor:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _check(self) -> Connection:
        if self._closed:
            raise ProgrammingError("the cursor is closed")
        self.connection._check()
        return self.connection


_NO_ROWS = object()


def _sequence(parameters: Any) -> Any:
    """Parameters as the engine takes them: None, a dict, or a list."""
    if parameters is None or isinstance(parameters, (dict, list, tuple)):
        return parameters
    if isinstance(parameters, (str, bytes)):
        return parameters  # refused with a clear message by the placeholder check
    try:
        return list(parameters)
    except TypeError:
        return parameters
