"""The fuzzer's tables: their columns, what the generator may do with each, and their rows.

Every fact table (``tiny``, ``mid``, ``big``) has the same columns, so a query generated for one
runs on any other; ``dim`` is a small dimension table to join to. Rows are a pure function of
the seed. ``big`` is sized to take quiver's custom GROUP BY paths: its ``kb`` and ``sk`` keys
have ~150k distinct values, past the radix aggregation's switch at 32,768 groups per partition
(``quiver-agg/src/radix.rs``), while ``g``, ``b``, ``i8``, ``u8``, ``i16`` and ``u16`` are keys
whose range is proven small (at most 65,536 slots, ``quiver-agg/src/rule.rs``).
"""

from __future__ import annotations

import datetime
import decimal
from dataclasses import dataclass

import numpy as np
import pyarrow as pa


@dataclass(frozen=True)
class Column:
    """A column and the roles the generator may give it.

    ``kind`` is the generator's type: int, float, dec, str, bool, ts, date. ``domain`` says
    whether it makes a small-domain key ("small"), a large one ("large") or neither ("").
    ``summable``: SUM/AVG over a table cannot overflow and, for floats, are exact in any order
    (values are multiples of 1/8 below 2**20, so every partial sum is a representable double).
    ``safe``: DuckDB and DataFusion agree on comparing, ordering, grouping and DISTINCT of its
    values (see ``fx`` and ``tsny``).
    """

    name: str
    kind: str
    type: pa.DataType
    domain: str = ""
    summable: bool = False
    safe: bool = True
    unique: bool = False
    # Holds NaN or an infinity. DataFusion's grouped MIN/MAX over such floats starts from
    # f64::MAX/MIN and compares with partial_cmp: a group of +inf gets MIN = 1.797e308, and
    # NaN wins or loses by row order (apache/datafusion#24432), so they get no grouped MIN/MAX.
    special: bool = False


FACT_COLUMNS = (
    Column("id", "int", pa.int64(), "large", summable=True, unique=True),
    Column("g", "int", pa.int8(), "small", summable=True),
    Column("b", "bool", pa.bool_(), "small"),
    Column("i8", "int", pa.int8(), "small", summable=True),
    Column("i16", "int", pa.int16(), "small", summable=True),
    Column("i32", "int", pa.int32(), "large", summable=True),
    Column("i64", "int", pa.int64(), "large", summable=True),
    Column("u8", "int", pa.uint8(), "small", summable=True),
    Column("u16", "int", pa.uint16(), "small", summable=True),
    Column("u32", "int", pa.uint32(), "large", summable=True),
    # Up to 2**64 - 1: SUM would overflow DataFusion's UInt64 (DuckDB sums into HUGEINT).
    Column("u64", "int", pa.uint64(), "large"),
    Column("kb", "int", pa.int64(), "large", summable=True),
    Column("s", "str", pa.string(), "small"),
    Column("sd", "str", pa.dictionary(pa.int32(), pa.string()), "small"),
    Column("sk", "str", pa.string(), "large"),
    Column("f", "float", pa.float64(), "small", summable=True, special=True),
    Column("f4", "float", pa.float32(), "small", summable=True, special=True),
    Column("fr", "float", pa.float64(), "large"),
    # -0.0 next to 0.0, -inf next to +inf. DataFusion sorts -0.0 before 0.0 (DuckDB: ties)
    # and its DISTINCT aggregates may count them apart (findings F21); inf + -inf gives a
    # NaN with the sign bit set, which DataFusion orders below every number (`< 0` is true;
    # DuckDB: above). Only in outputs and aggregates for the DuckDB comparison.
    Column("fx", "float", pa.float64(), "", safe=False, special=True),
    Column("dec", "dec", pa.decimal128(10, 2), "large", summable=True),
    Column("dw", "dec", pa.decimal128(38, 6), "large", summable=True),
    Column("ts", "ts", pa.timestamp("us"), "large"),
    Column("tstz", "ts", pa.timestamp("us", tz="UTC"), "large"),
    # DuckDB reads a literal TIMESTAMP in the session's zone (UTC), DataFusion in the column's:
    # New York timestamps are compared to nothing in the DuckDB comparison.
    Column("tsny", "ts", pa.timestamp("us", tz="America/New_York"), "", safe=False),
    Column("dt", "date", pa.date32(), "large"),
)

DIM_COLUMNS = (
    Column("k", "int", pa.int32(), "small", summable=True),
    Column("kb", "int", pa.int64(), "large", summable=True),
    Column("name", "str", pa.string(), "small"),
    Column("w", "float", pa.float64(), "small", summable=True),
    Column("flag", "bool", pa.bool_(), "small"),
)

