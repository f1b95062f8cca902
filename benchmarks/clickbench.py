#!/usr/bin/env python3
"""ClickBench's 43 queries over one Parquet file: quiver vs DuckDB vs DataFusion (Python), one run.

    python benchmarks/clickbench.py [--rows 5000000] [--runs 3] [--engines quiver,duckdb,datafusion]

The `hits` file comes from ../shared/bench/gen_hits.py (generated once, cached in
benchmarks/data/). Every engine reads the same file with the same threads; each query runs
`--runs` times in one process and the best time counts (ClickBench's "hot" run). quiver is timed
by the CLI's own `--time` report (execution only, no process start-up), the peers with
`time.perf_counter()` around execute + fetch to Arrow. Results: benchmarks/results/clickbench.{md,json,png}.
"""

import argparse
import json
import os
import pathlib
import re
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
SHARED = HERE.parent.parent / "shared" / "bench"
TIMEOUT_S = 120


def quiver_binary() -> str:
    target = os.environ.get("CARGO_TARGET_DIR", str(pathlib.Path.home() / ".cache/quiver/target"))
    for profile in ("dist", "ci"):
        path = pathlib.Path(target) / profile / "quiver"
        if path.exists():
            return str(path)
    sys.exit("no quiver binary: run `make bench-build` first")


def ensure_data(rows: int) -> pathlib.Path:
    data = HERE / "data"
    data.mkdir(exist_ok=True)
    path = data / f"hits_{rows}.parquet"
    if not path.exists():
        print(f"generating {path} ({rows} rows)...", flush=True)
        subprocess.run(
            [sys.executable, str(SHARED / "gen_hits.py"), "--rows", str(rows), "--out", str(path)],
            check=True,
        )
    return path


def load_queries() -> list[str]:
    text = (SHARED / "clickbench_queries.sql").read_text()
    return [line.strip().rstrip(";") for line in text.splitlines() if line.strip()]


ELAPSED = re.compile(r"Elapsed: ([0-9.]+) s")


def run_quiver(path: pathlib.Path, queries: list[str], runs: int) -> list[float | None]:
    binary = quiver_binary()
    times: list[float | None] = []
    for number, query in enumerate(queries):
        script = f"CREATE VIEW hits AS SELECT * FROM '{path}';\n" + (query + ";\n") * runs
        try:
            done = subprocess.run(
                [binary, "--no-progress", "-f", "Null", "--time"],
                input=script,
                capture_output=True,
                text=True,
                timeout=TIMEOUT_S,
            )
        except subprocess.TimeoutExpired:
            print(f"  quiver Q{number}: timeout", flush=True)
            times.append(None)
            continue
        elapsed = [float(m) for m in ELAPSED.findall(done.stderr)][1:]
        if done.returncode != 0 or len(elapsed) != runs:
            print(f"  quiver Q{number}: failed: {done.stderr.strip()[-300:]}", flush=True)
            times.append(None)
        else:
            times.append(min(elapsed))
    return times


def run_duckdb(path: pathlib.Path, queries: list[str], runs: int) -> list[float | None]:
    import duckdb

    con = duckdb.connect()
    con.execute(f"CREATE VIEW hits AS SELECT * FROM read_parquet('{path}', binary_as_string=True)")

    def fetch(query):
        result = con.execute(query)
        # DuckDB 2 renamed fetch_arrow_table(); both fetch the whole result as Arrow.
        if hasattr(result, "to_arrow_table"):
            return result.to_arrow_table()
        return result.fetch_arrow_table()

    return [best_of(lambda q=q: fetch(q), runs, "duckdb", i) for i, q in enumerate(queries)]


def run_datafusion(path: pathlib.Path, queries: list[str], runs: int) -> list[float | None]:
    import datafusion

    # ClickBench's queries spell columns in mixed case without quotes; stock DataFusion would
    # lowercase them and fail, so keep identifiers as written (quiver resolves either way).
    config = datafusion.SessionConfig().set(
        "datafusion.sql_parser.enable_ident_normalization", "false"
    )
    ctx = datafusion.SessionContext(config)
    ctx.register_parquet("hits", str(path))
    return [
        best_of(lambda q=q: ctx.sql(q).collect(), runs, "datafusion", i)
        for i, q in enumerate(queries)
    ]


