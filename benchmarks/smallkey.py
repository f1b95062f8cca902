#!/usr/bin/env python3
"""Small-key GROUP BY and `uniq` (issue 5): quiver vs chDB vs DuckDB vs DataFusion (Python), one run.

    python benchmarks/smallkey.py [--rows 100000000] [--df-rows 50000000] [--runs 3]

Queries (each engine in its own spelling; best of `--runs`, seconds):
  gen     SELECT count() FROM numbers_mt(N)                       -- generation cost alone
  gen_sum SELECT sum(number) FROM numbers_mt(N)                   -- generation + one pass over the column
  mod     SELECT number % 10000 AS k, count(), sum(number) ... GROUP BY k ORDER BY k LIMIT 10
  uniq    SELECT number % 10000 AS k, uniq(number) ... GROUP BY k ORDER BY k LIMIT 10
  mod_all, uniq_all   the same, ORDER BY an aggregate LIMIT 10   -- every group finished
  k8      SELECT k8, count(*), avg(v) FROM df GROUP BY k8         -- uint8 key, in-memory columns
  mod7    SELECT count() FROM numbers_mt(10 N) WHERE number % 7 = 3  -- unsigned arithmetic (issue 59)

`mod` and `uniq` are the issue's queries: `ORDER BY k LIMIT 10` lets an engine skip the rows of
groups that cannot be in the first ten (ClickHouse does; so does quiver since the limit is pushed
into its small-key operator). `mod_all` / `uniq_all` show the cost of the whole aggregation.
The quiver binary is $CARGO_TARGET_DIR/{dist,ci}/quiver (default target dir ~/.cache/quiver/target).

quiver is timed by the CLI's own `--time` report (execution only). For `k8` the CLI cannot see a
pandas DataFrame (that is the Python package's job), so quiver reads the same columns from an
in-memory table it built with CREATE TABLE (untimed); the peers read the pandas DataFrame
(DuckDB and chDB zero-copy, DataFusion after `from_pandas`, untimed). Results:
benchmarks/results/smallkey.{md,json}.

Every engine's answer is checked before its time is reported (a wrong or failed answer is
reported as `wrong`/`fail`, never as a time): the exact queries against closed forms computed
here, `uniq` (approximate in every engine: DuckDB's HyperLogLog is off by up to 48% on
groups of 100 values) within 50% of the true count (`uniq_all`, the ten largest estimates, within
3×), `k8` by its group count
and total rows.
"""

import argparse
import json
import pathlib
import re
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from clickbench import quiver_binary  # noqa: E402

ELAPSED = re.compile(r"Elapsed: ([0-9.]+) s")


