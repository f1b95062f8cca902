"""Query results: DataFrames, Arrow, Polars, NumPy, Python rows, or text in any output format."""

from __future__ import annotations

# Not `from typing import TYPE_CHECKING`: importing typing costs ~10 ms at `import quiver`.
TYPE_CHECKING = False

if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import Any


_TEXT_FORMATS = {
    "csv": "CSV",
    "csvwithnames": "CSVWithNames",
    "tsv": "TSV",
    "tabseparated": "TSV",
    "tsvwithnames": "TSVWithNames",
    "tabseparatedwithnames": "TSVWithNames",
    "json": "JSON",
    "jsoneachrow": "JSONEachRow",
    "ndjson": "JSONEachRow",
    "jsoncompact": "JSONCompact",
    "pretty": "Pretty",
    "markdown": "Markdown",
    "vertical": "Vertical",
}
_BINARY_FORMATS = {"parquet": "Parquet", "arrow": "Arrow", "arrowstream": "Arrow"}


class _Stream:
    """Hands one C stream capsule to pyarrow's ``RecordBatchReader.from_stream``."""

    __slots__ = ("_capsule",)

    def __init__(self, capsule: Any) -> None:
        self._capsule = capsule

    def __arrow_c_stream__(self, requested_schema: Any = None) -> Any:
        return self._capsule


class Result:
    """The result of a statement.

    Rows are produced when first needed and then kept, so ``df()`` after ``show()`` does not
    run the query twice; ``record_batches()`` streams them without keeping them.
    """

    __slots__ = ("_handle", "_position", "_table")

    def __init__(self, handle: Any) -> None:
        from quiver._progress import reporter

        self._handle = handle
        self._table = None
        self._position = 0
        report = reporter()
        if report is not None:
            handle.watch(report)

    # --- shape ---------------------------------------------------------------------------
    @property
    def columns(self) -> list[str]:
        """Column names."""
        return self._handle.columns

    @property
    def types(self) -> list[str]:
        """Arrow type names of the columns."""
        return self._handle.types

    def __len__(self) -> int:
        return self._handle.fetch()

    # --- statistics ------------------------------------------------------------------------
    @property
    def elapsed(self) -> float:
        """Seconds from the start of the statement to its last row."""
        return self._handle.stats()[0]

    @property
    def rows_read(self) -> int:
        """Rows read from tables, files and Python objects."""
        return self._handle.stats()[1]

    @property
    def bytes_read(self) -> int:
        """Bytes read from storage (or from memory, for in-memory sources)."""
        return self._handle.stats()[2]

    # --- conversions -----------------------------------------------------------------------
    def __arrow_c_stream__(self, requested_schema: Any = None) -> Any:
        """The Arrow PyCapsule stream protocol: ``pa.table(r)``, ``pl.DataFrame(r)``."""
        return self._handle.__arrow_c_stream__(requested_schema)

    def arrow(self) -> Any:
        """The rows as a ``pyarrow.Table``."""
        if self._table is None:
            import pyarrow as pa

            # Not pa.table(handle): it imports pandas (~0.25 s) to ask whether the handle is
            # a DataFrame.
            self._table = pa.RecordBatchReader.from_stream(self._handle).read_all()
        return self._table

    fetch_arrow_table = arrow

    def df(self) -> Any:
        """The rows as a pandas DataFrame."""
        return self.arrow().to_pandas()

    to_df = df
    fetchdf = df

    def pl(self) -> Any:
        """The rows as a polars DataFrame."""
        import polars as pl

        return pl.from_arrow(self.arrow())

    def fetchnumpy(self) -> dict[str, Any]:
        """The rows as a dict of NumPy arrays, one per column."""
        table = self.arrow()
        return {name: table.column(i).to_numpy() for i, name in enumerate(table.column_names)}

    def record_batches(self, rows: int = 100_000) -> Any:
        """A ``pyarrow.RecordBatchReader`` over the rows in batches of ``rows`` rows, read from
        the running query without materialising the result."""
        import pyarrow as pa

        return pa.RecordBatchReader.from_stream(_Stream(self._handle.stream(rows)))

    def _rows(self) -> list[tuple]:
        table = self.arrow()
        columns = [column.to_pylist() for column in table.columns]
        return list(zip(*columns)) if columns else [() for _ in range(table.num_rows)]

    def fetchall(self) -> list[tuple]:
        """The remaining rows as tuples."""
        rows = self._rows()[self._position :]
        self._position += len(rows)
        return rows

    def fetchmany(self, size: int = 1) -> list[tuple]:
        """The next ``size`` rows as tuples."""
        table = self.arrow()
        part = table.slice(self._position, size)
        self._position += part.num_rows
        columns = [column.to_pylist() for column in part.columns]
        return list(zip(*columns)) if columns else [() for _ in range(part.num_rows)]

    def fetchone(self) -> tuple | None:
        """The next row as a tuple, or None after the last."""
        rows = self.fetchmany(1)
        return rows[0] if rows else None

    def __iter__(self) -> Iterator[tuple]:
        return iter(self.fetchall())

    # --- text ------------------------------------------------------------------------------
    def format(self, output_format: str) -> str | bytes:
        """The rows in one of the CLI's output formats: text formats give ``str``,
        ``Parquet`` and ``Arrow`` give ``bytes``."""
        key = output_format.lower()
        if key in _TEXT_FORMATS:
            return self._handle.format(_TEXT_FORMATS[key]).decode("utf-8")
        if key in _BINARY_FORMATS:
            return self._handle.format(_BINARY_FORMATS[key])
        return self._handle.format(output_format).decode("utf-8")

    def show(self) -> None:
        """Prints the rows as a table."""
        print(self.format("Pretty"), end="")

    def __str__(self) -> str:
        return self.format("Pretty")

    def __repr__(self) -> str:
        return self.format("Pretty")

    def _repr_html_(self, max_rows: int = 20) -> str:
        import html

        table = self.arrow()
        head = table.slice(0, max_rows)
        header = "".join(
            f"<th>{html.escape(name)}<br><small>{html.escape(str(field.type))}</small></th>"
            for name, field in zip(head.column_names, head.schema)
        )
        body = []
        columns = [column.to_pylist() for column in head.columns]
        for row in zip(*columns):
            cells = "".join(f"<td>{'NULL' if v is None else html.escape(str(v))}</td>" for v in row)
            body.append(f"<tr>{cells}</tr>")
        more = table.num_rows - head.num_rows
        footer = f"<p>{table.num_rows} rows" + (f" ({more} not shown)" if more else "") + "</p>"
        return (
            f"<table><thead><tr>{header}</tr></thead><tbody>{''.join(body)}</tbody></table>{footer}"
        )
