"""Two query answers compared as multisets of rows, or as lists under a total ORDER BY.

Each column is first brought to a class both engines can agree on, whatever their type
systems: integers of any width and decimals of scale 0 (DuckDB sums into HUGEINT, DataFusion
into Int64; quiver computes some UInt64 arithmetic in Decimal128) are exact integers; other
decimals and floats are doubles compared with a relative tolerance (sums add in different
orders; DataFusion averages decimals to scale + 4 digits where DuckDB gives a DOUBLE); strings
of any encoding (Utf8, Utf8View, dictionaries) are strings; timestamps of any unit and zone and
dates are microseconds since the epoch (both engines store UTC instants; the zone only
changes how they are shown). NaN equals NaN, -0.0 equals 0.0, NULL equals NULL, and a column
of NULLs typed Null matches any type.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

# Sums of doubles of large integers round differently when added in another order.
REL_TOL = 1e-7
ABS_TOL = 1e-9


@dataclass
class Column:
    cls: str  # int, float, str, bool, time, null, other
    array: pa.Array
    scale: int | None = None  # a decimal's scale: the last digit it keeps


def _classify(array: pa.Array) -> Column:
    t = array.type
    if pa.types.is_dictionary(t):
        array = array.dictionary_decode()
        t = array.type
    if pa.types.is_null(t):
        return Column("null", array)
    if pa.types.is_integer(t):
        return Column("int", array.cast(pa.decimal128(38, 0)))
    if pa.types.is_decimal(t):
        if t.scale == 0 and t.precision <= 38:
            return Column("int", array.cast(pa.decimal128(38, 0)))
        return Column("float", array.cast(pa.float64()), scale=t.scale)
    if pa.types.is_floating(t):
        return Column("float", array.cast(pa.float64()))
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return Column("str", array.cast(pa.large_string()))
    if pa.types.is_boolean(t):
        return Column("bool", array)
    if pa.types.is_timestamp(t):
        micros = array.cast(pa.timestamp("us", tz=t.tz), safe=False)
        return Column("time", micros.cast(pa.int64()))
    if pa.types.is_date(t):
        micros = array.cast(pa.timestamp("us"))
        return Column("time", micros.cast(pa.int64()))
    return Column("other", pa.array([repr(v) for v in array.to_pylist()], pa.large_string()))


def _unify(a: Column, b: Column) -> tuple[Column, Column]:
    if a.cls == b.cls:
        return a, b
    if a.cls == "null":
        return Column(b.cls, pa.nulls(len(a.array), b.array.type), b.scale), b
    if b.cls == "null":
        return a, Column(a.cls, pa.nulls(len(b.array), a.array.type), a.scale)
    if {a.cls, b.cls} == {"int", "float"}:
        return _as_float(a), _as_float(b)
    return a, b


def _as_float(c: Column) -> Column:
    if c.cls == "float":
        return c
    return Column("float", c.array.cast(pa.float64()), c.scale)


def _normalised(table: pa.Table) -> list[Column]:
    return [_classify(_one_array(table.column(i))) for i in range(table.num_columns)]


def _one_array(column: pa.ChunkedArray) -> pa.Array:
    """The chunks as one array; dictionaries decoded first (pyarrow cannot combine chunks
    whose dictionaries differ and hold NULLs)."""
    if pa.types.is_dictionary(column.type):
        decoded = [chunk.dictionary_decode() for chunk in column.chunks]
        return pa.chunked_array(decoded, column.type.value_type).combine_chunks()
    return column.combine_chunks()


@dataclass
class Verdict:
    equal: bool
    reason: str = ""
    left_rows: list | None = None
    right_rows: list | None = None


def compare(left: pa.Table, right: pa.Table, ordered: bool) -> Verdict:
    """Whether `left` and `right` hold the same rows (in the same order when `ordered`)."""
    if left.num_columns != right.num_columns:
        return Verdict(False, f"{left.num_columns} columns against {right.num_columns}")
    lcols, rcols = _normalised(left), _normalised(right)
    pairs = [_unify(a, b) for a, b in zip(lcols, rcols)]
    for i, (a, b) in enumerate(pairs):
        if a.cls != b.cls:
            return Verdict(
                False, f"column {i}: {left.schema.types[i]} against {right.schema.types[i]}"
            )
    lcols = [a for a, _ in pairs]
    rcols = [b for _, b in pairs]
    lorder = rorder = None
    if not ordered:
        lcols, lorder = _sorted(lcols)
        rcols, rorder = _sorted(rcols)
    if left.num_rows != right.num_rows:
        n = min(left.num_rows, right.num_rows)
        at = _first_difference([_head(c, n) for c in lcols], [_head(c, n) for c in rcols])
        reason = f"{left.num_rows} rows against {right.num_rows}"
        return _verdict_at(left, right, lorder, rorder, n if at is None else at, reason)
    bad = _first_difference(lcols, rcols)
    if bad is None:
        return Verdict(True)
    if not ordered and any(c.cls == "float" for c in lcols) and left.num_rows <= 50_000:
        # Sorting by a float column can order two nearly equal values differently on the two
        # sides; match rows with a tolerance instead.
        if _tolerant_multiset_equal(lcols, rcols):
            return Verdict(True)
    return _verdict_at(left, right, lorder, rorder, bad, "rows differ")


def contains(whole: pa.Table, part: pa.Table, limit: int) -> Verdict:
    """Whether `part` is `limit` rows of `whole` (all of them if it has fewer): the answer to
    a LIMIT without ORDER BY, which may be any such rows."""
    if whole.num_columns != part.num_columns:
        return Verdict(False, f"{whole.num_columns} columns against {part.num_columns}")
    want = min(limit, whole.num_rows)
    if part.num_rows != want:
        return Verdict(
            False,
            f"LIMIT {limit} gave {part.num_rows} rows of {whole.num_rows}",
            as_rows(whole),
            as_rows(part),
        )
    pairs = [_unify(a, b) for a, b in zip(_normalised(whole), _normalised(part))]
    if any(a.cls != b.cls for a, b in pairs):
        return Verdict(False, f"column types {whole.schema.types} against {part.schema.types}")
    have = Counter(_row_keys([a for a, _ in pairs]))
    for row, n in Counter(_row_keys([b for _, b in pairs])).items():
        if have[row] < n:
            return Verdict(False, f"LIMIT {limit} gave a row the query has not: {row}", None, [row])
    return Verdict(True)


def _row_keys(cols: list[Column]) -> list[tuple]:
    """Rows as hashable tuples, floats rounded to 9 digits (NaN as a string, -0.0 as 0.0)."""

    def key(cls, value):
        if value is None or cls != "float":
            return value
        if value != value:
            return "NaN"
        return float(f"{value + 0.0:.9g}")

    values = [[key(c.cls, v) for v in c.array.to_pylist()] for c in cols]
    return list(zip(*values))


def _head(c: Column, n: int) -> Column:
    return Column(c.cls, c.array.slice(0, n), c.scale)


def _sort_key_columns(cols: list[Column]) -> list[pa.Array]:
    keys = []
    floats = []
    for c in cols:
        if c.cls == "float":
            # -0.0 sorts with 0.0: adding 0.0 turns it into 0.0.
            values = pc.add(c.array, 0.0)
            floats.append(values)
        else:
            keys.append(c.array)
    return keys + floats


def _sorted(cols: list[Column]) -> tuple[list[Column], pa.Array | None]:
    if not cols or len(cols[0].array) == 0:
        return cols, None
    keys = _sort_key_columns(cols)
    table = pa.table({f"k{i}": k for i, k in enumerate(keys)})
    order = pc.sort_indices(
        table, sort_keys=[(f"k{i}", "ascending", "at_end") for i in range(len(keys))]
    )
    return [Column(c.cls, c.array.take(order), c.scale) for c in cols], order


def _floats_equal(a: pa.Array, b: pa.Array, scale_a, scale_b) -> np.ndarray:
    x = a.to_numpy(zero_copy_only=False)
    y = b.to_numpy(zero_copy_only=False)
    xn = np.asarray(a.is_null().to_numpy(zero_copy_only=False))
    yn = np.asarray(b.is_null().to_numpy(zero_copy_only=False))
    scales = [s for s in (scale_a, scale_b) if s is not None]
    abs_tol = max(ABS_TOL, 10.0 ** -min(scales)) if scales else ABS_TOL
    with np.errstate(invalid="ignore", over="ignore"):
        close = np.isclose(x, y, rtol=REL_TOL * 1000 if scales else REL_TOL, atol=abs_tol)
        close |= x == y  # infinities
        close |= np.isnan(x) & np.isnan(y)
    return np.where(xn | yn, xn & yn, close)


def _equal_mask(a: Column, b: Column) -> np.ndarray:
    if a.cls == "float":
        return _floats_equal(a.array, b.array, a.scale, b.scale)
    eq = pc.equal(a.array, b.array)
    both_null = pc.and_(a.array.is_null(), b.array.is_null())
    return np.asarray(
        pc.or_kleene(pc.fill_null(eq, False), both_null).to_numpy(zero_copy_only=False)
    )


def _first_difference(lcols: list[Column], rcols: list[Column]) -> int | None:
    if not lcols:
        return None
    n = len(lcols[0].array)
    ok = np.ones(n, dtype=bool)
    for a, b in zip(lcols, rcols):
        ok &= _equal_mask(a, b)
    bad = np.flatnonzero(~ok)
    return int(bad[0]) if len(bad) else None


def _tolerant_multiset_equal(lcols: list[Column], rcols: list[Column]) -> bool:
    """Matches each row to an unmatched equal row (floats within tolerance), by exact key."""
    n = len(lcols[0].array)
    exact = [i for i, c in enumerate(lcols) if c.cls != "float"]
    floats = [i for i, c in enumerate(lcols) if c.cls == "float"]
    groups: dict = {}
    for r in range(n):
        key = tuple(lcols[i].array[r].as_py() for i in exact)
        groups.setdefault(key, []).append(tuple(lcols[i].array[r].as_py() for i in floats))
    for r in range(n):
        key = tuple(rcols[i].array[r].as_py() for i in exact)
        candidates = groups.get(key)
        if not candidates:
            return False
        values = tuple(rcols[i].array[r].as_py() for i in floats)
        for j, other in enumerate(candidates):
            if all(_close(x, y) for x, y in zip(values, other)):
                candidates.pop(j)
                break
        else:
            return False
    return True


def _close(x, y) -> bool:
    if x is None or y is None:
        return x is None and y is None
    if x != x or y != y:
        return x != x and y != y
    if x == y:
        return True
    return abs(x - y) <= max(REL_TOL * max(abs(x), abs(y)), 1e-6)


def _verdict_at(left, right, lorder, rorder, at: int, reason: str) -> Verdict:
    """The verdict with a few rows of each side around row `at` (in sorted order)."""

    def rows(table: pa.Table, order) -> list[tuple]:
        if order is not None:
            table = _takeable(table).take(order)
        return as_rows(table.slice(max(0, at - 1), 5))

    return Verdict(
        False, f"{reason} (first difference at row {at})", rows(left, lorder), rows(right, rorder)
    )


def _takeable(table: pa.Table) -> pa.Table:
    """`table` with string views as strings (pyarrow's take has no kernel for views)."""
    for i, t in enumerate(table.schema.types):
        if pa.types.is_string_view(t):
            table = table.set_column(i, table.field(i).name, table.column(i).cast(pa.string()))
    return table


def as_rows(table: pa.Table, limit: int = 8) -> list[tuple]:
    head = table.slice(0, limit)
    columns = [c.to_pylist() for c in head.columns]
    return list(zip(*columns))
