"""Every pandas dtype and object-column case, round-tripped through a query."""

import datetime
import decimal

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
import quiver
from quiver import _quiver


def roundtrip(df):
    """SELECT * over the frame, back as Python rows."""
    return quiver.sql("SELECT * FROM df").arrow()


def types(obj):
    return dict(_quiver._describe_source(obj))


@pytest.mark.parametrize(
    "dtype,arrow",
    [
        ("int8", "Int8"),
        ("int16", "Int16"),
        ("int32", "Int32"),
        ("int64", "Int64"),
        ("uint8", "UInt8"),
        ("uint16", "UInt16"),
        ("uint32", "UInt32"),
        ("uint64", "UInt64"),
        ("float32", "Float32"),
        ("float64", "Float64"),
        ("bool", "Boolean"),
    ],
)
def test_numpy_dtypes(dtype, arrow):
    df = pd.DataFrame({"x": np.array([1, 0, 1], dtype=dtype)})
    assert types(df) == {"x": arrow}
    out = roundtrip(df)
    assert out.column("x").to_pylist() == np.array([1, 0, 1], dtype=dtype).tolist()


def test_float_nan_is_null():
    df = pd.DataFrame({"x": [1.5, np.nan, 2.5]})
    assert quiver.sql("SELECT count(x), sum(x) FROM df").fetchone() == (2, 4.0)


@pytest.mark.parametrize(
    "dtype", ["Int8", "Int16", "Int32", "Int64", "UInt8", "UInt64", "Float32", "Float64", "boolean"]
)
def test_masked_dtypes(dtype):
    values = [1, None, 0] if dtype != "boolean" else [True, None, False]
    df = pd.DataFrame({"x": pd.array(values, dtype=dtype)})
    out = roundtrip(df).column("x").to_pylist()
    assert out[1] is None and out[0] == values[0] and out[2] == values[2]


def test_pandas_strings_all_storages():
    values = ["a", None, "ünïcödé", "€", "😀"]
    for dtype in ["object", pd.StringDtype("python"), pd.StringDtype("pyarrow"), "str"]:
        df = pd.DataFrame({"s": pd.Series(values, dtype=dtype)})
        assert types(df)["s"] == "Utf8View", dtype
        assert roundtrip(df).column("s").to_pylist() == values, dtype


def test_object_strings_every_layout_and_nulls():
    values = [
        "plain ascii",
        "latin-1 é ÿ",
        "ucs-2 € ✓",
        "ucs-4 😀 𝄞",
        "",
        None,
        np.nan,
        pd.NA,
        "x" * 1000,
    ]
    df = pd.DataFrame({"s": pd.Series(values, dtype=object)})
    out = roundtrip(df).column("s").to_pylist()
    assert out == [
        "plain ascii",
        "latin-1 é ÿ",
        "ucs-2 € ✓",
        "ucs-4 😀 𝄞",
        "",
        None,
        None,
        None,
        "x" * 1000,
    ]
    assert _quiver._direct_strings()


def test_str_subclass_takes_the_safe_path():
    class Tag(str):
        pass

    df = pd.DataFrame({"s": pd.Series([Tag("a"), "b"], dtype=object)})
    assert roundtrip(df).column("s").to_pylist() == ["a", "b"]


def test_lone_surrogate_is_a_clear_error():
    df = pd.DataFrame({"s": pd.Series(["ok", "bad \ud800"], dtype=object)})
    with pytest.raises(quiver.ConversionError, match=r'column "s", row 1.*surrogate'):
        roundtrip(df)


def test_mixed_object_column_names_column_row_type():
    df = pd.DataFrame({"s": pd.Series(["a", "b", 3], dtype=object)})
    with pytest.raises(
        quiver.ConversionError, match=r'column "s", row 2: expected str .* got a Python int'
    ):
        roundtrip(df)
    df = pd.DataFrame({"n": pd.Series([1, 2, "three"], dtype=object)})
    with pytest.raises(quiver.ConversionError, match=r'column "n", row 2: expected int .* str'):
        roundtrip(df)


def test_object_bytes_and_python_scalars():
    df = pd.DataFrame(
        {
            "b": pd.Series([b"\x00\x01", None, b"xyz"], dtype=object),
            "i": pd.Series([1, None, 3], dtype=object),
            "f": pd.Series([1.5, None, 2.5], dtype=object),
            "t": pd.Series([True, None, False], dtype=object),
        }
    )
    out = roundtrip(df)
    assert out.column("b").to_pylist() == [b"\x00\x01", None, b"xyz"]
    assert out.column("i").to_pylist() == [1, None, 3]
    assert out.column("f").to_pylist() == [1.5, None, 2.5]
    assert out.column("t").to_pylist() == [True, None, False]


