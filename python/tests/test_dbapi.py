"""quiver as a PEP 249 (DB-API 2.0) module.

The first part follows the checks of the classic ``dbapi20.py`` conformance suite (module
globals, the exception tree, connections, cursors, fetching, type objects, constructors),
written for quiver; then what quiver adds (qmark next to $1/$name, the bulk executemany,
typed errors for misuse); last, the same statements run in quiver, sqlite3 and DuckDB must
give the same rows.
"""

import datetime
import sqlite3
import threading
import time
from decimal import Decimal
from pathlib import Path

import pytest
import quiver
import quiver.dbapi

TABLE = "CREATE TABLE booze (name VARCHAR, price DOUBLE, year BIGINT)"
SAMPLES = [
    ("Carlton Cold", 3.5, 1999),
    ("Carlton Draft", 4.25, 2001),
    ("Mountain Goat", 5.0, 2004),
    ("Redback", 4.0, 1990),
    ("Victoria Bitter", 3.75, 1982),
    ("XXXX", None, None),
]


@pytest.fixture
def cur(con):
    cursor = con.cursor()
    cursor.execute(TABLE)
    return cursor


def fill(cur):
    cur.executemany("INSERT INTO booze VALUES (?, ?, ?)", SAMPLES)


# --- module ------------------------------------------------------------------------------------
@pytest.mark.parametrize("module", [quiver, quiver.dbapi])
def test_module_globals(module):
    assert module.apilevel == "2.0"
    assert module.threadsafety == 2
    assert module.paramstyle == "qmark"
    assert module.connect is quiver.connect
    assert module.Connection is quiver.Connection
    for name in ("Date", "Time", "Timestamp", "Binary", "STRING", "NUMBER", "ROWID"):
        assert getattr(module, name) is getattr(quiver.dbapi, name)


@pytest.mark.parametrize("module", [quiver, quiver.dbapi])
def test_exception_tree_is_pep_249s(module):
    assert issubclass(module.Warning, Exception)
    assert issubclass(module.Error, Exception)
    assert not issubclass(module.Warning, module.Error)
    assert issubclass(module.InterfaceError, module.Error)
    assert issubclass(module.DatabaseError, module.Error)
    assert not issubclass(module.InterfaceError, module.DatabaseError)
    for name in (
        "DataError",
        "OperationalError",
        "IntegrityError",
        "InternalError",
        "ProgrammingError",
        "NotSupportedError",
    ):
        assert issubclass(getattr(module, name), module.DatabaseError), name


def test_quiver_errors_sit_under_the_pep_249_tree():
    placed = {
        quiver.ParserError: quiver.ProgrammingError,
        quiver.CatalogError: quiver.ProgrammingError,
        quiver.InvalidInputError: quiver.ProgrammingError,
        quiver.ConversionError: quiver.DataError,
        quiver.ExecutionError: quiver.DataError,
        quiver.IOError: quiver.OperationalError,
        quiver.DatabaseDirectoryError: quiver.OperationalError,
        quiver.OutOfMemoryError: quiver.OperationalError,
        quiver.QueryCancelled: quiver.OperationalError,
        quiver.NotImplementedError: quiver.NotSupportedError,
    }
    for cls, parent in placed.items():
        assert issubclass(cls, parent), cls
    # What they were before keeps working.
    assert issubclass(quiver.InvalidInputError, ValueError)
    assert issubclass(quiver.OutOfMemoryError, MemoryError)
    assert issubclass(quiver.NotImplementedError, NotImplementedError)


def test_errors_raised_are_caught_by_either_tree(con):
    with pytest.raises(quiver.ProgrammingError) as error:
        con.execute("SELEC 1")
    assert isinstance(error.value, quiver.ParserError)
    with pytest.raises(quiver.ProgrammingError) as error:
        con.execute("SELECT * FROM no_such_table_anywhere")
    assert isinstance(error.value, quiver.CatalogError)
    with pytest.raises(quiver.DataError):
        con.execute("SELECT CAST('x' AS INT)").fetchall()


