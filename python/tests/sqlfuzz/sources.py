"""The same rows in both engines: DuckDB tables, and for quiver a pandas DataFrame, a Parquet
file and a quiver table per logical table.

Generated SQL names tables as ``{{mid}}``; :meth:`Engines.quiver_sql` and
:meth:`Engines.duck_sql` put in each engine's name for it. DuckDB always reads native tables
made from the canonical Arrow tables; quiver reads whichever source the query's seed picks, so
a difference in how quiver converts a source shows up as a mismatch.
"""

from __future__ import annotations

import os
import re

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import quiver

from sqlfuzz.data import columns_of

SOURCES = ("pandas", "parquet", "table")
# Target partitions of the quiver connections: 1 keeps every group in one partition, 3 does
# not divide evenly into the machine's 2 cores, 8 repartitions more finely than them.
THREADS = (2, 1, 3, 8)

_PLACEHOLDER = re.compile(r"\{\{(\w+)\}\}")


def pandas_frame(table: pa.Table, arrow_backed: bool) -> pd.DataFrame:
    """`table` as pandas holds such data in the wild: NumPy columns where nothing is missing,
    masked arrays for nullable integers and booleans, object arrays of str, Decimal and date,
    categoricals, tz-aware datetimes; pyarrow-backed columns where a NumPy column could not say
    it (NaN beside NULL). `arrow_backed` turns the per-query conversions (Decimal and date
    objects) into Arrow columns, for the large table."""
    columns = {}
    for name in table.column_names:
        column = table.column(name).combine_chunks()
        kind = column.type
        nulls = column.null_count > 0
        if pa.types.is_dictionary(kind):
            values = column.dictionary.to_pylist()
            codes = column.indices.fill_null(-1).to_numpy()
            columns[name] = pd.Categorical.from_codes(codes, categories=values)
        elif pa.types.is_integer(kind) or pa.types.is_boolean(kind):
            if not nulls:
                columns[name] = column.to_numpy(zero_copy_only=False)
            else:
                filled = column.fill_null(False if pa.types.is_boolean(kind) else 0)
                values = filled.to_numpy(zero_copy_only=False)
                mask = column.is_null().to_numpy(zero_copy_only=False)
                array = (
                    pd.arrays.BooleanArray(values, mask)
                    if pa.types.is_boolean(kind)
                    else pd.arrays.IntegerArray(values, mask)
                )
                columns[name] = array
        elif pa.types.is_floating(kind):
            has_nan = bool(pa.compute.any(pa.compute.is_nan(column)).as_py() or False)
            if not has_nan:
                # NumPy NaN means NULL to quiver and DuckDB alike (as in pandas).
                columns[name] = column.to_numpy(zero_copy_only=False)
            elif pa.types.is_float32(kind):
                filled = column.fill_null(0).to_numpy(zero_copy_only=False)
                mask = column.is_null().to_numpy(zero_copy_only=False)
                columns[name] = pd.arrays.FloatingArray(filled, mask)
            else:
                columns[name] = pd.arrays.ArrowExtensionArray(column)
        elif pa.types.is_string(kind):
            if name == "sk":
                columns[name] = pd.array(column.to_pylist(), dtype="str")
            else:
                columns[name] = np.array(column.to_pylist(), dtype=object)
        elif pa.types.is_decimal(kind) or pa.types.is_date(kind):
            if arrow_backed or kind == pa.decimal128(38, 6):
                columns[name] = pd.arrays.ArrowExtensionArray(column)
            else:
                columns[name] = np.array(column.to_pylist(), dtype=object)
        elif pa.types.is_timestamp(kind):
            if kind.tz is None:
                columns[name] = column.to_numpy(zero_copy_only=False)  # NaT for NULL
            elif kind.tz == "UTC":
                columns[name] = pd.Series(column.to_pandas())
            else:
                columns[name] = pd.arrays.ArrowExtensionArray(column)
        else:
            columns[name] = pd.arrays.ArrowExtensionArray(column)
    return pd.DataFrame(columns)


class Engines:
    """DuckDB and quiver over the same tables, built once."""

    def __init__(self, tables: dict[str, pa.Table], folder: str, threads=THREADS) -> None:
        self.tables = tables
        self.folder = folder
        os.makedirs(folder, exist_ok=True)
        self.duck = duckdb.connect()
        # Timestamps with a zone are compared and truncated in UTC by both engines.
        self.duck.execute("SET TimeZone = 'UTC'")
        self.duck.execute("SET threads = 2")
        for name, table in tables.items():
            self.duck.register("_arrow", table)
            self.duck.execute(f"CREATE TABLE {name} AS SELECT * FROM _arrow")
            self.duck.unregister("_arrow")
        self.frames = {
            name: pandas_frame(table, arrow_backed=len(table) > 100_000)
            for name, table in tables.items()
        }
        self.parquet = {}
        for name, table in tables.items():
            path = os.path.join(folder, f"{name}.parquet")
            # No statistics for the float columns holding NaN: DataFusion prunes row groups
            # and files by min/max statistics, which leave NaN out, while it compares NaN as
            # the greatest value, so `f > 2` skips a file whose only match is a NaN, and an
            # ORDER BY f DESC LIMIT loses NaN rows to its dynamic filter (findings F15, F16).
            stats = [c.name for c in columns_of(name) if not c.special]
            pq.write_table(
                table, path, row_group_size=max(len(table) // 3, 1), write_statistics=stats
            )
            self.parquet[name] = path
        self.connections_threads = list(threads)
        self.connections = [self._connect(t) for t in threads]
        # The same connections with quiver's own rules off (stock DataFusion planning), or
        # None while quiver has no such setting.
        self.connections_off = None
        if self._supports_optimizations_off():
            self.connections_off = [self._connect(t, optimizations=False) for t in threads]

    @property
    def optimizations_off(self) -> bool:
        return self.connections_off is not None

    def _connect(self, threads: int | None, optimizations: bool = True) -> quiver.Connection:
        con = quiver.connect(threads=threads)
        if not optimizations:
            con.sql("SET quiver.optimizations = false")
        for name, frame in self.frames.items():
            con.register(f"{name}_df", frame)
            con.sql(f"CREATE TABLE {name}_tbl AS SELECT * FROM {name}_df")
        return con

    @staticmethod
    def _supports_optimizations_off() -> bool:
        try:
            quiver.connect().sql("SET quiver.optimizations = false")
        except quiver.Error:
            return False
        return True

    def duck_sql(self, sql: str) -> str:
        return _PLACEHOLDER.sub(lambda m: m.group(1), sql)

    def quiver_sql(self, sql: str, source: str) -> str:
        def name(match: re.Match) -> str:
            table = match.group(1)
            if source == "pandas":
                return f"{table}_df"
            if source == "table":
                return f"{table}_tbl"
            return "'" + self.parquet[table].replace("'", "''") + "'"

        return _PLACEHOLDER.sub(name, sql)

    def run_duck(self, sql: str) -> pa.Table:
        return self.duck.execute(self.duck_sql(sql)).to_arrow_table()

    def run_quiver(self, sql: str, source: str, connection: int = 0) -> pa.Table:
        return self.connections[connection].sql(self.quiver_sql(sql, source)).arrow()

    def run_quiver_off(self, sql: str, source: str, connection: int = 0) -> pa.Table:
        con = self.connections_off[connection]
        return con.sql(self.quiver_sql(sql, source)).arrow()
