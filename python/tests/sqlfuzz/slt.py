"""A failing case as an ``.slt`` file for ``crates/quiver-sqllogictest/test_files/``.

The tables a case reads become ``CREATE TABLE`` statements: inline ``VALUES`` (every cell an
``arrow_cast`` of text, so each column keeps its exact Arrow type) when few rows are left,
else a Parquet file written next to the ``.slt``. Expected rows are the reference's answer
(DuckDB's, or for TLP/NoREC DuckDB's where it can run the query) formatted as the runner
prints Arrow values; review them, or regenerate with ``make slt-complete``, before committing.
"""

from __future__ import annotations

import datetime
import decimal
import os
import re
from dataclasses import replace

import pyarrow as pa
import pyarrow.parquet as pq

from sqlfuzz.data import columns_of
from sqlfuzz.nodes import Derived, Expr, Item, Select
from sqlfuzz.oracles import Case, Outcome, norec_queries, tlp_queries

INLINE_ROWS = 40


def arrow_type_name(t: pa.DataType) -> str:
    """The type as DataFusion's `arrow_cast` spells it."""
    names = {
        pa.int8(): "Int8",
        pa.int16(): "Int16",
        pa.int32(): "Int32",
        pa.int64(): "Int64",
        pa.uint8(): "UInt8",
        pa.uint16(): "UInt16",
        pa.uint32(): "UInt32",
        pa.uint64(): "UInt64",
        pa.float32(): "Float32",
        pa.float64(): "Float64",
        pa.bool_(): "Boolean",
        pa.string(): "Utf8",
        pa.date32(): "Date32",
    }
    if t in names:
        return names[t]
    if pa.types.is_decimal(t):
        return f"Decimal128({t.precision}, {t.scale})"
    if pa.types.is_timestamp(t):
        zone = f'Some("{t.tz}")' if t.tz else "None"
        return f"Timestamp(Microsecond, {zone})"
    if pa.types.is_dictionary(t):
        return f"Dictionary({arrow_type_name(t.index_type)}, {arrow_type_name(t.value_type)})"
    raise ValueError(f"no arrow_cast name for {t}")


def _cell_text(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if value != value:
            return "NaN"
        if value in (float("inf"), float("-inf")):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, decimal.Decimal):
        return format(value, "f")
    if isinstance(value, datetime.datetime):
        if value.tzinfo is not None:
            # With its offset: arrow_cast reads text without one in the target's zone.
            return value.astimezone(datetime.timezone.utc).isoformat()
        return value.isoformat()
    if isinstance(value, datetime.date):
        return value.isoformat()
    return str(value)


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def create_table(name: str, table: pa.Table, folder: str, stem: str) -> str:
    """A CREATE TABLE statement that makes `table` (only its used columns) as `name`."""
    if len(table) <= INLINE_ROWS and len(table) > 0:
        rows = []
        for row in table.to_pylist():
            cells = []
            for field in table.schema:
                value = row[field.name]
                type_name = arrow_type_name(field.type)
                if value is None:
                    cells.append(f"arrow_cast(NULL, '{type_name}')")
                else:
                    cells.append(f"arrow_cast({_quote(_cell_text(value))}, '{type_name}')")
            rows.append("(" + ", ".join(cells) + ")")
        columns = ", ".join(table.column_names)
        values = ",\n  ".join(rows)
        return f"CREATE TABLE {name} AS SELECT * FROM (VALUES\n  {values}) AS v({columns})"
    path = os.path.join(folder, f"{stem}_{name}.parquet")
    pq.write_table(table, path)
    return f"CREATE TABLE {name} AS SELECT * FROM {_quote(path)}"


def used_columns(table_name: str, sql: str) -> list[str]:
    names = [c.name for c in columns_of(table_name)]
    if ".*" in sql:
        return names
    return [n for n in names if re.search(rf"\.{n}\b", sql)] or names[:1]


