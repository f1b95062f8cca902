"""quiver's exceptions: one tree rooted at :class:`Error`.

Every error quiver raises is one of these (the Rust engine maps its errors here in one place),
so ``except quiver.Error`` catches them all, and the subclass says what kind of problem it is.
"""

from __future__ import annotations

import builtins

__all__ = [
    "CatalogError",
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
]


class Error(Exception):
    """Base class of every quiver error."""


class ParserError(Error):
    """The SQL text is not valid SQL. ``line`` and ``column`` point at the problem (1-based)."""

    line: int | None = None
    column: int | None = None


class CatalogError(Error):
    """A table, column, function or Python variable that does not exist (or is ambiguous)."""


class ConversionError(Error):
    """A Python value that cannot become a SQL value (the message names column, row and type)."""


class InvalidInputError(Error, ValueError):
    """An argument or an option that is not valid."""


class IOError(Error):
    """A file that cannot be read or written."""


class DatabaseError(Error):
    """A persistent database directory that cannot be opened or written."""


class QueryCancelled(Error):
    """The query was cancelled."""


class NotImplementedError(Error, builtins.NotImplementedError):
    """SQL that quiver does not support yet."""


class OutOfMemoryError(Error, MemoryError):
    """The query needed more memory than allowed."""


class ExecutionError(Error):
    """The query failed while running (for example a division by zero or a failed cast)."""


class InternalError(Error):
    """A bug in quiver. Please report it with the query that caused it."""