def queries(rows: int) -> dict[str, dict[str, str]]:
    n = rows
    return {
        "gen": {
            "quiver": f"SELECT count() FROM numbers_mt({n})",
            "chdb": f"SELECT count() FROM numbers_mt({n})",
            "duckdb": f"SELECT count(*) FROM range({n})",
            "datafusion": f"SELECT count(*) FROM generate_series(0, {n - 1})",
        },
        "gen_sum": {
            "quiver": f"SELECT sum(number) FROM numbers_mt({n})",
            "chdb": f"SELECT sum(number) FROM numbers_mt({n})",
            "duckdb": f"SELECT sum(range) FROM range({n})",
            "datafusion": f"SELECT sum(value) FROM generate_series(0, {n - 1})",
        },
        "mod": {
            "quiver": f"SELECT number % 10000 AS k, count() AS c, sum(number) AS s FROM numbers_mt({n}) "
            "GROUP BY k ORDER BY k LIMIT 10",
            "chdb": f"SELECT number % 10000 AS k, count() AS c, sum(number) AS s FROM numbers_mt({n}) "
            "GROUP BY k ORDER BY k LIMIT 10",
            "duckdb": f"SELECT range % 10000 AS k, count(*) AS c, sum(range) AS s FROM range({n}) "
            "GROUP BY k ORDER BY k LIMIT 10",
            "datafusion": f"SELECT value % 10000 AS k, count(*) AS c, sum(value) AS s "
            f"FROM generate_series(0, {n - 1}) GROUP BY k ORDER BY k LIMIT 10",
        },
        "uniq": {
            "quiver": f"SELECT number % 10000 AS k, uniq(number) AS u FROM numbers_mt({n}) "
            "GROUP BY k ORDER BY k LIMIT 10",
            "chdb": f"SELECT number % 10000 AS k, uniq(number) AS u FROM numbers_mt({n}) "
            "GROUP BY k ORDER BY k LIMIT 10",
            "duckdb": f"SELECT range % 10000 AS k, approx_count_distinct(range) AS u FROM range({n}) "
            "GROUP BY k ORDER BY k LIMIT 10",
            "datafusion": f"SELECT value % 10000 AS k, approx_distinct(value) AS u "
            f"FROM generate_series(0, {n - 1}) GROUP BY k ORDER BY k LIMIT 10",
        },
        # The same aggregations ordered by an aggregate: every group must be finished, so
        # no engine can skip rows for `ORDER BY k LIMIT 10` (ClickHouse and quiver do).
        "mod_all": {
            "quiver": f"SELECT number % 10000 AS k, count() AS c, sum(number) AS s FROM numbers_mt({n}) "
            "GROUP BY k ORDER BY s DESC, k LIMIT 10",
            "chdb": f"SELECT number % 10000 AS k, count() AS c, sum(number) AS s FROM numbers_mt({n}) "
            "GROUP BY k ORDER BY s DESC, k LIMIT 10",
            "duckdb": f"SELECT range % 10000 AS k, count(*) AS c, sum(range) AS s FROM range({n}) "
            "GROUP BY k ORDER BY s DESC, k LIMIT 10",
            "datafusion": f"SELECT value % 10000 AS k, count(*) AS c, sum(value) AS s "
            f"FROM generate_series(0, {n - 1}) GROUP BY k ORDER BY s DESC, k LIMIT 10",
        },
        "uniq_all": {
            "quiver": f"SELECT number % 10000 AS k, uniq(number) AS u FROM numbers_mt({n}) "
            "GROUP BY k ORDER BY u DESC, k LIMIT 10",
            "chdb": f"SELECT number % 10000 AS k, uniq(number) AS u FROM numbers_mt({n}) "
            "GROUP BY k ORDER BY u DESC, k LIMIT 10",
            "duckdb": f"SELECT range % 10000 AS k, approx_count_distinct(range) AS u FROM range({n}) "
            "GROUP BY k ORDER BY u DESC, k LIMIT 10",
            "datafusion": f"SELECT value % 10000 AS k, approx_distinct(value) AS u "
            f"FROM generate_series(0, {n - 1}) GROUP BY k ORDER BY u DESC, k LIMIT 10",
        },
        # Unsigned arithmetic with an integer literal: integer in quiver since issue 59 (it
        # was planned as Decimal128 division), 10 N rows.
        "mod7": {
            "quiver": f"SELECT count() FROM numbers_mt({10 * n}) WHERE number % 7 = 3",
            "chdb": f"SELECT count() FROM numbers_mt({10 * n}) WHERE number % 7 = 3",
            "duckdb": f"SELECT count(*) FROM range({10 * n}) WHERE range % 7 = 3",
            "datafusion": f"SELECT count(*) FROM generate_series(0, {10 * n - 1}) "
            "WHERE value % 7 = 3",
        },
        "k8": {
            "quiver": "SELECT k8, count(*), avg(v) FROM df GROUP BY k8",
            "chdb": "SELECT k8, count(*), avg(v) FROM Python(df) GROUP BY k8",
            "duckdb": "SELECT k8, count(*), avg(v) FROM df GROUP BY k8",
            "datafusion": "SELECT k8, count(*), avg(v) FROM df GROUP BY k8",
        },
    }