def _type_letters(table: pa.Table) -> str:
    letters = []
    for t in table.schema.types:
        if pa.types.is_integer(t):
            letters.append("I")
        elif pa.types.is_floating(t) or pa.types.is_decimal(t):
            letters.append("R")
        elif pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
            letters.append("T")
        else:
            letters.append("?")
    return "".join(letters) or "I"


def _result_lines(table: pa.Table) -> list[str]:
    lines = []
    columns = [c.to_pylist() for c in table.columns]
    for row in zip(*columns):
        cells = []
        for value in row:
            if value is None:
                cells.append("NULL")
            elif value == "":
                cells.append("(empty)")
            else:
                cells.append(_cell_text(value))
        lines.append(" ".join(cells))
    return lines


def case_queries(case: Case) -> list[tuple[str, object]]:
    """The statements of the case worth pinning, as (label, query node)."""
    if case.check in ("differential", "optoff"):
        body = case.body
        if isinstance(body, Select) and body.limit is not None and not body.order_by:
            # A LIMIT without ORDER BY may give any rows: pin how many, and the whole answer.
            count = Select((Item(Expr("count(*)", (), "int", agg=True), "n"),), Derived(body, "q"))
            return [
                ("rows under the LIMIT", count),
                ("without the LIMIT", replace(body, limit=None)),
            ]
        return [("query", body)]
    if case.check == "tlp":
        return [
            ("base", case.body.base),
            *((f"partitioned {i}", q) for i, q in enumerate(tlp_queries(case.body))),
        ]
    counted, reference = norec_queries(case.body)
    return [("count", counted), ("reference", reference)]


def write_case(
    folder: str,
    stem: str,
    case: Case,
    outcome: Outcome,
    tables: dict[str, pa.Table],
    reference,
    quiver_answer,
) -> str:
    """Writes `<folder>/<stem>.slt`; returns its path. `reference(sql)` and
    `quiver_answer(sql)` run a generic-SQL query (or raise)."""
    os.makedirs(folder, exist_ok=True)
    queries = case_queries(case)
    all_sql = " ".join(q.sql() for _, q in queries)
    lines = [
        f"# sqlfuzz: {case.check} seed={case.seed} source={case.source} "
        f"connection={case.connection}",
        f"# failure: {outcome.message.splitlines()[0] if outcome.message else ''}",
        "# Expected rows below are the reference's; check them, or regenerate with "
        "`make slt-complete`.",
    ]
    if case.source == "pandas":
        lines.append("# Found on a pandas DataFrame source; the tables here are quiver tables.")
    if outcome.expected is not None:
        lines.append(f"# reference rows: {outcome.expected}")
        lines.append(f"# quiver rows:    {outcome.got}")
    lines.append("")
    for name, table in tables.items():
        keep = used_columns(name, all_sql)
        lines += ["statement ok", create_table(name, table.select(keep), folder, stem), ""]
    for label, q in queries:
        sql = re.sub(r"\{\{(\w+)\}\}", r"\1", q.sql())
        lines.append(f"# {label}")
        expected, error = _attempt(reference, q.sql())
        source = "reference"
        if expected is None:
            expected, _ = _attempt(quiver_answer, q.sql())
            source = "quiver (no reference answer)"
        if expected is None:
            lines += ["statement error", sql, "", f"# reference: {_first_line(error)}", ""]
            continue
        ordered = getattr(q, "order_by", None) and getattr(q, "total_order", False)
        got, error = _attempt(quiver_answer, q.sql())
        if got is None:
            lines.append(f"# quiver raised: {_first_line(error)}")
        lines.append(f"# expected: {source}")
        lines.append(f"query {_type_letters(got if got is not None else expected)}")
        if not ordered:
            lines[-1] += " rowsort"
        lines.append(sql)
        lines.append("----")
        lines += _result_lines(expected)
        lines.append("")
    path = os.path.join(folder, f"{stem}.slt")
    with open(path, "w", encoding="utf-8") as out:
        out.write("\n".join(lines))
    return path


def _attempt(run, sql: str):
    """(answer, None), or (None, the error): panics too (pyo3 raises them as BaseException)."""
    try:
        return run(sql), None
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as error:
        return None, error


def _first_line(error) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else repr(error)
