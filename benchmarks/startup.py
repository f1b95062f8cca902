#!/usr/bin/env python3
"""Start-up time of the `quiver` CLI: wall time of `quiver -q "SELECT 1"`, median of N runs.

    python benchmarks/startup.py [--binary PATH] [--runs 20]

Prints a table and writes benchmarks/results/startup.md. Target: median <= 15 ms.
"""

import argparse
import os
import pathlib
import statistics
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent


def default_binary() -> str:
    target = os.environ.get("CARGO_TARGET_DIR", str(pathlib.Path.home() / ".cache/quiver/target"))
    for profile in ("dist", "ci"):
        path = pathlib.Path(target) / profile / "quiver"
        if path.exists():
            return str(path)
    sys.exit("no quiver binary: run `make build` or `make bench-build` first")


def time_command(command: list[str], runs: int) -> list[float]:
    subprocess.run(command, check=True, capture_output=True)  # warm the page cache
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run(command, check=True, capture_output=True)
        samples.append(time.perf_counter() - started)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", default=None)
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    binary = args.binary or default_binary()
    rows = []
    for label, command in [
        ("`true` (process floor)", ["true"]),
        ('`quiver -q "SELECT 1"`', [binary, "-q", "SELECT 1"]),
        (
            '`quiver -q "SELECT count(*) FROM generate_series(1, 1000)"`',
            [binary, "-q", "SELECT count(*) FROM generate_series(1, 1000)"],
        ),
    ]:
        samples = time_command(command, args.runs)
        rows.append((label, statistics.median(samples) * 1000, min(samples) * 1000))
    lines = [
        f"Start-up, median and best of {args.runs} runs (binary: `{pathlib.Path(binary).parent.name}` profile)",
        "",
        "| command | median ms | best ms |",
        "|---|---:|---:|",
    ]
    lines += [f"| {label} | {median:.1f} | {best:.1f} |" for label, median, best in rows]
    text = "\n".join(lines) + "\n"
    print(text)
    (HERE / "results").mkdir(exist_ok=True)
    (HERE / "results" / "startup.md").write_text(text)


if __name__ == "__main__":
    main()
