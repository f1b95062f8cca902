#!/usr/bin/env python3
"""COUNT(DISTINCT) beside COUNT(*) per group, over the 5M-row pandas `hits` frame, in one run:
quiver vs chDB vs DuckDB vs DataFusion (Python) vs Polars.

    python benchmarks/distinct_groups.py [--rows 5000000] [--runs 3] [--engines ...]

Queries (best of `--runs`, seconds; every result fetched as Arrow, Polars as a DataFrame):
  region_phrase  SELECT RegionID, count(*), count(DISTINCT SearchPhrase) … GROUP BY RegionID
                 (10,000 groups, a string distinct argument)
  user_phrase    the same GROUP BY UserID (about half a million groups)
  q9             ClickBench's Q9: COUNT(DISTINCT UserID) beside SUM, COUNT and AVG by RegionID
                 (an integer distinct argument: quiver keeps DataFusion's plan for it)

Stock DataFusion keeps a set of values per group for a DISTINCT aggregate beside COUNT or AVG;
quiver computes a string one as two GROUP BYs (crates/quiver-core/src/distinct_groups.rs).
Each engine runs in its own process with its address space capped at 20 GiB, so an engine that
runs out of memory fails its query instead of the machine. Results:
benchmarks/results/distinct_groups.{md,json}.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import subprocess
import sys

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from clickbench_pandas import connect  # noqa: E402

RESULTS = HERE / "results"
ENGINES = ["quiver", "chdb", "duckdb", "datafusion", "polars"]
QUERIES = {
    "region_phrase": "SELECT RegionID, count(*) AS c, count(DISTINCT SearchPhrase) AS d "
    "FROM hits GROUP BY RegionID ORDER BY c DESC LIMIT 10",
    "user_phrase": "SELECT UserID, count(*) AS c, count(DISTINCT SearchPhrase) AS d "
    "FROM hits GROUP BY UserID ORDER BY c DESC LIMIT 10",
    "q9": "SELECT RegionID, SUM(AdvEngineID), COUNT(*) AS c, AVG(ResolutionWidth), "
    "COUNT(DISTINCT UserID) FROM hits GROUP BY RegionID ORDER BY c DESC LIMIT 10",
}
COLUMNS = ["RegionID", "UserID", "SearchPhrase", "AdvEngineID", "ResolutionWidth"]
MEMORY_CAP = 20 << 30


def worker(engine: str, rows: int, runs: int) -> dict:
    import resource
    import time

    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))
    import pandas as pd

    hits = pd.read_parquet(HERE / "data" / f"hits_{rows}.parquet", columns=COLUMNS)
    run, _ = connect(engine, hits)

    times: dict[str, float | str] = {}
    for name, q in QUERIES.items():
        try:
            best = float("inf")
            for _ in range(runs):
                start = time.perf_counter()
                run(q)
                best = min(best, time.perf_counter() - start)
            times[name] = best
        except MemoryError:
            times[name] = "out of memory"
        except Exception as error:  # an engine's own error type
            times[name] = f"error: {type(error).__name__}"
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6
    return {"times": times, "peak_rss_gb": round(peak, 1)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--engines", default=",".join(ENGINES))
    parser.add_argument("--worker")
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, args.rows, args.runs)))
        return
    if not (HERE / "data" / f"hits_{args.rows}.parquet").exists():
        raise SystemExit("run benchmarks/clickbench_pandas.py first: it generates the data")

    results = {}
    for engine in args.engines.split(","):
        command = [sys.executable, __file__, "--worker", engine]
        command += ["--rows", str(args.rows), "--runs", str(args.runs)]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            reason = f"process died (exit {done.returncode})"
            results[engine] = {"times": dict.fromkeys(QUERIES, reason), "peak_rss_gb": None}
        else:
            results[engine] = json.loads(done.stdout.strip().splitlines()[-1])
        print(engine, results[engine], flush=True)

    def cell(value) -> str:
        return f"{value:.3f}" if isinstance(value, float) else str(value)

    engines = list(results)
    lines = [
        f"COUNT(DISTINCT) beside COUNT(*) per group over the {args.rows:,}-row pandas `hits` "
        f"frame: best of {args.runs}, seconds (peak RSS of the engine's process).",
        "",
        "| query | " + " | ".join(engines) + " |",
        "|---|" + "---:|" * len(engines),
    ]
    for name in QUERIES:
        row = [cell(results[e]["times"][name]) for e in engines]
        lines.append(f"| {name} | " + " | ".join(row) + " |")
    peaks = [f"{results[e]['peak_rss_gb']} GB" for e in engines]
    lines.append("| peak RSS | " + " | ".join(peaks) + " |")
    table = "\n".join(lines) + "\n"
    print(table)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "distinct_groups.md").write_text(table)
    (RESULTS / "distinct_groups.json").write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
