"""Zero-copy, the GIL, threads, Ctrl-C, errors and import cost."""

import sys
import threading
import time

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
import quiver
from conftest import run_python

LONG_QUERY = "SELECT sum(value % 7) FROM generate_series(1, 3000000000)"


def test_numpy_column_is_not_copied():
    df = pd.DataFrame({"x": np.arange(1_000_000, dtype=np.int64)})
    address = df["x"].to_numpy().ctypes.data
    table = pa.table(quiver.sql("SELECT x FROM df"))
    addresses = {chunk.buffers()[1].address for chunk in table.column("x").chunks}
    assert address in addresses


def test_sum_over_100m_rows_does_not_copy_the_column():
    result = run_python(
        """
        import resource, numpy as np, pandas as pd, quiver
        df = pd.DataFrame({"x": np.ones(100_000_000, dtype=np.int64)})
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        got = quiver.sql("SELECT sum(x) FROM df").fetchone()[0]
        after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        assert got == 100_000_000, got
        print((after - before) * 1024)
        """
    )
    assert result.returncode == 0, result.stderr
    grown = int(result.stdout.strip())
    assert grown < 0.10 * 800_000_000, f"peak RSS grew by {grown} bytes"


def test_gil_is_released_while_a_query_runs():
    done = threading.Event()
    ticks = 0

    def query():
        quiver.sql("SELECT sum(value % 7) FROM generate_series(1, 300000000)").fetchone()
        done.set()

    thread = threading.Thread(target=query)
    thread.start()
    while not done.is_set():
        ticks += 1
        time.sleep(0.001)
    thread.join()
    assert ticks > 50  # the main thread kept running during the query


def test_threads_run_queries_at_once():
    con = quiver.connect()
    finished_long = threading.Event()
    short_done_while_long_ran = []

    def long():
        try:
            con.sql("SELECT sum(value % 7) FROM generate_series(1, 600000000)").fetchone()
        finally:
            finished_long.set()

    thread = threading.Thread(target=long)
    thread.start()
    time.sleep(0.2)
    for _ in range(5):
        assert con.sql("SELECT 40 + 2").fetchone() == (42,)
    short_done_while_long_ran.append(not finished_long.is_set())
    thread.join()
    assert short_done_while_long_ran == [True]