def test_decimal_objects_stay_exact():
    values = [decimal.Decimal("1.10"), None, decimal.Decimal("-12345678901234567890.123")]
    df = pd.DataFrame({"d": pd.Series(values, dtype=object)})
    assert types(df)["d"].startswith("Decimal128(")
    out = roundtrip(df).column("d").to_pylist()
    assert out == [decimal.Decimal("1.100"), None, decimal.Decimal("-12345678901234567890.123")]
    assert quiver.sql("SELECT sum(d) FROM df").fetchone()[0] == decimal.Decimal(
        "-12345678901234567889.023"
    )


def test_categorical_is_a_dictionary():
    df = pd.DataFrame({"c": pd.Categorical(["x", "y", None, "x"])})
    assert types(df)["c"].startswith("Dictionary(Int8")
    assert roundtrip(df).column("c").to_pylist() == ["x", "y", None, "x"]
    assert quiver.sql("SELECT c, count(*) FROM df GROUP BY c ORDER BY c NULLS LAST").fetchall() == [
        ("x", 2),
        ("y", 1),
        (None, 1),
    ]


@pytest.mark.parametrize("unit", ["s", "ms", "us", "ns"])
def test_datetimes_every_unit(unit):
    stamps = pd.Series(pd.to_datetime(["2024-01-02 03:04:05", None]).as_unit(unit))
    df = pd.DataFrame({"t": stamps})
    table = roundtrip(df)
    assert table.schema.field("t").type.unit == unit  # wrapped as is, not converted
    out = table.column("t").to_pylist()
    assert out[0] == datetime.datetime(2024, 1, 2, 3, 4, 5) and out[1] is None


def test_tz_aware_datetimes():
    stamps = pd.Series(pd.to_datetime(["2024-01-02 03:04:05"]).tz_localize("Europe/Paris"))
    df = pd.DataFrame({"t": stamps})
    assert "Europe/Paris" in types(df)["t"]
    out = roundtrip(df).column("t").to_pylist()[0]
    assert out == datetime.datetime(2024, 1, 2, 2, 4, 5, tzinfo=datetime.timezone.utc)


def test_timedelta_and_dates():
    df = pd.DataFrame({"d": pd.to_timedelta(["1 day", None])})
    out = roundtrip(df).column("d").to_pylist()
    assert out == [datetime.timedelta(days=1), None]
    dates = pd.DataFrame({"d": pd.Series([datetime.date(2024, 5, 6), None], dtype=object)})
    assert roundtrip(dates).column("d").to_pylist() == [datetime.date(2024, 5, 6), None]


def test_arrow_dtype_columns():
    df = pd.DataFrame(
        {
            "i": pd.array([1, None], dtype=pd.ArrowDtype(pa.int32())),
            "l": pd.array([[1, 2], None], dtype=pd.ArrowDtype(pa.list_(pa.int64()))),
        }
    )
    out = roundtrip(df)
    assert out.column("i").to_pylist() == [1, None]
    assert out.column("l").to_pylist() == [[1, 2], None]


def test_column_names():
    df = pd.DataFrame([[1, 2]], columns=[0, "b"])
    assert quiver.sql('SELECT "0" + b FROM df').fetchone() == (3,)
    dup = pd.DataFrame([[1, 2]], columns=["a", "a"])
    with pytest.raises(quiver.InvalidInputError, match="duplicate column name"):
        quiver.sql("SELECT * FROM dup")


def test_large_frame_many_morsels():
    n = 1_000_003
    df = pd.DataFrame(
        {"k": np.arange(n) % 7, "s": pd.Series(np.arange(n).astype(str), dtype=object)}
    )
    got = quiver.sql(
        "SELECT count(*), sum(k), count(DISTINCT s), max(length(s)) FROM df"
    ).fetchone()
    assert got == (n, int((np.arange(n) % 7).sum()), n, 7)
    assert quiver.sql("SELECT s FROM df LIMIT 3").arrow().num_rows == 3


