"""quiver's exceptions: PEP 249's tree, with quiver's own kinds of error placed under it.

Every error quiver raises is one of these (the Rust engine maps its errors here in one place,
by class name), so ``except quiver.Error`` catches them all, and code written for the DB-API
tree (``except quiver.ProgrammingError``) or for quiver's (``except quiver.CatalogError``)
works::

    Warning
    Error
    ├── InterfaceError
    └── DatabaseError
        ├── DataError
        │   ├── ConversionError
        │   └── ExecutionError
        ├── OperationalError
        │   ├── IOError
        │   ├── DatabaseDirectoryError
        │   ├── OutOfMemoryError        (also a MemoryError)
        │   └── QueryCancelled
        ├── IntegrityError
        ├── InternalError
        ├── ProgrammingError
        │   ├── ParserError
        │   ├── CatalogError
        │   └── InvalidInputError       (also a ValueError)
        └── NotSupportedError
            └── NotImplementedError     (also the builtin NotImplementedError)
"""

from __future__ import annotations

import builtins

__all__ = [
    "CatalogError",
    "ConversionError",
    "DataError",
    "DatabaseDirectoryError",
    "DatabaseError",
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
    "Warning",
]


# --- PEP 249 ---------------------------------------------------------------------------------
class Warning(Exception):
    """PEP 249's important warning. quiver raises none today; it exists for code that
    catches it."""


class Error(Exception):
    """Base class of every quiver error."""


class InterfaceError(Error):
    """A misuse of the DB-API interface itself rather than a problem of the database."""


class DatabaseError(Error):
    """Base class of the errors that come from the database (every quiver error but
    :class:`InterfaceError`)."""


class DataError(DatabaseError):
    """A problem with the data being processed: a value that cannot be converted, a division
    by zero, a number out of range."""


class OperationalError(DatabaseError):
    """A problem in the database's operation, not in the SQL: I/O, memory, cancellation, a
    database directory that cannot be used."""


class IntegrityError(DatabaseError):
    """A violated constraint. quiver enforces none today; it exists for code that catches
    it."""


class InternalError(DatabaseError):
    """A bug in quiver. Please report it with the query that caused it."""


class ProgrammingError(DatabaseError):
    """A mistake in the SQL or in how it is called: a syntax error, an unknown table, the
    wrong number of parameters, a closed connection or cursor."""


class NotSupportedError(DatabaseError):
    """A feature quiver does not have, such as multi-statement transactions."""


# --- quiver's kinds of error ---------------------------------------------------------------------
class ParserError(ProgrammingError):
    """The SQL text is not valid SQL. ``line`` and ``column`` point at the problem (1-based)."""

    line: int | None = None
    column: int | None = None


class CatalogError(ProgrammingError):
    """A table, column, function or Python variable that does not exist (or is ambiguous)."""


class ConversionError(DataError):
    """A Python value that cannot become a SQL value (the message names column, row and type)."""


class InvalidInputError(ProgrammingError, ValueError):
    """An argument or an option that is not valid."""


class IOError(OperationalError):
    """A file that cannot be read or written."""


class DatabaseDirectoryError(OperationalError):
    """A persistent database directory that cannot be opened or written (locked by another
    process, read-only, not a database, corrupt)."""


class QueryCancelled(OperationalError):
    """The query was cancelled."""


class NotImplementedError(NotSupportedError, builtins.NotImplementedError):
    """SQL that quiver does not support yet."""


class OutOfMemoryError(OperationalError, MemoryError):
    """The query needed more memory than allowed."""


class ExecutionError(DataError):
    """The query failed while running on its data (for example a division by zero or a failed
    cast)."""