# Rows per table and the number of distinct `kb` keys (`sk` has half as many).
FACT_SIZES = {"tiny": (64, 24), "mid": (20_000, 8_000), "big": (300_000, 150_000)}
DIM_ROWS = 1_000
TABLES = ("tiny", "mid", "big", "dim")


def columns_of(table: str) -> tuple[Column, ...]:
    return DIM_COLUMNS if table == "dim" else FACT_COLUMNS


# Strings with what breaks string code: the empty string, case pairs, multi-byte UTF-8 of 2, 3
# and 4 bytes, LIKE's wildcards as data, leading and trailing blanks. Not 'İ' or 'Σ': their
# lowercase differs between Rust (i̇, final ς) and DuckDB's utf8proc (i, σ).
WORDS = (
    "",
    "a",
    "A",
    "ab",
    "abc",
    "Apple",
    "apple",
    "APPLE",
    "banana",
    "é",
    "École",
    "straße",
    "日本",
    "日本語",
    "🙂",
    "a🙂b",
    " lead",
    "trail ",
    "x%y",
    "under_score",
    "Mixed Case",
    "NULL",
    "zebra",
    "Zulu",
    "ñandú",
    "ÅÄÖ",
    "0",
    "10",
    "9",
    # Past the 12 bytes a string view holds inline, sharing their first 4 bytes (the view's
    # prefix) with each other: quiver compares views with literals by prefix first.
    "a much longer string",
    "a much longer strinG",
    "a much longer string!",
    "日本語日本語日本語",
)
CATEGORIES = ("", "Red", "blue", "green", "red", "ünï", "紫", "yellow🙂")
DIM_NAMES = ("alpha", "beta", "Gamma", "", "δέλτα", "eps ilon", "zeta", "ω")

_EPOCH_US_1960 = -315_619_200_000_000
_EPOCH_US_2040 = 2_208_988_800_000_000


def _mask(rng: np.random.Generator, n: int, rate: float) -> np.ndarray:
    return rng.random(n) < rate


def _ints(rng, n, low, high, dtype, extremes=()):
    values = rng.integers(low, high, n, dtype=np.int64 if dtype != np.uint64 else np.uint64)
    values = values.astype(dtype)
    for value in extremes:
        values[rng.integers(0, n)] = value
    return values


def _eighths(rng, n, bound):
    return rng.integers(-bound * 8, bound * 8 + 1, n).astype(np.float64) / 8.0


def _scatter(rng, values, specials, rate):
    """Sets a random `rate` of the values to random picks among `specials`."""
    hit = _mask(rng, len(values), rate)
    values[hit] = rng.choice(np.array(specials, dtype=values.dtype), int(hit.sum()))
    return values


