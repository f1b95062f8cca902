"""Query answers as plain Python rows, and the comparison of two answers to one TPC-H query.

Two answers agree when they have as many columns and rows, their ORDER BY keys agree row by
row, and within each run of rows whose keys tie, the rows agree as multisets (the order of tied
rows is unspecified). When a LIMIT cut the answer, the last run may hold different tied rows,
so only its keys are compared.

Values agree when they are equal, except numbers, compared across the types the systems pick
for the same expression (DuckDB's DOUBLE averages, quiver's and Postgres' DECIMALs):

* two exact numbers (int, Decimal) of the same scale must be equal, and of different scales
  may differ by one unit of the coarser scale: `avg(l_quantity)` is DECIMAL(19, 6) in quiver,
  a NUMERIC of 16 decimals in Postgres, and one of them rounds where the other truncates;
* with a float on either side: up to REL_TOLERANCE relatively (the error of summing the ~6
  million doubles of scale factor 1 is at most n·ε ≈ 7e-10), plus one unit of the scale of a
  Decimal on the other side.

Sums of money are DECIMAL in every system, so they must agree to the cent and beyond.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

REL_TOLERANCE = 1e-9
# How many differing rows a failure message shows.
SHOWN = 5


@dataclass
class Answer:
    columns: list[str]
    rows: list[tuple]


def from_arrow(table: Any) -> Answer:
    """A pyarrow Table as an answer (Decimal128 → Decimal, date32 → date, ...)."""
    columns = [column.to_pylist() for column in table.columns]
    return Answer(list(table.column_names), list(zip(*columns)))


def order_by(sql: str) -> list[str]:
    """The output columns the query's final ORDER BY names (TPC-H orders only by output
    columns, and only its outermost query has an ORDER BY)."""
    text = re.sub(r"--[^\n]*", "", sql).lower()
    at = text.rfind("order by")
    if at < 0:
        return []
    clause = re.split(r"\blimit\b|;", text[at + len("order by") :])[0]
    return [re.sub(r"\s+(asc|desc)$", "", item.strip()) for item in clause.split(",")]


def limit(sql: str) -> int | None:
    found = re.search(r"\blimit\s+(\d+)\s*;?\s*$", sql.strip(), re.IGNORECASE)
    return int(found.group(1)) if found else None


def difference(actual: Answer, expected: Answer, sql: str) -> str | None:
    """Why ``actual`` is not ``expected`` (None when they agree)."""
    if len(actual.columns) != len(expected.columns):
        return (
            f"{len(actual.columns)} columns {actual.columns}, "
            f"expected {len(expected.columns)} {expected.columns}"
        )
    names = [name.lower() for name in expected.columns]
    missing = [key for key in order_by(sql) if key not in names]
    if missing:
        raise AssertionError(f"ORDER BY {missing} not among the output columns {names}")
    keys = [names.index(key) for key in order_by(sql)]
    if len(actual.rows) != len(expected.rows):
        return f"{len(actual.rows)} rows, expected {len(expected.rows)}\n" + _rows_diff(
            actual.rows, expected.rows
        )
    for i, (got, want) in enumerate(zip(actual.rows, expected.rows)):
        if not all(same_value(got[k], want[k]) for k in keys):
            return f"the ORDER BY keys {order_by(sql)} differ from row {i} on\n" + _rows_diff(
                actual.rows[i:], expected.rows[i:], first=i
            )
    runs = _tie_runs(expected.rows, keys)
    cut = limit(sql) is not None and len(expected.rows) == limit(sql)
    for number, (start, end) in enumerate(runs):
        if cut and number == len(runs) - 1:
            break
        got = sorted(actual.rows[start:end], key=_sort_token)
        want = sorted(expected.rows[start:end], key=_sort_token)
        if not all(same_row(g, w) for g, w in zip(got, want)):
            tied = f" (rows {start}..{end - 1} tie on the ORDER BY keys)" if end - start > 1 else ""
            return f"rows differ{tied}\n" + _rows_diff(got, want, first=start)
    return None


def same_row(got: tuple, want: tuple) -> bool:
    return len(got) == len(want) and all(same_value(g, w) for g, w in zip(got, want))


def same_value(got: Any, want: Any) -> bool:
    if got is None or want is None:
        return got is None and want is None
    if _is_number(got) and _is_number(want):
        return _same_number(got, want)
    return type(got) is type(want) and got == want


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float, Decimal)) and not isinstance(value, bool)


def _scale(value: Any) -> int | None:
    """Digits after the point of an exact number; None for floats."""
    if isinstance(value, int):
        return 0
    if isinstance(value, Decimal):
        return max(0, -value.as_tuple().exponent)
    return None


def _same_number(got: Any, want: Any) -> bool:
    got_scale, want_scale = _scale(got), _scale(want)
    if got_scale is not None and want_scale is not None:
        if Decimal(got) == Decimal(want):
            return True
        if got_scale == want_scale:
            return False
        return abs(Decimal(got) - Decimal(want)) <= Decimal(1).scaleb(-min(got_scale, want_scale))
    unit = max((10.0**-s for s in (got_scale, want_scale) if s is not None), default=0.0)
    a, b = float(got), float(want)
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return abs(a - b) <= REL_TOLERANCE * max(abs(a), abs(b)) + unit


def _tie_runs(rows: list[tuple], keys: list[int]) -> list[tuple[int, int]]:
    """[start, end) of each run of consecutive rows with equal ORDER BY keys."""
    runs: list[tuple[int, int]] = []
    start = 0
    for i in range(1, len(rows) + 1):
        if i == len(rows) or any(rows[i][k] != rows[start][k] for k in keys):
            runs.append((start, i))
            start = i
    return runs if rows else []


def _sort_token(row: tuple) -> tuple:
    """Orders rows of one system and of another alike despite their numeric types."""
    return tuple(
        (0, "")
        if value is None
        else (1, round(float(value), 6))
        if _is_number(value)
        else (2, str(value))
        for value in row
    )


def _rows_diff(got: list[tuple], want: list[tuple], first: int = 0) -> str:
    lines = []
    for i in range(max(len(got), len(want))):
        g = got[i] if i < len(got) else None
        w = want[i] if i < len(want) else None
        if g is not None and w is not None and same_row(g, w):
            continue
        lines.append(f"  row {first + i}:\n    got      {g!r}\n    expected {w!r}")
        if len(lines) == SHOWN:
            lines.append("  ...")
            break
    return "\n".join(lines)
