#!/usr/bin/env python3
"""DB-API ``executemany``: 1,000,000 rows of (int, str, float, date) into a table.

    PYTHONPATH=python python benchmarks/dbapi_executemany.py [--rows 1000000] [--runs 3]
        [--duckdb-rows 20000]

quiver, sqlite3 and DuckDB in one process, each a fresh in-memory database per run, the same
list of parameter tuples built once before any timing; quiver also into a database directory.
The statement is ``INSERT INTO t VALUES (?, ?, ?, ?)`` everywhere (sqlite3 then commits).
Each table is checked (count, sums, a date) before any time is reported. DuckDB runs the
statement once per row, about 100 µs each, so it gets only ``--duckdb-rows`` rows and its time
is extrapolated linearly to ``--rows`` (printed as such). Goal: quiver ≤ 0.2× sqlite3 and
≤ 0.05× DuckDB. Writes benchmarks/results/dbapi_executemany.md.
"""

from __future__ import annotations

import argparse
import datetime
import pathlib
import platform
import sqlite3
import tempfile
import time

import quiver

HERE = pathlib.Path(__file__).resolve().parent
DDL = "CREATE TABLE t (i BIGINT, s VARCHAR, f DOUBLE, d DATE)"
INSERT = "INSERT INTO t VALUES (?, ?, ?, ?)"
EPOCH = datetime.date(2000, 1, 1)


def make_rows(n: int) -> list[tuple]:
    days = [EPOCH + datetime.timedelta(days=k) for k in range(3650)]
    return [(i, f"name-{i}", i * 0.25, days[i % 3650]) for i in range(n)]


def expected(rows: list[tuple]) -> tuple:
    n = len(rows)
    return (n, n * (n - 1) // 2, sum(r[2] for r in rows), max(r[3] for r in rows))


def check(label: str, got: tuple, want: tuple) -> None:
    count, total, fsum, last = got
    if (count, total, last) != (want[0], want[1], want[3]) or abs(fsum - want[2]) > 1e-6 * max(
        1.0, abs(want[2])
    ):
        raise SystemExit(f"{label}: wrong table contents {got}, expected {want}")


VERIFY = "SELECT count(*), sum(i), sum(f), max(d) FROM t"


def run_quiver(rows: list[tuple], database: str | None = None) -> float:
    con = quiver.connect(database)
    cur = con.cursor()
    cur.execute(DDL)
    started = time.perf_counter()
    cur.executemany(INSERT, rows)
    con.commit()
    elapsed = time.perf_counter() - started
    check("quiver", cur.execute(VERIFY).fetchone(), expected(rows))
    con.close()
    return elapsed


def run_sqlite(rows: list[tuple]) -> float:
    con = sqlite3.connect(":memory:")
    cur = con.cursor()
    cur.execute(DDL)
    started = time.perf_counter()
    cur.executemany(INSERT, rows)
    con.commit()
    elapsed = time.perf_counter() - started
    count, total, fsum, last = cur.execute(VERIFY).fetchone()
    # sqlite3 stores a date parameter as ISO text.
    check("sqlite3", (count, total, fsum, datetime.date.fromisoformat(last)), expected(rows))
    con.close()
    return elapsed


def run_duckdb(rows: list[tuple]) -> float:
    import duckdb

    con = duckdb.connect()
    cur = con.cursor()
    cur.execute(DDL)
    started = time.perf_counter()
    cur.executemany(INSERT, rows)
    con.commit()
    elapsed = time.perf_counter() - started
    check("duckdb", cur.execute(VERIFY).fetchone(), expected(rows))
    con.close()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--duckdb-rows", type=int, default=20_000)
    args = parser.parse_args()

    rows = make_rows(args.rows)
    duck_rows = rows[: min(args.duckdb_rows, args.rows)]
    try:
        import duckdb

        duck_version = duckdb.__version__
    except ImportError:
        duck_version = None

    best: dict[str, float] = {}
    first: dict[str, float] = {}
    for run in range(args.runs):
        timings = {"quiver": run_quiver(rows), "sqlite3": run_sqlite(rows)}
        with tempfile.TemporaryDirectory() as tmp:
            timings["quiver, database directory"] = run_quiver(rows, f"{tmp}/db")
        if duck_version is not None:
            timings["DuckDB"] = run_duckdb(duck_rows) * (args.rows / len(duck_rows))
        for label, seconds in timings.items():
            best[label] = min(best.get(label, float("inf")), seconds)
            first.setdefault(label, seconds)
        print(f"run {run + 1}: " + ", ".join(f"{k} {v:.3f} s" for k, v in timings.items()))

    q = best["quiver"]
    lines = [
        f'`executemany("{INSERT}", rows)`, {args.rows:,} rows of (int, str, float, date), '
        f"best of {args.runs} runs, every table checked (count, sums, max date)",
        "",
        "| engine | best s | first run s | rows/s (best) | quiver ÷ engine (best) |",
        "|---|---:|---:|---:|---:|",
    ]
    for label, seconds in best.items():
        note = ""
        if label == "DuckDB":
            note = f" (extrapolated from {len(duck_rows):,} rows)"
        lines.append(
            f"| {label}{note} | {seconds:.3f} | {first[label]:.3f} | {args.rows / seconds:,.0f} "
            f"| {q / seconds:.4f} |"
        )
    lines += [
        "",
        f"Goal: quiver ≤ 0.2× sqlite3 (got {q / best['sqlite3']:.3f}×)"
        + (f" and ≤ 0.05× DuckDB (got {q / best['DuckDB']:.4f}×)" if "DuckDB" in best else ""),
        "",
        "quiver's first run in a process also pays one-time imports: pyarrow imports pandas "
        "(when installed) at its first `pa.array` call, about 0.3 s here.",
        "",
        f"Python {platform.python_version()}, sqlite {sqlite3.sqlite_version}, "
        f"DuckDB {duck_version or 'not installed'}, quiver {quiver.__version__}.",
    ]
    text = "\n".join(lines) + "\n"
    print()
    print(text)
    (HERE / "results" / "dbapi_executemany.md").write_text(text)


if __name__ == "__main__":
    main()