def test_date_objects_convert_fast_and_never_truncate_datetimes():
    dates = pd.DataFrame({"d": pd.Series([datetime.date(2024, 5, 6), None] * 1000, dtype=object)})
    assert quiver.sql("SELECT count(d), min(d) FROM dates").fetchone() == (
        1000,
        datetime.date(2024, 5, 6),
    )
    mixed = pd.DataFrame(
        {
            "d": pd.Series(
                [datetime.date(2024, 5, 6), datetime.datetime(2024, 1, 1, 5)], dtype=object
            )
        }
    )
    with pytest.raises(quiver.ConversionError, match=r'column "d", row 1: expected date'):
        quiver.sql("SELECT * FROM mixed")


def test_object_columns_are_converted_only_when_a_query_reads_them(monkeypatch):
    from quiver import _sources

    converted = []
    convert = _sources._converted_objects

    def spy(name, first, values):
        if len(values) > 1:  # not the one-value sample that types the column
            converted.append(name)
        return convert(name, first, values)

    monkeypatch.setattr(_sources, "_converted_objects", spy)
    n = 1000
    df = pd.DataFrame(
        {
            "a": np.arange(n),
            "d": pd.Series([datetime.date(2024, 1, 1 + i % 28) for i in range(n)], dtype=object),
            "i": pd.Series([i if i % 3 else None for i in range(n)], dtype=object),
        }
    )
    assert quiver.sql("SELECT count(*), sum(a) FROM df").fetchone() == (n, n * (n - 1) // 2)
    assert converted == []
    # A column read only by the WHERE clause is converted too.
    got = quiver.sql("SELECT count(a) FROM df WHERE d = DATE '2024-01-05'").fetchone()
    assert got == (len([i for i in range(n) if i % 28 == 4]),)
    assert converted == ["d"]
    converted.clear()
    got = quiver.sql("SELECT sum(i), count(i) FROM df WHERE a < 10").fetchone()
    assert got == (sum(i for i in range(10) if i % 3), 6)
    assert converted == ["i"]
    converted.clear()
    # Read twice in one query (a self-join): the conversion is reused while the column holds
    # the same objects.
    got = quiver.sql("SELECT count(*) FROM df x JOIN df y ON x.d = y.d AND x.a < 50").fetchone()
    assert got == (sum(len(range(j % 28, n, 28)) for j in range(50)),)
    assert converted == []
    assert types(df) == {"a": "Int64", "d": "Date32", "i": "Int64"}
    # A value assigned in place is seen: the next query that reads the column converts again.
    df.loc[3, "d"] = datetime.date(2030, 1, 1)
    assert quiver.sql("SELECT max(d) FROM df").fetchone() == (datetime.date(2030, 1, 1),)
    assert converted == ["d"]
    assert quiver.sql("SELECT count(*) FROM df WHERE d > DATE '2029-01-01'").fetchone() == (1,)
    assert converted == ["d"]
    df.loc[4, "d"] = "not a date"
    with pytest.raises(quiver.ConversionError, match=r'column "d", row 4: expected date'):
        quiver.sql("SELECT max(d) FROM df")
    assert quiver.sql("SELECT sum(a) FROM df").fetchone() == (n * (n - 1) // 2,)


def test_date_objects_across_conversion_chunks():
    n = 2_300_001
    days = np.arange(n) % 3000
    dates = [datetime.date(2020, 1, 1) + datetime.timedelta(days=int(d)) for d in days]
    dates[1_000_000] = None
    df = pd.DataFrame({"k": np.arange(n), "d": pd.Series(dates, dtype=object)})
    got = quiver.sql(
        "SELECT count(d), min(d), max(d), count(*) FILTER (WHERE d = DATE '2020-01-02') FROM df"
    ).fetchone()
    assert got == (
        n - 1,
        datetime.date(2020, 1, 1),
        datetime.date(2020, 1, 1) + datetime.timedelta(days=2999),
        int((days == 1).sum()),
    )
    got = quiver.sql("SELECT k, d FROM df WHERE k IN (0, 999999, 1000000, 2300000) ORDER BY k")
    assert got.fetchall() == [(k, dates[k]) for k in (0, 999_999, 1_000_000, 2_300_000)]


def test_a_bad_value_in_a_column_no_query_reads_is_no_error():
    df = pd.DataFrame({"a": [1, 2, 3], "n": pd.Series([1, 2, "three"], dtype=object)})
    assert quiver.sql("SELECT sum(a) FROM df").fetchone() == (6,)
    with pytest.raises(quiver.ConversionError, match=r'column "n", row 2: expected int .* str'):
        quiver.sql("SELECT a FROM df WHERE n > 1")
    # A type quiver cannot hold at all is refused up front, whatever the query reads.
    odd = pd.DataFrame({"a": [1], "o": pd.Series([{"k": 1}], dtype=object)})
    with pytest.raises(quiver.ConversionError, match="values of Python type dict"):
        quiver.sql("SELECT a FROM odd")


def test_categorical_of_date_objects():
    days = [datetime.date(2024, 1, 1), datetime.date(2024, 1, 2)]
    df = pd.DataFrame({"c": pd.Categorical([days[1], days[0], days[1]])})
    assert quiver.sql("SELECT c, count(*) FROM df GROUP BY c ORDER BY c").fetchall() == [
        (days[0], 1),
        (days[1], 2),
    ]


# --- tables reused across queries ---------------------------------------------------------


def _total(df):
    return quiver.sql(
        "SELECT sum(a) AS a, count(b) AS b, count(f) AS f, count(s) AS s FROM df"
    ).fetchone()


def test_a_frame_is_converted_once_and_reused():
    from quiver import _sources

    df = pd.DataFrame({"a": np.arange(10), "s": [str(i) for i in range(10)]})
    first = _sources.table(df)
    assert first.reusable
    assert _sources.table(df) is first
    assert quiver.sql("SELECT count(*) FROM df").fetchone() == (10,)
    assert _sources.table(df) is first


def test_reused_tables_see_every_kind_of_change():
    df = pd.DataFrame(
        {
            "a": np.arange(5, dtype=np.int64),
            "b": pd.array([1, 2, 3, 4, 5], dtype="Int64"),
            "f": np.arange(5, dtype=np.float64),
            "s": pd.Series(["v", "w", "x", "y", "z"], dtype="str"),
            "o": pd.Series(["v", "w", "x", "y", "z"], dtype=object),
            "t": np.array([True, False, True, False, True]),
        }
    )
    assert _total(df) == (10, 5, 5, 5)
    df.loc[0, "a"] = 100  # in place into the NumPy block
    df.loc[1, "b"] = pd.NA  # the masked array's mask, in place
    df.loc[2, "f"] = np.nan  # NaN is NULL, and NULLs are found at every scan
    df.loc[3, "s"] = None  # an Arrow-backed column swaps its array
    assert _total(df) == (110, 4, 4, 4)
    df.loc[4, "o"] = "changed"
    df.loc[0, "t"] = False
    row = quiver.sql("SELECT countIf(o = 'changed'), countIf(t) FROM df").fetchone()
    assert row == (1, 2)
    df["a"] = df["a"] * 2  # a column replaced
    assert quiver.sql("SELECT sum(a) FROM df").fetchone() == (220,)
    df["extra"] = 1  # a column added
    assert quiver.sql("SELECT sum(extra) FROM df").fetchone() == (5,)
    df.columns = [*df.columns[:-1], "renamed"]
    assert quiver.sql("SELECT sum(renamed) FROM df").fetchone() == (5,)
    del df["renamed"]
    with pytest.raises(quiver.Error, match="renamed"):
        quiver.sql("SELECT sum(renamed) FROM df").fetchall()
    df.loc[len(df)] = [1, 1, 1.0, "n", "n", True]  # a row appended in place
    assert quiver.sql("SELECT count(*) FROM df").fetchone() == (6,)


def test_a_query_checks_only_the_columns_it_names():
    from quiver import _sources

    df = pd.DataFrame({"a": np.arange(4), "Sv": pd.Series(list("wxyz"), dtype="str")})
    assert quiver.sql("SELECT sum(a) FROM df").fetchone() == (6,)
    first = _sources.table(df)
    df.loc[0, "Sv"] = "changed"  # swaps the Arrow array of a column the next query does not name
    assert quiver.sql("SELECT sum(a) FROM df").fetchone() == (6,)
    assert _sources.table(df, {"select", "a", "df"}) is first
    # Naming the column (in any case) checks it, and finds the change.
    assert quiver.sql("SELECT sv FROM df WHERE a = 0").fetchall() == [("changed",)]
    assert _sources.table(df) is not first
    df.loc[1, "Sv"] = "again"
    assert quiver.sql("SELECT * FROM df WHERE a = 1").fetchall() == [(1, "again")]
    df.loc[2, "a"] = 10  # in place into the NumPy block: seen without a new table
    assert quiver.sql("SELECT sum(A) FROM df").fetchone() == (14,)
    df.insert(0, "b", 1)  # a new block layout
    assert quiver.sql("SELECT sum(b), count(*) FROM df").fetchone() == (4, 4)


def test_object_rows_read_through_a_filter_follow_changes():
    # A filtered scan decodes only the selected objects and leaves the column unsnapshotted;
    # a later full read snapshots it; changes in place are seen either way.
    df = pd.DataFrame({"k": np.arange(6), "o": pd.Series(list("abcdef"), dtype=object)})
    assert quiver.sql("SELECT o FROM df WHERE k = 4").fetchall() == [("e",)]
    df.loc[4, "o"] = "changed"
    assert quiver.sql("SELECT o FROM df WHERE k = 4").fetchall() == [("changed",)]
    assert quiver.sql("SELECT count(*) FROM df WHERE o = 'changed'").fetchone() == (1,)
    df.loc[4, "o"] = "again"
    rows = quiver.sql("SELECT o FROM df WHERE k >= 4 ORDER BY k").fetchall()
    assert rows == [("again",), ("f",)]
    assert quiver.sql("SELECT count(*) FROM df WHERE o = 'changed'").fetchone() == (0,)


def test_converted_columns_are_not_reused():
    from quiver import _sources

    cat = pd.DataFrame({"c": pd.Categorical(["x", "y", "x"])})
    assert not _sources.table(cat).reusable
    cat.loc[0, "c"] = "y"
    assert quiver.sql("SELECT count(*) FROM cat WHERE c = 'y'").fetchone() == (2,)
    dec = pd.DataFrame({"d": [decimal.Decimal("1.5"), decimal.Decimal("2.5")]})
    assert not _sources.table(dec).reusable
    dec.loc[0, "d"] = decimal.Decimal("10.5")
    assert quiver.sql("SELECT sum(d) FROM dec").fetchone() == (decimal.Decimal("13.0"),)
    # Objects converted when read are reused, and converted again once a value changes.
    ints_as_objects = pd.DataFrame({"i": pd.Series([1, 2, None], dtype=object)})
    assert _sources.table(ints_as_objects).reusable
    assert quiver.sql("SELECT sum(i) FROM ints_as_objects").fetchone() == (3,)
    ints_as_objects.loc[2, "i"] = 40
    assert quiver.sql("SELECT sum(i) FROM ints_as_objects").fetchone() == (43,)


def test_the_cache_never_keeps_a_frame_alive():
    import gc
    import weakref

    from quiver import _sources

    def query_a_frame():
        # In a function of its own: Python 3.11's frame.f_locals snapshot (which name lookup
        # reads) holds the caller's variables until that frame ends.
        df = pd.DataFrame({"a": np.arange(1000)})
        assert quiver.sql("SELECT sum(a) FROM df").fetchone() == (499500,)
        assert id(df) in _sources._cache
        return id(df), weakref.ref(df), weakref.ref(df._mgr.blocks[0].values)

    key, frame, column = query_a_frame()
    gc.collect()
    assert frame() is None
    assert key not in _sources._cache
    assert column() is None


def test_numpy_arrays_and_arrow_tables_are_reused_safely():
    from quiver import _sources

    arr = np.arange(5, dtype=np.int64)
    assert _sources.table(arr) is _sources.table(arr)
    arr[0] = 10
    assert quiver.sql("SELECT sum(column0) FROM arr").fetchone() == (20,)
    arr.shape = (5, 1)
    assert quiver.sql("SELECT sum(column0) FROM arr").fetchone() == (20,)
    tbl = pa.table({"x": [1, 2, 3]})
    assert _sources.table(tbl) is _sources.table(tbl)
    assert quiver.sql("SELECT sum(x) FROM tbl").fetchone() == (6,)


@pytest.mark.parametrize("sizes", [[70_000, 130_000, 5, 99_995], [100] * 3000])
def test_chunked_arrow_strings_across_morsels_and_queries(sizes):
    # Morsels follow chunk boundaries when there are few; with thousands of tiny chunks they
    # cross them. Strings converted by one query are reused by the next, filtered or not.
    values = [f"v{i % 977}" if i % 13 else None for i in range(sum(sizes))]
    chunks, start = [], 0
    for size in sizes:
        chunks.append(pa.array(values[start : start + size], pa.large_string()))
        start += size
    df = pd.DataFrame({"s": pd.Series(pd.arrays.ArrowExtensionArray(pa.chunked_array(chunks)))})
    df["n"] = np.arange(len(df))
    expected = df[df["s"].str.endswith("7", na=False)]
    first = "SELECT count(*), sum(n), max(s) FROM df WHERE s LIKE '%7'"
    want = (len(expected), int(expected["n"].sum()), expected["s"].max())
    assert quiver.sql(first).fetchone() == want
    assert quiver.sql("SELECT count(s), min(s), max(s) FROM df").fetchone() == (
        int(df["s"].notna().sum()),
        df["s"].min(),
        df["s"].max(),
    )
    assert quiver.sql(first).fetchone() == want
    rows = quiver.sql("SELECT n, s FROM df WHERE n % 1000 = 999 ORDER BY n").fetchall()
    assert rows == [(n, values[n]) for n in range(999, len(df), 1000)]


def test_object_strings_decoded_once_still_see_assignments():
    # Decoded strings are kept while the column holds the same objects; the kept copy holds
    # each object, so freeing one and storing a new string at the same address cannot fool it.
    n = 300_000
    o = pd.Series([f"value {i}" for i in range(n)], dtype=object)
    df = pd.DataFrame({"o": o})
    query = "SELECT count(*) FROM df WHERE o = 'changed'"
    assert quiver.sql(query).fetchone() == (0,)
    assert quiver.sql("SELECT max(o) FROM df").fetchone() == ("value 99999",)
    df.loc[5, "o"] = None
    df.loc[5, "o"] = "changed"  # likely the freed object's address
    df.loc[250_000, "o"] = "changed"
    assert quiver.sql(query).fetchone() == (2,)
    assert quiver.sql("SELECT count(o) FROM df").fetchone() == (n,)
    df.loc[7, "o"] = None
    assert quiver.sql("SELECT count(o) FROM df").fetchone() == (n - 1,)
    df.loc[8, "o"] = 42
    with pytest.raises(quiver.ConversionError, match='column "o", row 8'):
        quiver.sql("SELECT max(o) FROM df").fetchall()


def test_a_record_batch_reader_is_read_once_then_refused():
    t = pa.table({"a": [1, 2, 3]})
    reader = pa.RecordBatchReader.from_batches(t.schema, t.to_batches())
    assert quiver.sql("SELECT sum(a) FROM reader").fetchone() == (6,)
    with pytest.raises(quiver.InvalidInputError, match="already read"):
        quiver.sql("SELECT sum(a) FROM reader").fetchall()


def test_a_parquet_dataset_is_read_lazily_by_fragment(tmp_path):
    import pyarrow.dataset as pds
    import pyarrow.parquet as pq

    for part in range(5):
        start = part * 1000
        pq.write_table(
            pa.table(
                {
                    "k": pa.array(range(start, start + 1000), pa.int64()),
                    "s": pa.array([f"p{part}"] * 1000, pa.large_string()),
                    "big": pa.array([b"x" * 100] * 1000),
                }
            ),
            tmp_path / f"part{part}.parquet",
        )
    dataset = pds.dataset(tmp_path, format="parquet")
    plan = str(quiver.sql("EXPLAIN SELECT sum(k) FROM dataset").fetchall())
    assert "PythonDatasetScan" in plan and "projection=[k]" in plan
    assert quiver.sql("SELECT sum(k), count(*) FROM dataset").fetchone() == (sum(range(5000)), 5000)
    analyzed = quiver.sql("EXPLAIN ANALYZE SELECT sum(k) FROM dataset").fetchall()
    scan = next(row[-1] for row in analyzed if "PythonDatasetScan" in row[-1])
    assert "output_rows=5.00 K" in scan and "elapsed_compute=" in scan
    assert quiver.sql("SELECT count(*) FROM dataset").fetchone() == (5000,)
    rows = quiver.sql("SELECT s, count(*) FROM dataset WHERE k % 2 = 0 GROUP BY s ORDER BY s")
    assert rows.fetchall() == [(f"p{i}", 500) for i in range(5)]
    # Read again at every query: a dataset is not consumed.
    assert quiver.sql("SELECT max(k) FROM dataset").fetchone() == (4999,)
    # Empty datasets and datasets of in-memory tables work too.
    assert quiver.sql("SELECT count(*) FROM dataset WHERE k < 0").fetchone() == (0,)
    memory = pds.dataset(pa.table({"a": [1, 2, 3]}))
    assert quiver.sql("SELECT sum(a) FROM memory").fetchone() == (6,)
