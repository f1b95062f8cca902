"""Long fuzzing runs: new seeds for as long as asked, each failure minimised and written as an
``.slt`` case (one per distinct failure; repeats are counted).

    PYTHONPATH=python:python/tests .venv/bin/python -m sqlfuzz --seconds 600 --seed 1000 --out /tmp/fuzz

Seeds run from ``--seed`` upwards; a run is reproduced by the same ``--seed`` and
``--data-seed``. ``--checks`` picks the checks (all by default, in turn).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time

from sqlfuzz.oracles import CHECKS
from sqlfuzz.runner import OUT_ENV, Report, Runner, shape


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sqlfuzz", description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="how long to run")
    parser.add_argument("--seed", type=int, default=1_000_000, help="the first query seed")
    parser.add_argument("--data-seed", type=int, default=0, help="the seed of the tables")
    parser.add_argument("--out", default=os.environ.get(OUT_ENV), help="folder for .slt cases")
    parser.add_argument("--checks", default=",".join(CHECKS), help="comma-separated checks")
    parser.add_argument("--batch", type=int, default=50, help="seeds per check in each turn")
    parser.add_argument(
        "--shrink-seconds", type=float, default=60.0, help="time to minimise each failure"
    )
    args = parser.parse_args(argv)
    checks = [c for c in args.checks.split(",") if c]
    unknown = set(checks) - set(CHECKS)
    if unknown:
        parser.error(f"unknown checks {sorted(unknown)}; choose among {', '.join(CHECKS)}")

    started = time.monotonic()
    runner = Runner(args.data_seed)
    print(f"tables built in {time.monotonic() - started:.1f} s", flush=True)
    if not runner.engines.optimizations_off and "optoff" in checks:
        checks.remove("optoff")
        print("skipping optoff: `SET quiver.optimizations = false` is not supported yet")
    end = started + args.seconds
    report = Report()
    seen: dict = {}
    seed = args.seed
    try:
        while time.monotonic() < end:
            for check in checks:
                before = len(report.failures)
                runner.run(check, range(seed, seed + args.batch), report, deadline=end)
                for case, outcome in report.failures[before:]:
                    try:
                        handle(runner, args, case, outcome, seen)
                    except Exception as error:  # keep fuzzing; the failure is printed
                        print(f"  could not minimise or write it: {error!r}", flush=True)
            seed += args.batch
    finally:
        shutil.rmtree(runner.folder, ignore_errors=True)
    print(report.summary())
    for reason, n in report.skipped.most_common(10):
        print(f"skipped {n}x: {reason}")
    print(f"seeds {args.seed}..{seed - 1}; {len(report.failures)} failures, {len(seen)} distinct")
    return 1 if report.failures else 0


def handle(runner: Runner, args, case, outcome, seen: dict) -> None:
    print(runner.describe(case, outcome), flush=True)
    small, small_outcome, tables = runner.minimise(case, outcome, args.shrink_seconds)
    key = (
        case.check,
        small_outcome.signature,
        shape(str(small.body.sql() if hasattr(small.body, "sql") else small.body)),
    )
    if key in seen:
        seen[key] += 1
        print(f"  (same as an earlier failure, {seen[key]} so far)")
        return
    seen[key] = 1
    print("  minimised: " + runner.describe(small, small_outcome).replace("\n", "\n  "))
    culprits = runner.culprits(small, small_outcome)
    if culprits:
        print("  goes away with any of: " + ", ".join(f"SET {c} = false" for c in culprits))
    if args.out:
        path = runner.write(args.out, small, small_outcome, tables)
        print(f"  written to {path}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