def group_sums(n: int, k: int) -> tuple[int, int, int]:
    """`number % 10000 = k` over `numbers(n)`: (k, count, sum), in closed form."""
    count = len(range(k, n, 10_000))
    return (k, count, count * k + 10_000 * count * (count - 1) // 2)


def wrong(q: str, rows: list[tuple], n: int, df_rows: int) -> str | None:
    """Why `rows` is not the answer of query `q` (None when it is)."""
    rows = [tuple(int(v) if isinstance(v, str) and v.isdigit() else v for v in r) for r in rows]
    if q == "gen":
        expected = [(n,)]
    elif q == "gen_sum":
        expected = [(n * (n - 1) // 2,)]
    elif q == "mod7":
        expected = [(len(range(3, 10 * n, 7)),)]
    elif q == "mod":
        expected = [group_sums(n, k) for k in range(10)]
    elif q == "mod_all":
        groups = sorted((group_sums(n, k) for k in range(10_000)), key=lambda g: (-g[2], g[0]))
        expected = groups[:10]
    elif q in ("uniq", "uniq_all"):
        if len(rows) != 10:
            return f"{len(rows)} rows, not 10"
        if q == "uniq" and [int(r[0]) for r in rows] != list(range(10)):
            return f"keys {[r[0] for r in rows]}"
        for k, u in rows:
            true = len(range(int(k), n, 10_000))
            # `uniq_all` picks the ten largest estimates: the estimator's outliers.
            bound = 2.0 if q == "uniq_all" else 0.5
            if abs(int(u) - true) > bound * true:
                return f"uniq of group {k} is {u}, true count {true}"
        return None
    elif q == "k8":
        total = sum(int(r[1]) for r in rows)
        if len(rows) > 256 or total != df_rows:
            return f"{len(rows)} groups holding {total} rows"
        return None
    else:
        return None
    rows = [tuple(int(v) for v in r) for r in rows]
    return None if rows == expected else f"{rows[:3]}… expected {expected[:3]}…"


def best_of(action, runs: int, check) -> float | str | None:
    """The best of `runs` timings of `action`, or "wrong" when `check(result)` says it is."""
    best = None
    for _ in range(runs):
        started = time.perf_counter()
        try:
            result = action()
        except Exception as error:  # a peer's failure is reported, not fatal
            print(f"    failed: {str(error)[:200]}", flush=True)
            return None
        elapsed = time.perf_counter() - started
        best = elapsed if best is None else min(best, elapsed)
    problem = check([tuple(r.values()) for r in result.to_pylist()])
    if problem:
        print(f"    wrong answer: {problem}", flush=True)
        return "wrong"
    return best


def run_quiver(sql: str, runs: int, check, setup: str = "") -> float | str | None:
    answer = subprocess.run(
        [quiver_binary(), "--no-progress", "-f", "CSV"],
        input=setup + sql + ";\n",
        capture_output=True,
        text=True,
        timeout=600,
    )
    problem = (
        f"exit {answer.returncode}: {answer.stderr.strip()[-300:]}"
        if answer.returncode != 0
        else check([tuple(line.split(",")) for line in answer.stdout.split()])
    )
    if problem:
        print(f"    quiver wrong answer: {problem}", flush=True)
        return "wrong"
    script = setup + (sql + ";\n") * runs
    done = subprocess.run(
        [quiver_binary(), "--no-progress", "-f", "Null", "--time"],
        input=script,
        capture_output=True,
        text=True,
        timeout=600,
    )
    elapsed = [float(m) for m in ELAPSED.findall(done.stderr)]
    elapsed = elapsed[-runs:]
    if done.returncode != 0 or len(elapsed) != runs:
        print(f"    quiver failed: {done.stderr.strip()[-300:]}", flush=True)
        return None
    return min(elapsed)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=100_000_000)
    parser.add_argument("--df-rows", type=int, default=50_000_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--engines", default="quiver,chdb,duckdb,datafusion")
    parser.add_argument("--queries", default="gen,gen_sum,mod,uniq,mod_all,uniq_all,mod7,k8")
    args = parser.parse_args()
    engines = args.engines.split(",")
    wanted = args.queries.split(",")
    sql = queries(args.rows)
    checks = {q: (lambda rows, q=q: wrong(q, rows, args.rows, args.df_rows)) for q in wanted}

    import numpy as np
    import pandas as pd
    import pyarrow as pa

    df = None
    if "k8" in wanted:
        rng = np.random.default_rng(42)
        df = pd.DataFrame(
            {
                "k8": rng.integers(0, 256, args.df_rows, dtype=np.uint8),
                "v": rng.random(args.df_rows),
            }
        )

    results: dict[str, dict[str, float | None]] = {q: {} for q in wanted}
    for engine in engines:
        print(f"{engine}:", flush=True)
        if engine == "quiver":
            for q in wanted:
                setup = ""
                if q == "k8":
                    # The same values as the DataFrame: quiver's CLI builds them itself (untimed).
                    setup = (
                        "CREATE TABLE df AS SELECT CAST(k8 AS TINYINT UNSIGNED) AS k8, v FROM "
                        f"(SELECT CAST(random() * 256 AS INT) % 256 AS k8, random() AS v "
                        f"FROM numbers_mt({args.df_rows}));\n"
                    )
                results[q][engine] = run_quiver(sql[q][engine], args.runs, checks[q], setup)
                print(f"  {q}: {results[q][engine]}", flush=True)
        elif engine == "chdb":
            import chdb

            for q in wanted:
                results[q][engine] = best_of(
                    lambda s=sql[q][engine]: chdb.query(s, "ArrowTable"), args.runs, checks[q]
                )
                print(f"  {q}: {results[q][engine]}", flush=True)
        elif engine == "duckdb":
            import duckdb

            con = duckdb.connect()
            if df is not None:
                con.register("df", df)

            def fetch(query):
                result = con.execute(query)
                # DuckDB 2 renamed fetch_arrow_table(); both fetch the whole result as Arrow.
                if hasattr(result, "to_arrow_table"):
                    return result.to_arrow_table()
                return result.fetch_arrow_table()

            for q in wanted:
                results[q][engine] = best_of(
                    lambda s=sql[q][engine]: fetch(s), args.runs, checks[q]
                )
                print(f"  {q}: {results[q][engine]}", flush=True)
        elif engine == "datafusion":
            import datafusion

            ctx = datafusion.SessionContext()
            if df is not None:
                ctx.from_pandas(df, name="df")
            for q in wanted:
                results[q][engine] = best_of(
                    lambda s=sql[q][engine]: pa.Table.from_batches(ctx.sql(s).collect()),
                    args.runs,
                    checks[q],
                )
                print(f"  {q}: {results[q][engine]}", flush=True)

    versions = {}
    for module in ("chdb", "duckdb", "datafusion"):
        try:
            versions[module] = __import__(module).__version__
        except Exception:
            pass
    versions["quiver"] = subprocess.run(
        [quiver_binary(), "--version"], capture_output=True, text=True
    ).stdout.strip()
    binary = pathlib.Path(quiver_binary()).parent.name

    lines = [
        f"Small-key GROUP BY and uniq, N = {args.rows:,} (numbers), {args.df_rows:,}-row DataFrame "
        f"(k8), best of {args.runs}, seconds (lower is better); quiver binary profile `{binary}`.",
        "",
        "| query | "
        + " | ".join(engines)
        + " | quiver / chDB | quiver / DuckDB | quiver / datafusion |",
        "|---|" + "---:|" * (len(engines) + 3),
    ]
    for q in wanted:
        row = results[q]
        cells = [
            f"{row[e]:.3f}" if isinstance(row.get(e), float) else (row.get(e) or "fail")
            for e in engines
        ]
        ratios = []
        for peer in ("chdb", "duckdb", "datafusion"):
            mine, theirs = row.get("quiver"), row.get(peer)
            timed = isinstance(mine, float) and isinstance(theirs, float)
            ratios.append(f"{mine / theirs:.2f}" if timed else "")
        lines.append(f"| {q} | " + " | ".join(cells) + " | " + " | ".join(ratios) + " |")
    lines += ["", "Versions: " + ", ".join(f"{k} {v}" for k, v in versions.items())]
    text = "\n".join(lines) + "\n"
    print(text)
    out = HERE / "results"
    out.mkdir(exist_ok=True)
    (out / "smallkey.md").write_text(text)
    (out / "smallkey.json").write_text(
        json.dumps(
            {"results": results, "versions": versions, "rows": args.rows, "df_rows": args.df_rows},
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