def fact_table(rows: int, keys: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    n = rows
    cols: dict[str, pa.Array] = {}

    def put(name, values, null_rate=0.05):
        column = next(c for c in FACT_COLUMNS if c.name == name)
        mask = _mask(rng, n, null_rate) if null_rate else None
        cols[name] = pa.array(values, type=column.type, mask=mask)

    put("id", rng.permutation(n).astype(np.int64), 0)
    put("g", rng.integers(0, 10, n).astype(np.int8), 0.03)
    put("b", rng.random(n) < 0.5)
    put("i8", _ints(rng, n, -128, 128, np.int8, (-128, 127)))
    put("i16", _ints(rng, n, -32768, 32768, np.int16, (-32768, 32767)))
    put("i32", _ints(rng, n, -1_000_000, 1_000_000, np.int32, (-(2**31), 2**31 - 1)))
    put("i64", _ints(rng, n, -(2**40), 2**40, np.int64))
    put("u8", _ints(rng, n, 0, 256, np.uint8, (0, 255)))
    put("u16", _ints(rng, n, 0, 65536, np.uint16, (0, 65535)))
    put("u32", _ints(rng, n, 0, 2**32, np.uint32, (0, 2**32 - 1)))
    put("u64", _ints(rng, n, 0, 2**64 - 1, np.uint64, (0, 2**63, 2**64 - 1)))
    put("kb", rng.integers(0, keys, n).astype(np.int64), 0.01)
    words = np.array(WORDS, dtype=object)
    extra = np.array([f"w{v}" for v in rng.integers(0, 50, n)], dtype=object)
    pick = rng.random(n) < 0.6
    put("s", np.where(pick, words[rng.integers(0, len(WORDS), n)], extra))
    codes = rng.integers(0, len(CATEGORIES), n).astype(np.int32)
    sd_mask = _mask(rng, n, 0.05)
    cols["sd"] = pa.DictionaryArray.from_arrays(
        pa.array(codes, mask=sd_mask), pa.array(CATEGORIES, pa.string())
    )
    put("sk", np.array([f"k{v:06d}" for v in rng.integers(0, max(keys // 2, 1), n)]), 0.01)
    put("f", _scatter(rng, _eighths(rng, n, 1000), [np.nan, np.inf], 0.02))
    put("f4", _scatter(rng, _eighths(rng, n, 100).astype(np.float32) / 2, [np.nan], 0.02))
    put("fr", rng.normal(0, 1e3, n))
    put("fx", _scatter(rng, rng.normal(0, 1, n), [-0.0, 0.0, np.inf, -np.inf, np.nan], 0.3))
    cents = rng.integers(-(10**9), 10**9, n)
    put("dec", [decimal.Decimal(int(c)).scaleb(-2) for c in cents])
    micros = rng.integers(-(10**15), 10**15, n)
    put("dw", [decimal.Decimal(int(m)).scaleb(-6) for m in micros])
    us = rng.integers(_EPOCH_US_1960, _EPOCH_US_2040, n)
    # A few timestamps on whole days and hours, so date_trunc and equality meet ties.
    us = _scatter(rng, us, [0, 86_400_000_000, 946_684_800_000_000, 1_600_000_000_000_000], 0.05)
    put("ts", us)
    put("tstz", rng.permutation(us))
    put("tsny", rng.permutation(us))
    put("dt", rng.integers(-25_567, 47_482, n).astype(np.int32))
    return pa.table(cols)


def dim_table(rows: int, fact_keys: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    # Keys 0..rows-1 with a few duplicated: joins on `k` mostly find one row, sometimes two.
    k = np.arange(rows, dtype=np.int32) % (rows - rows // 20)
    return pa.table(
        {
            "k": pa.array(k, pa.int32(), mask=_mask(rng, rows, 0.02)),
            "kb": pa.array(
                rng.integers(0, fact_keys, rows), pa.int64(), mask=_mask(rng, rows, 0.02)
            ),
            "name": pa.array(
                np.array(DIM_NAMES, dtype=object)[rng.integers(0, len(DIM_NAMES), rows)],
                mask=_mask(rng, rows, 0.05),
            ),
            "w": pa.array(_eighths(rng, rows, 100), mask=_mask(rng, rows, 0.05)),
            "flag": pa.array(rng.random(rows) < 0.3, mask=_mask(rng, rows, 0.05)),
        }
    )


def build_tables(seed: int, sizes: dict[str, tuple[int, int]] | None = None) -> dict[str, pa.Table]:
    """Every table, from one seed. `sizes` overrides FACT_SIZES (rows, distinct keys)."""
    sizes = {**FACT_SIZES, **(sizes or {})}
    tables = {
        name: fact_table(rows, keys, seed * 101 + i)
        for i, (name, (rows, keys)) in enumerate(sizes.items())
    }
    tables["dim"] = dim_table(DIM_ROWS, sizes["mid"][1], seed * 101 + 7)
    return tables


@dataclass(frozen=True)
class Profile:
    """A few values of each column, for literals that select some rows and miss others."""

    values: dict[tuple[str, str], tuple]

    @staticmethod
    def of(tables: dict[str, pa.Table], seed: int) -> Profile:
        rng = np.random.default_rng(seed)
        values = {}
        for table_name, table in tables.items():
            for name in table.column_names:
                column = table.column(name)
                picks = rng.integers(0, len(table), 12)
                sample = [column[int(i)].as_py() for i in picks]
                sample = [v for v in sample if v is not None]
                values[(table_name, name)] = tuple(sample)
        return Profile(values)

    def sample(self, table: str, column: str) -> tuple:
        return self.values.get((table, column), ())


def python_value_sql(value, column: Column) -> str:
    """`value` (as pyarrow returns it) as a SQL literal both engines read alike."""
    if value is None:
        return "NULL"
    kind = column.kind
    if kind == "bool":
        return "TRUE" if value else "FALSE"
    if kind == "int":
        return str(int(value))
    if kind == "float":
        if value != value:
            return "CAST('NaN' AS DOUBLE)"
        if value in (float("inf"), float("-inf")):
            return f"CAST('{'-' if value < 0 else ''}Infinity' AS DOUBLE)"
        return repr(float(value))
    if kind == "dec":
        return format(value, "f")
    if kind == "str":
        return "'" + str(value).replace("'", "''") + "'"
    if kind == "ts":
        if isinstance(value, datetime.datetime) and value.tzinfo is not None:
            value = value.astimezone(datetime.timezone.utc).replace(tzinfo=None)
        return f"TIMESTAMP '{value.isoformat(sep=' ')}'"
    if kind == "date":
        return f"DATE '{value.isoformat()}'"
    raise ValueError(f"no literal for kind {kind}")
