#!/usr/bin/env python3
"""`import quiver` cost: wall time of `python -c "import X"` minus `python -c pass`, median of N.

    python benchmarks/import_time.py [--runs 20]

Peers in the same run: duckdb, chdb, datafusion (whichever are installed). Target: quiver
<= 15 ms above `python -c pass`. Writes benchmarks/results/import_time.md.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import statistics
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent


def median_ms(code: str, runs: int, env: dict) -> float:
    command = [sys.executable, "-c", code]
    subprocess.run(command, check=True, capture_output=True, env=env)  # warm the page cache
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run(command, check=True, capture_output=True, env=env)
        samples.append(time.perf_counter() - started)
    return statistics.median(samples) * 1000


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    env = dict(os.environ)
    env["PYTHONPATH"] = str(HERE.parent / "python")
    base = median_ms("pass", args.runs, env)
    rows = [("python -c pass", base, 0.0)]
    for module in ("quiver", "duckdb", "chdb", "datafusion"):
        try:
            ms = median_ms(f"import {module}", args.runs, env)
        except subprocess.CalledProcessError:
            continue
        rows.append((f"import {module}", ms, ms - base))
    # What a first query costs on top: loading the extension and starting the runtime.
    ms = median_ms("import quiver; quiver.sql('SELECT 1').fetchall", args.runs, env)
    rows.append(("import quiver + connect (extension loaded)", ms, ms - base))
    lines = [
        f"`python -c` wall time, median of {args.runs} runs, ms (Python {sys.version.split()[0]})",
        "",
        "| command | median ms | above `pass` |",
        "|---|---:|---:|",
    ]
    lines += [f"| `{label}` | {ms:.1f} | {above:.1f} |" for label, ms, above in rows]
    text = "\n".join(lines) + "\n"
    print(text)
    (HERE / "results").mkdir(exist_ok=True)
    (HERE / "results" / "import_time.md").write_text(text)


if __name__ == "__main__":
    main()