def test_a_locked_directory_is_an_operational_error(tmp_path):
    with quiver.connect(str(tmp_path / "db")):
        with pytest.raises(quiver.OperationalError) as error:
            quiver.connect(str(tmp_path / "db"))
    assert isinstance(error.value, quiver.DatabaseDirectoryError)
    assert isinstance(error.value, quiver.DatabaseError)
    assert "in use" in str(error.value)


# --- connection ----------------------------------------------------------------------------------
def test_commit_has_nothing_to_do_and_rollback_refuses_to_pretend(con):
    cur = con.cursor()
    con.commit()
    con.rollback()  # nothing changed: nothing to undo
    cur.execute("SELECT 1").fetchall()
    con.rollback()  # queries change nothing
    cur.execute(TABLE)
    with pytest.raises(quiver.NotSupportedError, match="cannot be undone"):
        con.rollback()
    # The table is there: statements commit when they complete.
    assert cur.execute("SELECT count(*) FROM booze").fetchone() == (0,)
    con.commit()
    con.rollback()


def test_begin_is_not_supported(con):
    with pytest.raises(quiver.NotSupportedError):
        con.execute("BEGIN")


@pytest.mark.parametrize("where", ["memory", "directory"])
def test_each_statement_is_atomic(tmp_path, where):
    database = str(tmp_path / "db") if where == "directory" else None
    with quiver.connect(database) as con:
        cur = con.cursor()
        cur.execute("CREATE TABLE t (v BIGINT)")
        cur.execute("INSERT INTO t VALUES (1), (2)")
        # Rows past 100,000 fail to cast, batches after the first ones were appended: the
        # statement appends nothing.
        with pytest.raises(quiver.DataError):
            cur.execute(
                "INSERT INTO t SELECT CASE WHEN value < 100000 THEN value "
                "ELSE CAST('x' || value AS BIGINT) END FROM range(200000)"
            )
        assert cur.execute("SELECT sum(v), count(*) FROM t").fetchone() == (3, 2)


def test_close_makes_the_connection_and_its_cursors_unusable(con):
    cur = con.cursor()
    cur.execute("SELECT 1")
    con.close()
    con.close()  # twice is harmless
    for call in (
        con.cursor,
        con.commit,
        con.rollback,
        lambda: con.execute("SELECT 1"),
        lambda: cur.execute("SELECT 1"),
        cur.fetchone,
        lambda: cur.executemany("SELECT ?", [[1]]),
    ):
        with pytest.raises(quiver.ProgrammingError, match="connection is closed"):
            call()


def test_connection_is_a_context_manager():
    with quiver.connect() as con:
        assert con.cursor().execute("SELECT 42").fetchone() == (42,)
    with pytest.raises(quiver.ProgrammingError):
        con.cursor()


def test_threads_share_a_connection_with_a_cursor_each(con):
    con.execute("CREATE TABLE t AS SELECT * FROM (VALUES (1), (2), (3)) v(x)")
    results, errors = [], []

    def work(k):
        try:
            cur = con.cursor()
            for _ in range(20):
                results.append(cur.execute("SELECT sum(x) * ? FROM t", [k]).fetchone()[0])
        except Exception as error:  # pragma: no cover - reported below
            errors.append(error)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(1, 5)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert sorted(set(results)) == [6, 12, 18, 24] and len(results) == 80


# --- cursor ----------------------------------------------------------------------------------------
def test_execute_returns_the_cursor(cur):
    assert cur.execute("SELECT 1") is cur
    assert cur.execute("SELECT 1 AS a, 'x' AS b").fetchall() == [(1, "x")]
    assert cur.connection is not None


