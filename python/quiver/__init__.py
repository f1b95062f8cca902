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
from quiver.errors import (
    CatalogError,
    ConversionError,
    DatabaseError,
    Error,
    ExecutionError,
    InternalError,
    InvalidInputError,
    IOError,
    NotImplementedError,
    OutOfMemoryError,
    ParserError,
    QueryCancelled,
)

# Not `from typing import TYPE_CHECKING`: importing typing costs ~10 ms at `import quiver`.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__version__ = "0.1.0"

__all__ = [
    "CatalogError",
    "Connection",
    "ConversionError",
    "DatabaseError",
    "Error",
    "ExecutionError",
    "IOError",
    "InternalError",
    "InvalidInputError",
    "NotImplementedError",
    "OutOfMemoryError",
    "ParserError",
    "QueryCancelled",
    "Result",
    "connect",
    "query",
    "register",
    "set_progress_bar",
    "sql",
    "unregister",
]


class Connection:
    """A quiver session: in memory, or over a persistent database directory.

    Several threads may run queries on one connection at once; they run in parallel.
    """

    __slots__ = ("__weakref__", "_connection")

    def __init__(
        self,
        database: str | None = None,
        *,
        read_only: bool = False,
        threads: int | None = None,
    ) -> None:
        from quiver import _quiver

        self._connection = _quiver.Connection(database, read_only, threads)

    def sql(self, query: str, params: Any = None, *, _depth: int = 1) -> Result:
        """Runs ``query`` (several ``;``-separated statements run in order; the last one's
        result is returned). ``params`` fills ``$name`` placeholders from a dict or ``$1``,
        ``$2``... from a list. Table names not in the catalog are looked up among the caller's
        variables."""
        from quiver._scope import Resolver

        resolver = Resolver(_depth)
        try:
            return Result(self._connection.execute(query, params, resolver))
        finally:
            resolver.close()

    execute = sql

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
        self._connection.register(name, obj)

    def unregister(self, name: str) -> None:
        """Removes a registered object."""
        self._connection.unregister(name)

    def tables(self) -> list[str]:
        """Names of the tables and views in the default schema."""
        return self._connection.table_names()

    def close(self) -> None:
        """Releases the session (a persistent database's lock is released when the last
        result of the connection is gone)."""
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
