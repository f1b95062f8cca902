"""quiver: an in-process OLAP SQL engine for Python, on Apache DataFusion.

    import pandas as pd, quiver
    df = pd.DataFrame({"a": [1, 2, 3], "b": ["x", "y", "x"]})
    quiver.sql("SELECT b, sum(a) FROM df GROUP BY b").df()

Queries read pandas/polars DataFrames, NumPy arrays and Arrow tables in the caller's scope by
their variable names (without copying), Parquet/CSV/JSON/Arrow/ORC files by path, and run on
every core with the GIL released. ``import quiver`` imports none of pandas, NumPy, pyarrow or
polars; they are imported when a query first needs them.
"""

from __future__ import annotations

import _thread
import atexit

from quiver._result import Result
from quiver.dbapi import (
    BINARY,
    DATETIME,
    NUMBER,
    ROWID,
    STRING,
    Binary,
    Cursor,
    Date,
    DateFromTicks,
    Time,
    TimeFromTicks,
    Timestamp,
    TimestampFromTicks,
    apilevel,
    paramstyle,
    threadsafety,
)
from quiver.errors import (
    CatalogError,
    ConversionError,
    DatabaseDirectoryError,
    DatabaseError,
    DataError,
    Error,
    ExecutionError,
    IntegrityError,
    InterfaceError,
    InternalError,
    InvalidInputError,
    IOError,
    NotImplementedError,
    NotSupportedError,
    OperationalError,
    OutOfMemoryError,
    ParserError,
    ProgrammingError,
    QueryCancelled,
    Warning,
)

# Not `from typing import TYPE_CHECKING`: importing typing costs ~10 ms at `import quiver`.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__version__ = "0.1.0"

__all__ = [
    "BINARY",
    "DATETIME",
    "NUMBER",
    "ROWID",
    "STRING",
    "Binary",
    "CatalogError",
    "Connection",
    "ConversionError",
    "Cursor",
    "DataError",
    "DatabaseDirectoryError",
    "DatabaseError",
    "Date",
    "DateFromTicks",
    "Error",
    "ExecutionError",
    "IOError",
    "IntegrityError",
    "InterfaceError",
    "InternalError",
    "InvalidInputError",
    "NotImplementedError",
    "NotSupportedError",
    "OperationalError",
    "OutOfMemoryError",
    "ParserError",
    "ProgrammingError",
    "QueryCancelled",
    "Result",
    "Time",
    "TimeFromTicks",
    "Timestamp",
    "TimestampFromTicks",
    "Warning",
    "apilevel",
    "connect",
    "paramstyle",
    "query",
    "register",
    "set_progress_bar",
    "sql",
    "threadsafety",
    "unregister",
]