def test_description(cur):
    assert cur.description is None  # after CREATE TABLE
    fill(cur)
    assert cur.description is None  # after INSERT
    cur.execute("SELECT name, price, year, DATE '2024-01-02' AS d, X'00ff' AS b FROM booze")
    assert [d[0] for d in cur.description] == ["name", "price", "year", "d", "b"]
    assert all(len(d) == 7 for d in cur.description)
    codes = [d[1] for d in cur.description]
    assert codes[0] == quiver.STRING and quiver.STRING == codes[0]
    assert codes[1] == quiver.NUMBER and codes[2] == quiver.NUMBER
    assert codes[3] == quiver.DATETIME
    assert codes[4] == quiver.BINARY
    assert codes[0] != quiver.NUMBER and codes[1] != quiver.STRING
    assert all(code != quiver.ROWID for code in codes)
    assert cur.description[2][3] == 8  # internal_size of BIGINT
    cur.execute("SELECT CAST(1.5 AS DECIMAL(10, 2)) AS m, TIMESTAMP '2024-01-02 03:04:05' AS t")
    assert cur.description[0][1] == quiver.NUMBER
    assert cur.description[0][4:6] == (10, 2)
    assert cur.description[1][1] == quiver.DATETIME
    cur.execute("CREATE TABLE other (x BIGINT)")
    assert cur.description is None


def test_rowcount(cur):
    assert cur.rowcount == -1  # CREATE TABLE
    cur.execute("INSERT INTO booze VALUES ('a', 1.0, 1), ('b', 2.0, 2), ('c', 3.0, 3)")
    assert cur.rowcount == 3
    cur.executemany("INSERT INTO booze VALUES (?, ?, ?)", SAMPLES)
    assert cur.rowcount == len(SAMPLES)
    cur.execute("SELECT * FROM booze WHERE year > ?", [2000])
    assert cur.rowcount == 2


def test_fetchone(cur):
    with pytest.raises(quiver.ProgrammingError, match="no rows to fetch"):
        cur.fetchone()  # after CREATE TABLE
    fill(cur)
    with pytest.raises(quiver.ProgrammingError, match="no rows to fetch"):
        cur.fetchone()  # after INSERT
    cur.execute("SELECT name FROM booze WHERE year = ?", [1999])
    assert cur.fetchone() == ("Carlton Cold",)
    assert cur.fetchone() is None
    assert cur.fetchone() is None


def test_fetch_before_execute_is_a_programming_error(con):
    cur = con.cursor()
    for fetch in (cur.fetchone, cur.fetchall, cur.fetchmany):
        with pytest.raises(quiver.ProgrammingError, match="no statement has been executed"):
            fetch()


def test_fetchmany_follows_arraysize(cur):
    fill(cur)
    cur.execute("SELECT name FROM booze ORDER BY name")
    assert cur.arraysize == 1
    assert cur.fetchmany() == [("Carlton Cold",)]
    cur.arraysize = 2
    assert cur.fetchmany() == [("Carlton Draft",), ("Mountain Goat",)]
    assert cur.fetchmany(10) == [("Redback",), ("Victoria Bitter",), ("XXXX",)]
    assert cur.fetchmany(10) == []
    cur.execute("SELECT name FROM booze WHERE false")
    assert cur.fetchmany(3) == []
    with pytest.raises(quiver.ProgrammingError):
        cur.fetchmany(-1)


def test_mixed_fetches_and_iteration_see_each_row_once(con):
    cur = con.cursor()
    cur.execute("SELECT * FROM range(5000)")
    first = cur.fetchone()
    some = cur.fetchmany(1500)
    nxt = next(iter(cur))
    rest = cur.fetchall()
    values = [first[0]] + [r[0] for r in some] + [nxt[0]] + [r[0] for r in rest]
    assert values == list(range(5000))
    assert cur.fetchall() == [] and cur.fetchone() is None
    assert [r for r in cur.execute("SELECT * FROM range(3)")] == [(0,), (1,), (2,)]


def test_fetchall_types_and_nulls(cur):
    fill(cur)
    rows = cur.execute("SELECT * FROM booze ORDER BY name").fetchall()
    assert rows == sorted(SAMPLES)
    assert cur.execute("SELECT NULL").fetchone() == (None,)


def test_closed_cursor(con):
    cur = con.cursor()
    cur.execute("SELECT 1")
    cur.close()
    for call in (lambda: cur.execute("SELECT 1"), cur.fetchall, lambda: cur.setinputsizes([])):
        with pytest.raises(quiver.ProgrammingError, match="cursor is closed"):
            call()
    con.cursor().execute("SELECT 1")  # the connection is still fine


def test_setinputsizes_and_setoutputsize_are_accepted(cur):
    cur.setinputsizes([10, None])
    cur.setoutputsize(100)
    cur.setoutputsize(100, 0)
    cur.setoutputsizes(100)
    assert cur.execute("SELECT 1").fetchone() == (1,)


