"""The user-facing API: lookup by name, results in every shape, parameters, formats."""

import json
import sys

import numpy as np
import pandas as pd
import polars as pl
import pyarrow as pa
import pytest
import quiver


def test_issue_example():
    df = pd.DataFrame(
        {"a": [1, 2, 3, 4, 5, 6], "b": ["tom", "jerry", "auxten", "tom", "jerry", "auxten"]}
    )
    out = quiver.sql("SELECT b, sum(a) AS s FROM df GROUP BY b ORDER BY b").df()
    assert out["b"].tolist() == ["auxten", "jerry", "tom"]
    assert out["s"].tolist() == [9, 7, 5]
    csv = quiver.query("SELECT b, sum(a) FROM Python(df) GROUP BY b ORDER BY b", "CSV")
    assert csv == "auxten,9\njerry,7\ntom,5\n"
    frame = quiver.query("SELECT b, sum(a) AS s FROM Python(df) GROUP BY b ORDER BY b", "DataFrame")
    assert isinstance(frame, pd.DataFrame) and frame["s"].tolist() == [9, 7, 5]


def test_parameters():
    df = pd.DataFrame({"a": [1, 2, 3, 4]})
    r = quiver.sql("SELECT a FROM df WHERE a > $min ORDER BY a", params={"min": 2})
    assert r.fetchall() == [(3,), (4,)]
    r = quiver.sql("SELECT $1 + 1 AS x, $2 AS s", params=[41, "it's"])
    assert r.fetchall() == [(42, "it's")]
    # A value is never pasted into the SQL text.
    evil = "'); DROP TABLE t; --"
    assert quiver.sql("SELECT $v AS v", params={"v": evil}).fetchone() == (evil,)


def test_result_shapes():
    df = pd.DataFrame({"x": [3, 1, 2], "y": ["c", "a", "b"]})
    r = quiver.sql("SELECT x, y FROM df ORDER BY x")
    assert r.columns == ["x", "y"]
    assert r.fetchone() == (1, "a")
    assert r.fetchall() == [(2, "b"), (3, "c")]
    assert r.fetchone() is None
    assert isinstance(r.arrow(), pa.Table) and r.arrow().num_rows == 3
    assert r.pl().to_dict(as_series=False) == {"x": [1, 2, 3], "y": ["a", "b", "c"]}
    assert r.fetchnumpy()["x"].tolist() == [1, 2, 3]
    assert pa.table(r).num_rows == 3
    assert pl.DataFrame(r).height == 3
    assert "│" in str(r) and "3 rows" in str(r)
    assert "<table>" in r._repr_html_()
    assert r.elapsed >= 0 and r.rows_read == 3


def test_record_batches_stream():
    r = quiver.sql("SELECT value AS v FROM generate_series(1, 250000)")
    sizes = [batch.num_rows for batch in r.record_batches(100_000)]
    assert sizes == [100_000, 100_000, 50_000]
    with pytest.raises(quiver.InvalidInputError):
        r.df()  # streamed out


def test_register_and_unregister(con):
    df = pd.DataFrame({"a": [1, 2]})
    con.register("events", df)
    assert con.sql("SELECT count(*) FROM events").fetchone() == (2,)
    assert "events" in con.tables()
    con.unregister("events")
    with pytest.raises(quiver.CatalogError):
        con.sql("SELECT * FROM events")


def test_registered_name_wins(con):
    events = pd.DataFrame({"a": [1]})
    con.register("events", pd.DataFrame({"a": [1, 2, 3]}))
    assert con.sql("SELECT count(*) FROM events").fetchone() == (3,)


def test_lookup_order_and_case():
    outer = pd.DataFrame({"v": [1]})

    def inner():
        Sales = pd.DataFrame({"v": [1, 2]})
        return (
            quiver.sql("SELECT count(*) FROM outer").fetchone(),
            quiver.sql("SELECT count(*) FROM sales").fetchone(),
        )

    assert inner() == ((1,), (2,))


def test_unknown_name_lists_variables():
    my_frame = pd.DataFrame({"v": [1]})
    with pytest.raises(quiver.CatalogError) as error:
        quiver.sql("SELECT * FROM my_frme")
    assert "my_frame" in str(error.value)
    with pytest.raises(quiver.CatalogError):
        quiver.sql("SELECT * FROM Python(nothing_here)")


def test_files_and_frames_in_one_query(tmp_path):
    path = tmp_path / "hits.parquet"
    quiver.sql(f"COPY (SELECT value AS a, value * 10 AS b FROM generate_series(1, 5)) TO '{path}'")
    df = pd.DataFrame({"a": [2, 4], "name": ["two", "four"]})
    rows = quiver.sql(f"SELECT a, b, name FROM '{path}' JOIN df USING (a) ORDER BY a").fetchall()
    assert rows == [(2, 20, "two"), (4, 40, "four")]


def test_formats_match_cli_names():
    df = pd.DataFrame({"a": [1, 2], "s": ["x", None]})
    assert quiver.query("SELECT * FROM df", "CSVWithNames") == "a,s\n1,x\n2,\n"
    assert quiver.query("SELECT * FROM df", "TSV") == "1\tx\n2\t\\N\n"
    rows = [
        json.loads(line) for line in quiver.query("SELECT * FROM df", "JSONEachRow").splitlines()
    ]
    assert rows == [{"a": 1, "s": "x"}, {"a": 2, "s": None}]
    assert json.loads(quiver.query("SELECT * FROM df", "JSON"))["rows"] == 2
    assert quiver.query("SELECT * FROM df", "Markdown").startswith("| a | s |")
    parquet = quiver.query("SELECT * FROM df", "Parquet")
    assert isinstance(parquet, bytes) and parquet[:4] == b"PAR1"
    table = quiver.query("SELECT * FROM df", "ArrowTable")
    assert table.column("a").to_pylist() == [1, 2]
    assert quiver.query("SELECT * FROM df", "Polars").height == 2
    with pytest.raises(quiver.InvalidInputError):
        quiver.query("SELECT 1", "NoSuchFormat")