def assert_ctrl_c_interrupts(setup: str, query: str, then: str, expected: str) -> None:
    """In a fresh interpreter: after `setup`, SIGINT during `query` raises KeyboardInterrupt
    within 2 s of the query's start, and `then` still answers `expected`. The SIGINT comes 1 s
    into the query, unless `setup` sets `timer = False` and calls `interrupt()` itself."""
    result = run_python(
        f"""
        import os, signal, threading, time, quiver
        interrupted = threading.Event()
        def interrupt():
            os.kill(os.getpid(), signal.SIGINT)
        timer = True
        {setup}
        con = quiver.connect()
        if timer:
            threading.Timer(1.0, interrupt).start()
        start = time.monotonic()
        try:
            con.sql("{query}").fetchone()
            print("not interrupted")
        except KeyboardInterrupt:
            interrupted.set()
            print("interrupted after", round(time.monotonic() - start, 2))
        print(con.sql("{then}").fetchone())
        """,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("interrupted after"), result.stdout
    assert float(lines[0].split()[-1]) < 2.0
    assert lines[1] == expected


def test_ctrl_c_cancels_a_query_and_the_session_stays_usable():
    assert_ctrl_c_interrupts("", LONG_QUERY, "SELECT 1 + 1", "(2,)")


# The conversion checks each value for NaN with `value != value`, so the float at row 1 sends
# the SIGINT as the query's conversion starts, and holds the conversion until the query has seen
# it: the test does not depend on how long 3M values take to convert.
SIGNALLING_FLOATS = (
    "import pandas as pd; timer = False\n"
    "        class Signalling(float):\n"
    "            armed = False\n"
    "            def __ne__(self, other):\n"
    "                if Signalling.armed:\n"
    "                    Signalling.armed = False; interrupt(); interrupted.wait(10)\n"
    "                return float(self) != float(other)\n"
    "        values = [float(i) for i in range(3_000_000)]; values[1] = Signalling(1.0)\n"
    '        df = pd.DataFrame({"x": pd.Series(values, dtype=object)}); Signalling.armed = True'
)


def test_ctrl_c_interrupts_converting_an_object_column():
    assert_ctrl_c_interrupts(
        SIGNALLING_FLOATS, "SELECT sum(x) FROM df", "SELECT count(*) FROM df", "(3000000,)"
    )


def test_error_tree():
    with pytest.raises(quiver.ParserError) as error:
        quiver.sql("SELECT 1;\nSELEC 2")
    assert error.value.line == 2 and isinstance(error.value, quiver.Error)
    with pytest.raises(quiver.CatalogError, match="did you mean"):
        quiver.connect().sql("CREATE TABLE orders AS SELECT 1 AS x; SELECT * FROM ordrs")
    with pytest.raises(quiver.IOError):
        quiver.sql("SELECT * FROM '/nonexistent/file.parquet'").fetchall()
    with pytest.raises(quiver.InvalidInputError):
        quiver.sql("SELECT $x", params=object())
    for cls in (quiver.ParserError, quiver.CatalogError, quiver.ConversionError, quiver.IOError):
        assert issubclass(cls, quiver.Error)


def test_import_does_not_import_dataframe_libraries():
    result = run_python(
        """
        import sys, quiver
        print(sorted(m for m in ("pandas", "numpy", "pyarrow", "polars") if m in sys.modules))
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/smaps")
def test_the_allocator_asks_for_no_transparent_huge_pages():
    # A huge page is zeroed whole on first touch and may make the fault compact memory first;
    # quiver's allocator must not madvise(MADV_HUGEPAGE), mimalloc's default. Checked in a
    # fresh interpreter, where nothing else (NumPy madvises its large arrays) has asked.
    result = run_python(
        """
        import quiver
        quiver.sql("SELECT count(DISTINCT number) FROM numbers(3000000)").fetchall()
        flags = [line.split()[1:] for line in open("/proc/self/smaps") if line.startswith("VmFlags:")]
        print(len(flags), sum("hg" in f for f in flags))
        """
    )
    assert result.returncode == 0, result.stderr
    mappings, huge = map(int, result.stdout.split())
    assert mappings > 0 and huge == 0


# --- filters evaluated inside the scan ----------------------------------------------------


def _frame(rows: int = 250_000):
    rng = np.random.default_rng(7)
    a = rng.integers(0, 1000, rows)
    b = pd.array(rng.integers(0, 10, rows), dtype="Int64")
    b[::7] = pd.NA
    s = pd.Series([f"s{i % 13}" for i in range(rows)], dtype="str")
    o = pd.Series([f"o{i % 11}" if i % 5 else None for i in range(rows)], dtype=object)
    return pd.DataFrame({"a": a, "b": b, "s": s, "o": o, "f": rng.random(rows)})


def test_pushed_filters_match_pandas():
    df = _frame()
    plan = quiver.sql("EXPLAIN SELECT a FROM df WHERE b > 3").fetchall()
    assert "PythonScan" in str(plan) and "filter=[" in str(plan)
    expected = df[(df["b"] > 3).fillna(False)]
    got = quiver.sql("SELECT a, o FROM df WHERE b > 3 ORDER BY a, o NULLS FIRST").df()
    want = expected[["a", "o"]].sort_values(["a", "o"], na_position="first")
    assert got["a"].tolist() == want["a"].tolist()
    assert [None if v is None or v != v else v for v in got["o"]] == [
        None if v is None else v for v in want["o"]
    ]
    # A filter on a column the query does not return, on strings of both kinds, with NULLs.
    assert quiver.sql(
        "SELECT count(*), sum(a) FROM df WHERE s = 's3' AND o IS NULL"
    ).fetchone() == (
        int(((df["s"] == "s3") & df["o"].isna()).sum()),
        int(df.loc[(df["s"] == "s3") & df["o"].isna(), "a"].sum()),
    )
    # Nothing passes: an empty result with the table's columns.
    empty = quiver.sql("SELECT * FROM df WHERE a > 5000").arrow()
    assert empty.num_rows == 0 and empty.column_names == list(df.columns)
    # Everything passes.
    assert quiver.sql("SELECT count(*) FROM df WHERE a >= 0").fetchone() == (len(df),)


def test_string_equality_over_views_matches_pandas(tmp_path):
    # `s = 'x'` and `s <> 'x'` over string views are decided from the views: literals of up to
    # 12 bytes by the length and inline bytes, longer ones by length, prefix and then the data
    # buffer. Strings of every length around those limits, sharing prefixes, with NULLs; over
    # the frame's scan (object and `str` columns) and over a Parquet file (a filter above it).
    words = ["", "a", "ab", "abcdefghijkl", "abcdefghijklm", "abcdefghijklmnop", "abcdefghijklmnoZ"]
    values = [w for w in words for _ in range(3)] + [None] * 5 + ["abcd", "abcZ"] * 4
    df = pd.DataFrame({"o": pd.Series(values, dtype=object), "s": pd.Series(values, dtype="str")})
    path = tmp_path / "words.parquet"
    df.to_parquet(path)
    for literal in [*words, "abcd", "zzzzzzzzzzzzzzzzzzzz"]:
        equal = sum(v == literal for v in values)
        other = sum(v is not None and v != literal for v in values)
        for source in ["df", f"'{path}'"]:
            for column in ["o", "s"]:
                counts = quiver.sql(
                    f"SELECT count(*) FILTER (WHERE {column} = $x), "
                    f"count(*) FILTER (WHERE $x <> {column}) FROM {source}",
                    params={"x": literal},
                ).fetchone()
                assert counts == (equal, other), (literal, source, column)
                where = quiver.sql(
                    f"SELECT count(*) FROM {source} WHERE {column} <> $x", params={"x": literal}
                ).fetchone()
                assert where == (other,), (literal, source, column)


def _analyzed(sql: str) -> str:
    return "\n".join(row[-1] for row in quiver.sql("EXPLAIN ANALYZE " + sql).fetchall())


def _scan_partitions(plan: str) -> int:
    return int(plan.split("partitions=", 1)[1].split(",", 1)[0])


def _scan_metrics(plan: str) -> dict[str, str]:
    line = next(line for line in plan.splitlines() if "PythonScan:" in line)
    listed = line.split("metrics=[", 1)[1].rsplit("]", 1)[0]
    return dict(item.split("=", 1) for item in listed.split(", "))


def test_explain_analyze_shows_what_the_scan_read_and_returned():
    df = _frame()
    kept = int((df["a"] < 100).sum())
    plan = _analyzed("SELECT sum(f) FROM df WHERE a < 100")
    metrics = _scan_metrics(plan)
    assert metrics["output_rows"] == f"{kept / 1000:.2f} K"
    assert metrics["rows_read"] == f"{len(df) / 1000:.1f} K"
    assert metrics["elapsed_compute"] != "0ns"
    # Without a filter every row read is returned; under a LIMIT the scan stops early: each
    # of its partitions after at most 10 rows (the one that finishes second may be stopped
    # before it starts).
    plan = _analyzed("SELECT a FROM df LIMIT 10")
    metrics = _scan_metrics(plan)
    assert metrics["rows_read"] == metrics["output_rows"]
    partitions = _scan_partitions(plan)
    assert 10 <= int(metrics["output_rows"]) <= 10 * partitions


def test_a_selective_filter_yields_few_batches_with_every_row():
    # 1M rows in morsels of 100K: each morsel keeps 100 rows, which the scan joins into
    # batches of up to the batch size instead of yielding one small batch per morsel.
    rows = 1_000_000
    df = pd.DataFrame(
        {"a": np.arange(rows, dtype=np.int64), "s": [f"v{i % 7}" for i in range(rows)]}
    )
    sql = "SELECT a, s FROM df WHERE a % 1000 = 0"
    plan = _analyzed(sql)
    metrics = _scan_metrics(plan)
    partitions = _scan_partitions(plan)
    assert metrics["output_rows"] == "1.00 K"
    assert int(metrics["output_batches"]) <= partitions
    got = quiver.sql(sql).df().sort_values("a").reset_index(drop=True)
    expected = df[df["a"] % 1000 == 0].reset_index(drop=True)
    pd.testing.assert_frame_equal(got, expected, check_dtype=False)
    # Counting only (no column), and under a LIMIT, the rows are the same.
    assert quiver.sql("SELECT count(*) FROM df WHERE a % 1000 = 0").fetchone() == (1000,)
    limited = quiver.sql("SELECT a FROM df WHERE a % 1000 = 0 LIMIT 150").fetchnumpy()["a"]
    assert len(limited) == 150 and (limited % 1000 == 0).all()
    # Batches past the batch size pass as they are, after the small ones before them.
    wide = "SELECT a FROM df WHERE a % 1000 = 0 OR a >= 900000"
    assert quiver.sql(f"SELECT count(*), sum(a) FROM ({wide})").fetchone() == (
        900 + 100_000,
        sum(range(0, 900_000, 1000)) + sum(range(900_000, rows)),
    )


def test_and_chain_reads_later_columns_for_passing_rows_with_their_nulls():
    # A selective first conjunct, then conjuncts on columns whose NULLs are NaT, NaN or a
    # pandas mask: those columns are read only for the rows still passing, and must keep
    # their NULLs there (NaT is the smallest int64, so losing it would pass `t <= ...`).
    rows = 200_000
    rng = np.random.default_rng(11)
    t = pd.Series(pd.to_datetime(rng.integers(0, 10**6, rows), unit="s"))
    t[::3] = pd.NaT
    f = pd.Series(rng.random(rows))
    f[1::4] = np.nan
    m = pd.array(rng.integers(0, 5, rows), dtype="Int64")
    m[2::5] = pd.NA
    k = rng.integers(0, 20, rows)
    s = pd.Series([f"s{i % 7}" for i in range(rows)], dtype="str")
    df = pd.DataFrame({"k": k, "t": t, "f": f, "m": m, "s": s})
    cut = pd.Timestamp(500_000, unit="s")
    where = "k = 3 AND t <= TIMESTAMP '1970-01-06 18:53:20' AND f < 0.9 AND m <> 1 AND s <> 's2'"
    keep = (
        (df["k"] == 3)
        & (df["t"] <= cut).fillna(False)
        & (df["f"] < 0.9).fillna(False)
        & (df["m"] != 1).fillna(False)
        & (df["s"] != "s2")
    )
    assert quiver.sql(f"SELECT count(*) FROM df WHERE {where}").fetchone() == (int(keep.sum()),)
    got = quiver.sql(f"SELECT t, f, m FROM df WHERE {where} ORDER BY t, f").df()
    want = df.loc[keep, ["t", "f", "m"]].sort_values(["t", "f"])
    assert got["t"].tolist() == want["t"].tolist()
    assert got["f"].tolist() == want["f"].tolist()
    assert got["m"].tolist() == want["m"].astype(int).tolist()
    # The same columns returned where NULL is kept: NaT and NaN still read as NULL.
    nulls = quiver.sql(
        "SELECT count(*) - count(t), count(*) - count(f) FROM df WHERE k = 3 AND m <> 1"
    ).fetchone()
    chosen = (df["k"] == 3) & (df["m"] != 1).fillna(False)
    assert nulls == (int(df.loc[chosen, "t"].isna().sum()), int(df.loc[chosen, "f"].isna().sum()))


def test_pushed_filter_with_limit_and_parameters():
    df = _frame()
    rows = quiver.sql("SELECT a FROM df WHERE a % 2 = 1 LIMIT 5").fetchall()
    assert len(rows) == 5 and all(a % 2 == 1 for (a,) in rows)
    n = quiver.sql("SELECT count(*) FROM df WHERE a < $top", params={"top": 100}).fetchone()
    assert n == (int((df["a"] < 100).sum()),)
    # A volatile filter is not pushed (it must run once per row).
    plan = str(quiver.sql("EXPLAIN SELECT a FROM df WHERE random() < 2").fetchall())
    assert "filter=[" not in plan
    assert quiver.sql("SELECT count(*) FROM df WHERE random() < 2").fetchone() == (len(df),)


def test_topk_and_join_bounds_reach_the_scan():
    # ORDER BY ... LIMIT hands the scan its current bound while the query runs, and a hash
    # join its build side's keys: rows outside them are skipped before the other columns are
    # read. The answers must be pandas' whatever the order, with NULLs, with the scan's own
    # filter, over several morsels.
    rng = np.random.default_rng(7)
    n = 350_000
    df = pd.DataFrame(
        {
            "t": pd.array(rng.permutation(n), dtype="Int64"),
            "o": pd.Series([f"v{i}" for i in range(n)], dtype=object),
            "k": np.arange(n) % 1000,
        }
    )
    df.loc[[5, 200_000], "t"] = pd.NA
    plan = str(quiver.sql("EXPLAIN SELECT * FROM df ORDER BY t DESC LIMIT 5").fetchall())
    assert "runtime_filter=[" in plan
    valued = df.dropna(subset=["t"])
    got = quiver.sql("SELECT t, o FROM df ORDER BY t DESC NULLS LAST LIMIT 5").fetchall()
    top = valued.sort_values("t", ascending=False).head(5)
    assert got == list(zip(top["t"].tolist(), top["o"].tolist()))
    got = quiver.sql("SELECT o FROM df ORDER BY t NULLS FIRST, o LIMIT 3").fetchall()
    assert got == [("v200000",), ("v5",), (valued.loc[valued["t"] == 0, "o"].item(),)]
    got = quiver.sql("SELECT t FROM df WHERE k = 3 ORDER BY t NULLS LAST LIMIT 4").fetchall()
    want = valued[valued["k"] == 3].sort_values("t").head(4)["t"].tolist()
    assert got == [(t,) for t in want]
    small = pd.DataFrame({"k": [3, 999]})
    got = quiver.sql("SELECT count(*), sum(df.t) FROM df JOIN small USING (k)").fetchone()
    joined = df[df["k"].isin([3, 999])]
    assert got == (len(joined), int(joined["t"].sum()))


def test_group_by_limit_returns_complete_groups():
    # GROUP BY ... LIMIT n with no ORDER BY aggregates only the first n keys seen (the key
    # freeze): whichever groups come back, each must carry pandas' full count and sum.
    rng = np.random.default_rng(11)
    n = 400_000
    df = pd.DataFrame(
        {
            "u": rng.integers(0, 50, n),
            "s": pd.Series([f"p{i}" for i in rng.integers(0, 3000, n)], dtype=object),
            "v": rng.integers(0, 100, n),
        }
    )
    sql = "SELECT u, s, count(*) AS c, sum(v) AS t FROM df GROUP BY u, s LIMIT 10"
    assert "FrozenKeysExec: gate" in str(quiver.sql(f"EXPLAIN {sql}").fetchall())
    full = df.groupby(["u", "s"])["v"].agg(["count", "sum"])
    got = quiver.sql(sql).fetchall()
    assert len(got) == 10
    assert len({(u, s) for u, s, _, _ in got}) == 10
    for u, s, c, t in got:
        assert (c, t) == tuple(full.loc[(u, s)])


def test_bad_objects_in_rows_a_filter_keeps_are_still_errors():
    df = pd.DataFrame({"k": [1, 2, 3], "o": ["x", 5, "z"]})
    with pytest.raises(quiver.ConversionError, match='column "o", row 1'):
        quiver.sql("SELECT o FROM df WHERE k >= 2").fetchall()


# --- wide frames: only the named columns are planned ---------------------------------------


def test_queries_over_a_wide_frame_see_every_column_they_name():
    rng = np.random.default_rng(3)
    columns = {f"Col{i}": rng.integers(0, 100, 1000) for i in range(60)}
    columns["customer_name"] = [f"c{i % 7}" for i in range(1000)]
    wide = pd.DataFrame(columns)
    small = pd.DataFrame({"Col1": np.arange(100), "k": np.arange(100) % 5})
    expected = wide.groupby("customer_name")["Col3"].sum().sort_index()
    got = quiver.sql(
        "SELECT CUSTOMER_NAME AS n, sum(col3) AS s FROM wide GROUP BY 1 ORDER BY 1"
    ).df()
    assert got["s"].tolist() == expected.tolist()
    # A column named only in a subquery, a USING join and a parameter-free HAVING.
    got = quiver.sql(
        "SELECT count(*) FROM wide JOIN small USING (Col1) "
        "WHERE Col2 > (SELECT avg(Col59) FROM wide) HAVING count(*) >= 0"
    ).fetchone()
    joined = wide.merge(small, on="Col1")
    assert got == (int((joined["Col2"] > wide["Col59"].mean()).sum()),)
    # Wildcards still see every column.
    assert quiver.sql("SELECT * FROM wide LIMIT 1").df().shape == (1, 61)
    assert len(quiver.sql("SELECT w.* FROM wide w LIMIT 1").df().columns) == 61
    # An unknown column is suggested from every column, not only the named ones.
    with pytest.raises(quiver.CatalogError, match=r"did you mean.*customer_name"):
        quiver.sql("SELECT customer_nme FROM wide")