class Connection:
    """A quiver session: in memory, or over a persistent database directory.

    Several threads may run queries on one connection at once; they run in parallel. It is
    also a PEP 249 connection (see :mod:`quiver.dbapi`): ``cursor()``, ``commit()``,
    ``rollback()``, ``close()``.
    """

    __slots__ = ("__weakref__", "_changed", "_connection")

    def __init__(
        self,
        database: str | None = None,
        *,
        read_only: bool = False,
        threads: int | None = None,
    ) -> None:
        from quiver import _quiver

        self._connection = _quiver.Connection(database, read_only, threads)
        # Whether a statement changed something since the last commit() or rollback().
        self._changed = False

    def sql(self, query: str, params: Any = None, *, _depth: int = 1) -> Result:
        """Runs ``query`` (several ``;``-separated statements run in order; the last one's
        result is returned). ``params`` fills ``?`` and ``$1``, ``$2``... placeholders from a
        list or tuple, and ``$name`` ones from a dict. Table names not in the catalog are
        looked up among the caller's variables."""
        from quiver._params import Placeholders
        from quiver._scope import Resolver

        native = self._check()
        placeholders = Placeholders(query)
        placeholders.check(params)
        resolver = Resolver(_depth)
        try:
            result = Result(native.execute(placeholders.sql, params, resolver))
        finally:
            resolver.close()
        if not result._handle.returns_rows:
            self._changed = True
        return result

    execute = sql

    def cursor(self) -> Cursor:
        """A new DB-API cursor on this connection."""
        self._check()
        return Cursor(self)

    def commit(self) -> None:
        """Nothing to do: every statement commits when it completes (see :mod:`quiver.dbapi`)."""
        self._check()
        self._changed = False

    def rollback(self) -> None:
        """Succeeds if no statement changed anything since the last ``commit()`` or
        ``rollback()``; otherwise raises ``NotSupportedError``: those statements committed
        when they completed and cannot be undone."""
        self._check()
        if self._changed:
            raise NotSupportedError(
                "rollback: quiver commits every statement when it completes and has no "
                "multi-statement transactions, so the changes made since the last commit() "
                "cannot be undone"
            )

    def _check(self) -> Any:
        native = self._connection
        if native is None:
            raise ProgrammingError("the connection is closed")
        return native

    def query(
        self, query: str, output_format: str = "CSV", params: Any = None, *, _depth: int = 1
    ) -> Any:
        """chDB's API: the result in ``output_format`` — "DataFrame", "ArrowTable", "Polars"
        give objects; "CSV", "JSON", "Pretty", ... give ``str``; "Parquet" and "Arrow" give
        ``bytes``."""
        result = self.sql(query, params, _depth=_depth + 1)
        key = output_format.lower()
        if key == "dataframe":
            return result.df()
        if key == "arrowtable":
            return result.arrow()
        if key == "polars":
            return result.pl()
        return result.format(output_format)

    def register(self, name: str, obj: Any) -> None:
        """Makes ``obj`` (a DataFrame, Arrow table, NumPy array, ...) queryable as ``name``.
        A registered name wins over a variable of the same name."""
        self._check().register(name, obj)

    def unregister(self, name: str) -> None:
        """Removes a registered object."""
        self._check().unregister(name)

    def tables(self) -> list[str]:
        """Names of the tables and views in the default schema."""
        return self._check().table_names()

    def close(self) -> None:
        """Releases the session (a persistent database's lock is released when the last
        result of the connection is gone). Closing twice is harmless; anything else on a
        closed connection, or on its cursors, raises ``ProgrammingError``."""
        self._connection = None

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def connect(
    database: str | None = None, *, read_only: bool = False, threads: int | None = None
) -> Connection:
    """A new connection: in memory, or on the database directory ``database``."""
    return Connection(database, read_only=read_only, threads=threads)


_default: Connection | None = None
# `_thread` is built in; `threading` would add ~5 ms to `import quiver`.
_default_lock = _thread.allocate_lock()


def _default_connection() -> Connection:
    global _default
    if _default is None:
        with _default_lock:
            if _default is None:
                _default = Connection()
    return _default


def sql(query: str, params: Any = None) -> Result:
    """Runs ``query`` on the default in-memory connection (see :meth:`Connection.sql`)."""
    return _default_connection().sql(query, params, _depth=2)


def query(query: str, output_format: str = "CSV", params: Any = None) -> Any:
    """chDB's ``query``: the result in ``output_format`` (see :meth:`Connection.query`)."""
    return _default_connection().query(query, output_format, params, _depth=2)


def set_progress_bar(enabled: bool) -> None:
    """Show (the default) or hide the progress of queries running longer than a second: a
    live line in Jupyter, a status line on a terminal's stderr."""
    from quiver._progress import set_progress_bar as _set

    _set(enabled)


def register(name: str, obj: Any) -> None:
    """Registers ``obj`` as ``name`` on the default connection."""
    _default_connection().register(name, obj)


def unregister(name: str) -> None:
    """Removes a registered object from the default connection."""
    _default_connection().unregister(name)


@atexit.register
def _close_postgres_connections() -> None:
    # End the Postgres sessions the process kept, so the servers do not log them as lost
    # connections; nothing to do when no query ever ran.
    import sys

    native = sys.modules.get("quiver._quiver")
    if native is not None:
        native._close_postgres_connections(2.0)