def test_none_as_a_parameter(cur):
    cur.execute("INSERT INTO booze VALUES (?, ?, ?)", ["nothing", None, None])
    assert cur.execute("SELECT price, year FROM booze").fetchall() == [(None, None)]


def test_a_parameter_that_does_not_fit_its_column_is_a_data_error(con):
    cur = con.cursor()
    cur.execute("CREATE TABLE t (j INT, d DATE)")
    with pytest.raises(quiver.DataError, match="1099511627776"):
        cur.execute("INSERT INTO t VALUES (?, ?)", [2**40, None])
    with pytest.raises(quiver.DataError, match="1099511627776"):
        cur.executemany("INSERT INTO t VALUES (?, ?)", [[1, None], [2**40, None]])
    assert cur.execute("SELECT count(*) FROM t").fetchone() == (0,)
    # What fits is cast to the column's type, text for a DATE included.
    cur.execute("INSERT INTO t VALUES (?, ?)", [7, "2024-02-29"])
    assert cur.execute("SELECT j, d FROM t").fetchall() == [(7, datetime.date(2024, 2, 29))]


# --- constructors and type objects ------------------------------------------------------------------
def test_constructors_round_trip_as_parameters(con):
    cur = con.cursor()
    values = [
        quiver.Date(2002, 12, 25),
        quiver.Time(13, 45, 30, 250),
        quiver.Timestamp(2002, 12, 25, 13, 45, 30),
        quiver.Binary(b"\x00quiver\xff"),
    ]
    assert cur.execute("SELECT ?, ?, ?, ?", values).fetchone() == tuple(values)
    assert [d[1] == t for d, t in zip(cur.description, [quiver.DATETIME] * 3)] == [True] * 3
    assert cur.description[3][1] == quiver.BINARY


def test_from_ticks_constructors():
    ticks = time.mktime((2002, 12, 25, 13, 45, 30, 0, 0, -1))
    assert quiver.DateFromTicks(ticks) == datetime.date(2002, 12, 25)
    assert quiver.TimeFromTicks(ticks) == datetime.time(13, 45, 30)
    assert quiver.TimestampFromTicks(ticks) == datetime.datetime(2002, 12, 25, 13, 45, 30)


def test_type_objects_are_distinct():
    kinds = [quiver.STRING, quiver.BINARY, quiver.NUMBER, quiver.DATETIME, quiver.ROWID]
    assert len(set(kinds)) == 5
    assert quiver.STRING == quiver.STRING and quiver.STRING != quiver.NUMBER
    assert quiver.NUMBER != 5 and quiver.STRING != "utf8"


# --- parameters --------------------------------------------------------------------------------------
def test_qmark_next_to_dollar_placeholders(con):
    cur = con.cursor()
    assert cur.execute("SELECT ? + 1, ?", [41, "it's"]).fetchone() == (42, "it's")
    assert cur.execute("SELECT $1 + $1", (21,)).fetchone() == (42,)
    assert cur.execute("SELECT $b, $a", {"a": "x", "b": "y"}).fetchone() == ("y", "x")
    # A ? inside a string, a quoted identifier or a comment is not a placeholder.
    row = cur.execute(
        "SELECT '?' AS \"what?\", ? AS v -- why?\n, 'it''s ?' /* ? */", [1]
    ).fetchone()
    assert row == ("?", 1, "it's ?")
    assert cur.description[0][0] == "what?"
    assert con.execute("SELECT ? * 2", [21]).fetchone() == (42,)  # Connection.execute too


def test_wrong_parameters_are_programming_errors(con):
    cur = con.cursor()
    cases = [
        ("SELECT ?, ?", [1], "2 \\? placeholder\\(s\\) but 1 parameter"),
        ("SELECT ?", [1, 2], "1 \\? placeholder\\(s\\) but 2 parameter"),
        ("SELECT ?", None, "no parameters were given"),
        ("SELECT $1, $2", [1], "2 \\$n placeholder\\(s\\) but 1"),
        ("SELECT $a", {"b": 1}, "no value given for placeholder\\(s\\) \\$a"),
        ("SELECT ?, $1", [1], "mixes"),
        ("SELECT ?", "x", "not a single str"),
        ("SELECT ?", {"a": 1}, "give a list or tuple"),
    ]
    for sql, params, message in cases:
        with pytest.raises(quiver.ProgrammingError, match=message):
            cur.execute(sql, params)
        with pytest.raises(quiver.InvalidInputError):
            cur.execute(sql, params)