def test_ddl_runs_immediately(con):
    con.sql("CREATE TABLE t AS SELECT 1 AS x")
    con.sql("INSERT INTO t VALUES (2)")
    assert con.sql("SELECT sum(x) FROM t").fetchone() == (3,)


def test_persistent_database(tmp_path):
    db = str(tmp_path / "db")
    with quiver.connect(db) as con:
        con.sql("CREATE TABLE kept AS SELECT 42 AS answer")
    del con
    import gc

    gc.collect()
    again = quiver.connect(db)
    assert again.sql("SELECT answer FROM kept").fetchone() == (42,)


def test_numpy_and_dict_sources():
    arr = np.arange(10, dtype=np.int64)
    assert quiver.sql("SELECT sum(column0) FROM arr").fetchone() == (45,)
    matrix = np.arange(6, dtype=np.float64).reshape(3, 2)
    assert quiver.sql("SELECT sum(column1) FROM matrix").fetchone() == (9.0,)
    rec = np.array([(1, 2.5), (2, 3.5)], dtype=[("id", "i4"), ("val", "f8")])
    assert quiver.sql("SELECT sum(id), sum(val) FROM rec").fetchone() == (3, 6.0)
    data = {"k": np.array([1, 2, 3]), "v": np.array([0.5, 1.5, 2.5])}
    assert quiver.sql("SELECT sum(v) FROM data WHERE k > 1").fetchone() == (4.0,)
    lists = {"name": ["a", "b", None], "n": [1, None, 3]}
    assert quiver.sql("SELECT count(name), sum(n) FROM lists").fetchone() == (2, 4)


def test_arrow_and_polars_sources():
    tbl = pa.table({"a": [1, 2, 3], "s": ["x", "y", None]})
    assert quiver.sql("SELECT sum(a), count(s) FROM tbl").fetchone() == (6, 2)
    batch = tbl.to_batches()[0]
    assert quiver.sql("SELECT sum(a) FROM batch").fetchone() == (6,)
    reader = pa.RecordBatchReader.from_batches(tbl.schema, tbl.to_batches())
    assert quiver.sql("SELECT count(*) FROM reader").fetchone() == (3,)
    import pyarrow.dataset as ds

    dataset = ds.dataset(tbl)
    assert quiver.sql("SELECT max(a) FROM dataset").fetchone() == (3,)
    pdf = pl.DataFrame({"a": [1, 2, 3], "s": ["x", "y", "z"]})
    assert quiver.sql("SELECT string_agg(s, '') FROM pdf").fetchone() == ("xyz",)
    lazy = pdf.lazy().filter(pl.col("a") > 1)
    assert quiver.sql("SELECT count(*) FROM lazy").fetchone() == (2,)


def test_capsule_protocol_without_pyarrow_objects():
    class Producer:
        """Speaks only __arrow_c_stream__ (as nanoarrow or arro3 objects do)."""

        def __init__(self, table):
            self._table = table

        def __arrow_c_stream__(self, requested_schema=None):
            return self._table.__arrow_c_stream__(requested_schema)

    producer = Producer(pa.table({"x": [1, 2, 3]}))
    assert quiver.sql("SELECT sum(x) FROM producer").fetchone() == (6,)


def test_progress_is_reported_for_long_queries_and_cleared_at_the_end():
    from quiver import _progress

    calls = []
    conn = quiver.connect()
    # Progress is looked at every 0.1 s; 3e8 rows of numbers_mt take seconds here, so many
    # looks fall within the query.
    n = 300_000_000
    result = conn.sql(f"SELECT CAST(sum(number % 7) AS BIGINT) FROM numbers_mt({n})")
    result._handle.watch(lambda *args: calls.append(args), 0.0)
    assert result.fetchone() == (n // 7 * 21 + sum(range(n % 7)),)
    assert calls, "a query running past the threshold reports its progress"
    # Looked at while every worker computes: tokio's timers, which the looks once waited on,
    # were not turned then, and this query's first look came at its end (3.1 s of 3.2).
    assert calls[0][2] < 0.75 * calls[-1][2], [call[2] for call in calls]
    assert calls[-1][3] is True and all(call[3] is False for call in calls[:-1])
    rows = [call[0] for call in calls]
    assert rows == sorted(rows)
    assert "rows" in _progress.describe(1234567, 10**9, 2.0)
    # Not a terminal, not a notebook: nothing is shown; and it can be switched off.
    assert _progress.reporter() is None
    quiver.set_progress_bar(False)
    try:
        assert _progress.reporter() is None
    finally:
        quiver.set_progress_bar(True)


def test_terminal_progress_line(monkeypatch):
    import io

    from quiver import _progress

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    line = _progress.reporter()
    assert line is not None
    line(5_000_000, 40_000_000, 2.0, False)
    assert "Progress: 5,000,000 rows, 40.0 MB read" in terminal.getvalue()
    line(5_000_000, 40_000_000, 2.5, True)
    assert terminal.getvalue().endswith("\r\x1b[K")
