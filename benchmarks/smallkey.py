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

`mod` and `uniq` are the issue's queries: `ORDER BY k LIMIT 10` lets an engine skip the rows of
groups that cannot be in the first ten (ClickHouse does; so does quiver since the limit is pushed
into its small-key operator). `mod_all` / `uniq_all` show the cost of the whole aggregation.
The quiver binary is $CARGO_TARGET_DIR/{dist,ci}/quiver (default target dir ~/.cache/quiver/target).

quiver is timed by the CLI's own `--time` report (execution only). For `k8` the CLI cannot see a
pandas DataFrame (that is the Python package's job), so quiver reads the same columns from an
in-memory table it built with CREATE TABLE (untimed); the peers read the pandas DataFrame
(DuckDB and chDB zero-copy, DataFusion after `from_pandas`, untimed). Results:
benchmarks/results/smallkey.{md,json}.
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
        "k8": {
            "quiver": "SELECT k8, count(*), avg(v) FROM df GROUP BY k8",
            "chdb": "SELECT k8, count(*), avg(v) FROM Python(df) GROUP BY k8",
            "duckdb": "SELECT k8, count(*), avg(v) FROM df GROUP BY k8",
            "datafusion": "SELECT k8, count(*), avg(v) FROM df GROUP BY k8",
        },
    }


def best_of(action, runs: int) -> float | None:
    best = None
    for _ in range(runs):
        started = time.perf_counter()
        try:
            action()
        except Exception as error:  # a peer's failure is reported, not fatal
            print(f"    failed: {str(error)[:200]}", flush=True)
            return None
        elapsed = time.perf_counter() - started
        best = elapsed if best is None else min(best, elapsed)
    return best


def run_quiver(sql: str, runs: int, setup: str = "") -> float | None:
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
    parser.add_argument("--queries", default="gen,gen_sum,mod,uniq,mod_all,uniq_all,k8")
    args = parser.parse_args()
    engines = args.engines.split(",")
    wanted = args.queries.split(",")
    sql = queries(args.rows)

    import numpy as np
    import pandas as pd

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
                results[q][engine] = run_quiver(sql[q][engine], args.runs, setup)
                print(f"  {q}: {results[q][engine]}", flush=True)
        elif engine == "chdb":
            import chdb

            for q in wanted:
                results[q][engine] = best_of(
                    lambda s=sql[q][engine]: chdb.query(s, "ArrowTable"), args.runs
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
                results[q][engine] = best_of(lambda s=sql[q][engine]: fetch(s), args.runs)
                print(f"  {q}: {results[q][engine]}", flush=True)
        elif engine == "datafusion":
            import datafusion

            ctx = datafusion.SessionContext()
            if df is not None:
                ctx.from_pandas(df, name="df")
            for q in wanted:
                results[q][engine] = best_of(
                    lambda s=sql[q][engine]: ctx.sql(s).collect(), args.runs
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
        cells = [f"{row[e]:.3f}" if row.get(e) is not None else "fail" for e in engines]
        ratios = []
        for peer in ("chdb", "duckdb", "datafusion"):
            mine, theirs = row.get("quiver"), row.get(peer)
            ratios.append(f"{mine / theirs:.2f}" if mine and theirs else "")
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