# --- executemany ------------------------------------------------------------------------------------
def test_executemany_takes_a_generator(cur):
    cur.executemany(
        "INSERT INTO booze VALUES (?, ?, ?)", ((f"n{i}", i / 2, i) for i in range(100_000))
    )
    assert cur.rowcount == 100_000
    assert cur.description is None
    row = cur.execute("SELECT count(*), sum(year), sum(price), min(name) FROM booze").fetchone()
    assert row == (100_000, 4_999_950_000, 2_499_975_000.0, "n0")


def test_executemany_with_a_column_list_and_dict_rows(cur):
    cur.executemany("INSERT INTO booze (year, name) VALUES (?, ?)", [(1, "a"), (2, "b")])
    cur.executemany(
        "INSERT INTO booze (name, price) VALUES ($n, $p)",
        [{"n": "c", "p": 1.5}, {"n": "d", "p": None}],
    )
    rows = cur.execute("SELECT * FROM booze ORDER BY name").fetchall()
    assert rows == [("a", None, 1), ("b", None, 2), ("c", 1.5, None), ("d", None, None)]


def test_executemany_converts_like_a_single_insert(con):
    cur = con.cursor()
    cur.execute("CREATE TABLE t (d DATE, s VARCHAR, f DOUBLE, m DECIMAL(10, 2), ts TIMESTAMP)")
    rows = [
        (datetime.date(2024, 1, 2), "x", 1, Decimal("1.25"), datetime.datetime(2024, 1, 2, 3)),
        ("2024-01-03", 7, 2.5, 3, "2024-01-03 04:00:00"),  # text date, int for text, ...
    ]
    cur.executemany("INSERT INTO t VALUES (?, ?, ?, ?, ?)", rows)
    one = con.cursor()
    one.execute("CREATE TABLE u AS SELECT * FROM t WHERE false")
    for row in rows:
        one.execute("INSERT INTO u VALUES (?, ?, ?, ?, ?)", row)
    expected = one.execute("SELECT * FROM u").fetchall()
    assert cur.execute("SELECT * FROM t").fetchall() == expected
    assert expected[1] == (
        datetime.date(2024, 1, 3),
        "7",
        2.5,
        Decimal("3.00"),
        datetime.datetime(2024, 1, 3, 4),
    )


def test_executemany_is_all_or_nothing(cur):
    good = [("a", 1.0, 1)] * 100_000
    with pytest.raises(quiver.ProgrammingError, match="parameter row 100000 has 2 value"):
        cur.executemany("INSERT INTO booze VALUES (?, ?, ?)", [*good, ("short", 1.0)])
    with pytest.raises(quiver.DataError, match=r"parameter \$3 of row 100001: str value 'x'"):
        cur.executemany(
            "INSERT INTO booze VALUES (?, ?, ?)", [*good, ("a", 1.0, 2), ("b", 2.0, "x")]
        )
    with pytest.raises(quiver.ProgrammingError, match=r"row 1 has no value for \$p"):
        cur.executemany(
            "INSERT INTO booze (name, price) VALUES ($n, $p)", [{"n": "a", "p": 1}, {"n": "b"}]
        )
    assert cur.execute("SELECT count(*) FROM booze").fetchone() == (0,)


def test_executemany_appends_in_one_statement(tmp_path):
    # In a database directory every INSERT statement writes one data file: 200k rows in
    # one file show the rows were not inserted one statement at a time.
    with quiver.connect(str(tmp_path / "db")) as con:
        cur = con.cursor()
        cur.execute("CREATE TABLE t (i BIGINT, s VARCHAR)")
        cur.executemany("INSERT INTO t VALUES (?, ?)", ((i, str(i)) for i in range(200_000)))
        assert cur.execute("SELECT count(*), sum(i) FROM t").fetchone() == (200_000, 19_999_900_000)
    files = list(Path(tmp_path / "db" / "data").rglob("*.parquet"))
    assert len(files) == 1


