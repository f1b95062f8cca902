#!/usr/bin/env python3
"""Small queries over an attached PostgreSQL, in process: quiver vs DuckDB's scanner vs
ConnectorX — the latency a dashboard or a notebook cell sees, where logging in and planning
cost more than reading the rows.

    python benchmarks/postgres_latency.py [--dsn 'host=... port=... user=postgres dbname=tpch']

Uses the TPC-H database of `postgres_setup.py`. Each engine attaches the database once, runs
each query once to warm up, then `--runs` times; the median is reported in milliseconds, with
the ratio quiver / DuckDB. ConnectorX has no attach: every call connects (its normal use).
Run with the benchmark virtualenv that has duckdb 1.5.5 and its postgres extension
(`../shared/bench/README.md`); quiver is imported from `python/` (build it first).
Writes `results/postgres_latency.{md,json}`.
"""

import argparse
import json
import pathlib
import statistics
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from postgres_bench import duckdb_connection  # noqa: E402

QUERIES = [
    ("one row by primary key", "SELECT * FROM {db}.public.orders WHERE o_orderkey = 4242"),
    (
        "100 rows by key range, aggregated",
        "SELECT count(*), sum(o_totalprice) FROM {db}.public.orders "
        "WHERE o_orderkey BETWEEN 1000 AND 1400",
    ),
    ("a 25-row table", "SELECT n_name, n_regionkey FROM {db}.public.nation ORDER BY n_name"),
    (
        "join of two small tables",
        "SELECT r_name, count(*) FROM {db}.public.nation JOIN {db}.public.region "
        "ON n_regionkey = r_regionkey GROUP BY r_name ORDER BY r_name",
    ),
]


def timed(run, runs):
    run()
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        run()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples) * 1000


def bench_quiver(dsn, runs):
    sys.path.insert(0, str(HERE.parent / "python"))
    import quiver

    con = quiver.connect()
    con.sql(f"ATTACH '{dsn}' AS pg (TYPE postgres, READ_ONLY)")
    return [timed(lambda q=q: con.sql(q.format(db="pg")).fetchall(), runs) for _, q in QUERIES]


def bench_duckdb(dsn, runs):
    con = duckdb_connection(2)
    con.execute(f"ATTACH '{dsn}' AS pg (TYPE postgres, READ_ONLY)")
    return [timed(lambda q=q: con.sql(q.format(db="pg")).fetchall(), runs) for _, q in QUERIES]


def bench_connectorx(dsn, runs):
    import connectorx

    parts = dict(part.split("=", 1) for part in dsn.split())
    url = (
        f"postgresql://{parts.get('user', 'postgres')}@localhost:{parts.get('port', 5432)}/"
        f"{parts.get('dbname', 'tpch')}?host={parts.get('host', '/tmp')}"
    )
    times = []
    for _, q in QUERIES:
        sql = q.format(db="pg").replace("pg.public.", "public.")
        try:
            times.append(
                timed(lambda sql=sql: connectorx.read_sql(url, sql, return_type="arrow"), runs)
            )
        except Exception as error:  # a peer that cannot run a query is shown as such
            print(f"  connectorx failed: {error}", file=sys.stderr)
            times.append(None)
    return times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--dsn", default="host=/var/tmp/quiver-pg-bench port=54329 user=postgres dbname=tpch"
    )
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    results = {
        "quiver": bench_quiver(args.dsn, args.runs),
        "duckdb": bench_duckdb(args.dsn, args.runs),
        "connectorx": bench_connectorx(args.dsn, args.runs),
    }
    cell = lambda v: "failed" if v is None else f"{v:.2f}"
    lines = [
        f"Small queries over an attached PostgreSQL (TPC-H SF1), in process, median of "
        f"{args.runs} after one warm-up, milliseconds; ratio = quiver / DuckDB's scanner. "
        "ConnectorX connects at every call (it has no attach).",
        "",
        "| query | quiver | DuckDB 1.5.5 postgres_scanner | ConnectorX | ratio |",
        "|---|---:|---:|---:|---:|",
    ]
    for k, (name, _) in enumerate(QUERIES):
        mine, duck, cx = (results[e][k] for e in ("quiver", "duckdb", "connectorx"))
        lines.append(f"| {name} | {cell(mine)} | {cell(duck)} | {cell(cx)} | {mine / duck:.2f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    out = HERE / "results"
    (out / "postgres_latency.md").write_text(text)
    (out / "postgres_latency.json").write_text(
        json.dumps({"queries": [n for n, _ in QUERIES], "runs": args.runs, **results}, indent=1)
    )


if __name__ == "__main__":
    main()