def best_of(action, runs: int, engine: str, number: int) -> float | None:
    best = None
    for _ in range(runs):
        started = time.perf_counter()
        try:
            action()
        except Exception as error:  # a peer's failure is reported, not fatal
            print(f"  {engine} Q{number}: failed: {str(error)[:200]}", flush=True)
            return None
        elapsed = time.perf_counter() - started
        best = elapsed if best is None else min(best, elapsed)
    return best


ENGINES = {"quiver": run_quiver, "duckdb": run_duckdb, "datafusion": run_datafusion}


def versions() -> dict[str, str]:
    found = {}
    try:
        found["quiver"] = subprocess.run(
            [quiver_binary(), "--version"], capture_output=True, text=True
        ).stdout.strip()
    except OSError:
        pass
    for module in ("duckdb", "datafusion"):
        try:
            found[module] = __import__(module).__version__
        except Exception:
            pass
    return found


def report(results: dict[str, list[float | None]], queries: list[str], rows: int, runs: int) -> str:
    engines = list(results)
    both = [i for i in range(len(queries)) if all(results[e][i] is not None for e in engines)]
    lines = [
        f"ClickBench, {len(queries)} queries over a {rows:,}-row `hits` Parquet file, best of {runs}, "
        f"seconds (lower is better); ratio = quiver / best peer.",
        "",
        "| query | " + " | ".join(engines) + " | ratio |",
        "|---|" + "---:|" * (len(engines) + 1),
    ]
    for i in range(len(queries)):
        cells = [f"{results[e][i]:.3f}" if results[e][i] is not None else "fail" for e in engines]
        peers = [results[e][i] for e in engines if e != "quiver" and results[e][i] is not None]
        mine = results.get("quiver", [None] * len(queries))[i]
        ratio = f"{mine / min(peers):.2f}" if mine is not None and peers else ""
        lines.append(f"| Q{i} | " + " | ".join(cells) + f" | {ratio} |")
    totals = {e: sum(results[e][i] for i in both) for e in engines}
    peer_best = min((t for e, t in totals.items() if e != "quiver"), default=None)
    ratio = f"{totals['quiver'] / peer_best:.2f}" if "quiver" in totals and peer_best else ""
    lines.append(
        f"| **total ({len(both)} queries all ran)** | "
        + " | ".join(f"**{totals[e]:.2f}**" for e in engines)
        + f" | **{ratio}** |"
    )
    return "\n".join(lines) + "\n"


def chart(results: dict[str, list[float | None]], out: pathlib.Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no chart")
        return
    engines = list(results)
    n = len(next(iter(results.values())))
    both = [i for i in range(n) if all(results[e][i] is not None for e in engines)]
    fig, (left, right) = plt.subplots(1, 2, figsize=(14, 4.5), gridspec_kw={"width_ratios": [1, 4]})
    totals = [sum(results[e][i] for i in both) for e in engines]
    left.bar(engines, totals, color=["#2a9d8f", "#e9c46a", "#e76f51", "#264653"][: len(engines)])
    left.set_title("total seconds (lower is better)")
    width = 0.8 / len(engines)
    for k, engine in enumerate(engines):
        xs = [i + k * width for i in range(n)]
        ys = [results[engine][i] or 0 for i in range(n)]
        right.bar(xs, ys, width=width, label=engine)
    right.set_yscale("log")
    right.set_xticks(
        [i + 0.4 for i in range(n)], [f"Q{i}" for i in range(n)], rotation=90, fontsize=7
    )
    right.set_title("per query, seconds (log scale)")
    right.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--engines", default="quiver,duckdb,datafusion")
    parser.add_argument("--queries", default=None, help="comma-separated query numbers")
    args = parser.parse_args()
    path = ensure_data(args.rows)
    queries = load_queries()
    if args.queries:
        keep = {int(q) for q in args.queries.split(",")}
        queries = [q if i in keep else "SELECT 1" for i, q in enumerate(queries)]
    results = {}
    for engine in args.engines.split(","):
        print(f"running {engine}...", flush=True)
        results[engine] = ENGINES[engine](path, queries, args.runs)
    text = report(results, queries, args.rows, args.runs)
    text += "\nVersions: " + ", ".join(f"{k} {v}" for k, v in versions().items()) + "\n"
    print(text)
    out = HERE / "results"
    out.mkdir(exist_ok=True)
    (out / "clickbench.md").write_text(text)
    (out / "clickbench.json").write_text(
        json.dumps({"rows": args.rows, "runs": args.runs, "results": results}, indent=1)
    )
    chart(results, out / "clickbench.png")


if __name__ == "__main__":
    main()