def test_executemany_of_other_statements_runs_per_row(cur):
    fill(cur)
    cur.executemany(
        "INSERT INTO booze SELECT name || ?, price, year FROM booze WHERE year = ?",
        [("!", 1999), ("?", 2001)],
    )
    assert cur.rowcount == 2
    names = cur.execute("SELECT name FROM booze WHERE name LIKE 'Carlton%' ORDER BY 1").fetchall()
    assert names == [("Carlton Cold",), ("Carlton Cold!",), ("Carlton Draft",), ("Carlton Draft?",)]
    cur.executemany("SELECT ? * 2", [[1], [2]])
    assert cur.fetchall() == [(4,)]  # the last statement's rows, as in DuckDB


def test_executemany_with_no_rows(cur):
    cur.executemany("INSERT INTO booze VALUES (?, ?, ?)", iter([]))
    assert cur.rowcount == 0
    assert cur.execute("SELECT count(*) FROM booze").fetchone() == (0,)


def test_executemany_into_a_missing_table_names_it(con):
    with pytest.raises(quiver.CatalogError, match="nowhere"):
        con.cursor().executemany("INSERT INTO nowhere VALUES (?)", [[1]])


# --- the same rows as sqlite3 and DuckDB ----------------------------------------------------------------
PEERS = [
    ("CREATE TABLE people (id INTEGER, name VARCHAR, score DOUBLE, team VARCHAR)", None),
    ("INSERT INTO people VALUES (?, ?, ?, ?)", "many"),
    ("SELECT * FROM people WHERE id = ?", [3]),
    ("SELECT name, score FROM people WHERE score > ? ORDER BY score DESC, name", [50.0]),
    (
        "SELECT team, count(*), sum(id), min(name) FROM people GROUP BY team ORDER BY team NULLS LAST",
        None,
    ),
    ("SELECT count(*) FROM people WHERE team IS NULL", None),
    ("SELECT name FROM people WHERE name LIKE ? ORDER BY id", ["%a%"]),
    ("SELECT id, score FROM people ORDER BY score NULLS FIRST, id LIMIT 4", None),
    (
        "SELECT upper(name), length(name), id * 2 + 1 FROM people WHERE id IN (?, ?) ORDER BY 1",
        [2, 5],
    ),
    (
        "SELECT CASE WHEN score >= 60 THEN 'pass' ELSE 'fail' END AS r, count(*) FROM people "
        "WHERE score IS NOT NULL GROUP BY r ORDER BY r",
        None,
    ),
]
PEOPLE = [
    (1, "ada", 91.5, "red"),
    (2, "brian", 48.0, "blue"),
    (3, "carla", None, "red"),
    (4, "dmitri", 73.25, None),
    (5, "eve", 60.0, "blue"),
    (6, "frank", 12.5, "red"),
]


def _run_all(connection):
    cur = connection.cursor()
    out = []
    for sql, params in PEERS:
        if params == "many":
            cur.executemany(sql, PEOPLE)
            continue
        if params is None:
            cur.execute(sql)
        else:
            cur.execute(sql, params)
        if sql.startswith("SELECT"):  # DuckDB describes a CREATE TABLE's result too
            out.append(([d[0].lower() for d in cur.description], cur.fetchall()))
    return out


def test_same_rows_as_sqlite3_and_duckdb(con):
    duckdb = pytest.importorskip("duckdb")
    ours = _run_all(con)
    assert len(ours) == len(PEERS) - 2
    assert [rows for _, rows in ours] == [rows for _, rows in _run_all(sqlite3.connect(":memory:"))]
    theirs = _run_all(duckdb.connect())
    assert [rows for _, rows in ours] == [rows for _, rows in theirs]
    # Where both engines name a column after the table's column, the names agree.
    assert ours[0][0] == theirs[0][0] == ["id", "name", "score", "team"]
    assert ours[1][0] == theirs[1][0] == ["name", "score"]
