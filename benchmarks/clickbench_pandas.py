#!/usr/bin/env python3
"""ClickBench's 43 queries over one in-memory pandas DataFrame: quiver vs chDB vs DuckDB vs
DataFusion (Python) vs Polars, in one run.

    python benchmarks/clickbench_pandas.py [--rows 5000000] [--runs 3] [--rounds 2]
                                           [--variants str,object]
    python benchmarks/clickbench_pandas.py --variants as-read --out clickbench_pandas_as_read

The frame is ../shared/bench/gen_hits.py's `hits` loaded with `pd.read_parquet` (EventDate as
datetime64). Two variants: pandas' default strings (`str`, Arrow-backed in pandas 3) and every
string column as Python objects (`astype(object)`, as pandas 2 users have them). A third,
`as-read`, is the frame exactly as `pd.read_parquet` returns it: EventDate stays a column of
`datetime.date` objects, which every engine has to convert when a query reads it. Each engine
runs in its own process over its own copy of the frame. Per query: the first run (which
includes whatever conversion or registration the engine does: chDB, DuckDB and quiver scan
the frame in place on every query, DataFusion and Polars convert it once, before their first
query, and that time is added to their first query) and the best of `--runs` hot runs (more
for a query of a few milliseconds: hot runs continue until they add up to a quarter of a
second, at most 30, for every engine alike); every run fetches the whole result as Arrow
(Polars: a polars DataFrame).

This machine's speed drifts by 20-40% over minutes (other tenants), and an engine's whole pass
takes about a minute, so one pass per engine can put one engine in a slow phase and its peer in
a fast one. The passes therefore run `--rounds` times (default 2), the engines in reverse order
in every other round, each pass in a fresh process; a query's hot time is the best over every
round's hot runs, its first-run time the best of the rounds' first runs.

Answers are checked: each engine's first result of a query is reduced to a fingerprint — its
row count and the sorted values, rounded to 6 significant digits, of its numeric columns: all
of them without a LIMIT; with one, those named in the ORDER BY (where `ORDER BY c DESC LIMIT
10` cuts through ties, the other columns of the tied rows legitimately differ between engines,
the ten values of `c` do not) — and compared with DuckDB's (or, without DuckDB in the run, the
first peer's). A time whose answer differs is
marked `≠` in the table and listed under it; a mark needs explaining before the time means
anything.
Results: benchmarks/results/clickbench_pandas.{md,json,png}.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
SHARED = HERE.parent.parent / "shared" / "bench"
RESULTS = HERE / "results"
ENGINES = ["quiver", "chdb", "duckdb", "datafusion", "polars"]
HOT_BUDGET = 0.25  # seconds of hot runs a short query gets, beyond `--runs`
HOT_MAX = 30


def load_queries() -> list[str]:
    text = (SHARED / "clickbench_queries.sql").read_text()
    return [line.strip().rstrip(";") for line in text.splitlines() if line.strip()]


def load_frame(rows: int, variant: str):
    import pandas as pd

    path = HERE / "data" / f"hits_{rows}.parquet"
    if not path.exists():
        path.parent.mkdir(exist_ok=True)
        subprocess.run(
            [sys.executable, str(SHARED / "gen_hits.py"), "--rows", str(rows), "--out", str(path)],
            check=True,
        )
    hits = pd.read_parquet(path)
    if variant != "as-read":
        hits["EventDate"] = pd.to_datetime(hits["EventDate"])
    for name in hits.columns:
        dtype = hits[name].dtype
        if dtype is object or str(dtype) == "object" or isinstance(dtype, pd.StringDtype):
            if variant == "object":
                hits[name] = hits[name].astype(object)
    return hits


def connect(engine: str, hits):
    """`(run, setup)`: a function running one query over the frame `hits` and fetching the
    whole result, and the seconds spent converting or registering the frame first. quiver
    finds `hits` by name in its caller's frames, so the caller must hold it in a variable of
    that name."""
    setup = 0.0
    if engine == "quiver":
        sys.path.insert(0, str(HERE.parent / "python"))
        import quiver

        con = quiver.connect()

        def run(q):
            return con.sql(q).arrow()

    elif engine == "chdb":
        import chdb

        def run(q):
            return chdb.query(q.replace("FROM hits", "FROM Python(hits)"), "ArrowTable")

    elif engine == "duckdb":
        import duckdb

        con = duckdb.connect()
        con.register("hits", hits)  # a view over the frame, scanned in place on every query

        def run(q):
            result = con.sql(q)
            if result is None:
                return None
            return result.to_arrow_table() if hasattr(result, "to_arrow_table") else result.arrow()

    elif engine == "datafusion":
        import datafusion

        config = datafusion.SessionConfig().set(
            "datafusion.sql_parser.enable_ident_normalization", "false"
        )
        ctx = datafusion.SessionContext(config)
        started = time.perf_counter()
        ctx.from_pandas(hits, "hits")
        setup = time.perf_counter() - started

        def run(q):
            return ctx.sql(q).collect()

    elif engine == "polars":
        import polars as pl

        started = time.perf_counter()
        frame = pl.from_pandas(hits)
        sql = pl.SQLContext(hits=frame)
        setup = time.perf_counter() - started

        def run(q):
            return sql.execute(q).collect()

    else:
        raise SystemExit(f"unknown engine {engine}")
    return run, setup


def fingerprint(result, query: str) -> list:
    """A result reduced to what every correct engine agrees on (see the module's notes)."""
    import re

    import pyarrow as pa

    upper = query.upper()
    keys = None  # every numeric column
    if " LIMIT " in upper:
        order = re.search(r"ORDER BY (.*?)(?: LIMIT |$)", query, re.IGNORECASE)
        keys = set()
        if order:
            for key in order.group(1).split(","):
                keys.add(re.sub(r"\s+(ASC|DESC)$", "", key.strip(), flags=re.IGNORECASE).lower())
    if result is None:
        return [0]
    if isinstance(result, list):  # DataFusion: record batches
        result = pa.Table.from_batches(result) if result else pa.table({})
    elif not isinstance(result, pa.Table):  # Polars
        result = result.to_arrow()
    shape: list = [result.num_rows]
    # What each engine calls the column of `COUNT(*)`.
    counts = {"count_star()": "count(*)", "count()": "count(*)", "len": "count(*)"}
    for name, column in zip(result.column_names, result.columns):
        name = counts.get(name.lower(), name.lower())
        if keys is not None and name not in keys:
            continue
        kind = column.type
        if pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_decimal(kind):
            values = [None if v is None else float(f"{float(v):.6g}") for v in column.to_pylist()]
            shape.append(sorted(values, key=lambda v: (v is None, v if v is not None else 0)))
    return shape


def worker(engine: str, variant: str, rows: int, runs: int, numbers: list[int]) -> dict:
    hits = load_frame(rows, variant)
    queries = load_queries()
    run, setup = connect(engine, hits)

    first: list[float | None] = []
    hot: list[float | None] = []
    answers: list = []
    for number in numbers:
        query = queries[number]
        times = []
        answer = None
        try:
            # The first run, then at least `runs` hot ones; a query of a few milliseconds,
            # for which 3 runs are too few samples on this machine, gets more hot runs (up to
            # HOT_BUDGET seconds of them, at most HOT_MAX), every engine alike.
            while len(times) < runs + 1 or (
                sum(times[1:]) < HOT_BUDGET and len(times) < HOT_MAX + 1
            ):
                started = time.perf_counter()
                result = run(query)
                times.append(time.perf_counter() - started)
                if answer is None:
                    answer = fingerprint(result, query)
        except Exception as error:  # a failure is reported, not fatal
            print(f"  {engine}/{variant} Q{number}: failed: {str(error)[:160]}", file=sys.stderr)
            first.append(None)
            hot.append(None)
            answers.append(None)
            continue
        first.append(times[0] + (setup if not first or all(f is None for f in first) else 0.0))
        hot.append(min(times[1:]))
        answers.append(answer)
    return {"first": first, "hot": hot, "setup": setup, "answers": answers}


def reference_engine(engines: dict) -> str | None:
    """The engine whose answers the others are checked against: DuckDB, else the first peer."""
    if "duckdb" in engines:
        return "duckdb"
    return next((name for name in engines if name != "quiver"), None)


def differs(engines: dict, name: str, k: int) -> bool:
    """Whether `name`'s answer to the k-th query differs from the reference engine's."""
    reference = engines.get(reference_engine(engines), {}).get("answers")
    mine = engines[name].get("answers")
    if not reference or not mine or reference[k] is None or mine[k] is None:
        return False
    return reference[k] != mine[k]


def versions() -> dict[str, str]:
    found = {}
    for module in ("chdb", "duckdb", "datafusion", "polars", "pandas", "pyarrow"):
        try:
            found[module] = __import__(module).__version__
        except Exception:
            pass
    return found


def seconds(value: float) -> str:
    """Three significant digits down to a tenth of a millisecond."""
    return f"{value:.3f}" if value >= 0.1 else f"{value:.4f}"


def report(results: dict, numbers: list[int], rows: int, runs: int, rounds: int) -> str:
    passes = f"{rounds} passes per engine (engine order reversed every other pass)"
    lines = [
        f"ClickBench over a {rows:,}-row in-memory pandas DataFrame, {passes}: best of the "
        f"{runs * rounds} hot runs (up to {HOT_MAX * rounds} for a query of milliseconds), "
        f"and the best of the {rounds} first runs (with conversion/registration), seconds, "
        "lower is better; "
        "ratio = quiver / best peer that ran the query.",
        "",
    ]
    for variant, engines in results.items():
        names = list(engines)
        heading = {"as-read": "the frame as `pd.read_parquet` returns it (dates as objects)"}
        lines += [f"### {heading.get(variant, f'strings as `{variant}`')}", ""]
        lines.append("| query | " + " | ".join(names) + " | ratio |")
        lines.append("|---|" + "---:|" * (len(names) + 1))
        for k, number in enumerate(numbers):
            cells = []
            for name in names:
                value = engines[name]["hot"][k]
                mark = " ≠" if differs(engines, name, k) else ""
                cells.append("fail" if value is None else seconds(value) + mark)
            mine = engines.get("quiver", {}).get("hot", [None] * len(numbers))[k]
            peers = [
                engines[n]["hot"][k]
                for n in names
                if n != "quiver" and engines[n]["hot"][k] is not None
            ]
            ratio = f"{mine / min(peers):.2f}" if mine is not None and peers else ""
            lines.append(f"| Q{number} | " + " | ".join(cells) + f" | {ratio} |")
        for kind in ("hot", "first"):
            common = [
                k
                for k in range(len(numbers))
                if all(engines[n][kind][k] is not None for n in names)
            ]
            totals = {n: sum(engines[n][kind][k] for k in common) for n in names}
            peer = min((t for n, t in totals.items() if n != "quiver"), default=None)
            ratio = f"{totals['quiver'] / peer:.2f}" if "quiver" in totals and peer else ""
            lines.append(
                f"| **{kind} total ({len(common)} queries all ran)** | "
                + " | ".join(f"**{totals[n]:.2f}**" for n in names)
                + f" | **{ratio}** |"
            )
        wrong = [
            f"{name} Q{number}"
            for name in names
            for k, number in enumerate(numbers)
            if differs(engines, name, k)
        ]
        lines += [
            "",
            f"Answers differing from {reference_engine(engines)}'s (≠): "
            + (", ".join(wrong) if wrong else "none")
            + ".",
        ]
        # Against each peer, over the queries both ran.
        lines.append("")
        for name in names:
            if name == "quiver" or "quiver" not in engines:
                continue
            common = [
                k
                for k in range(len(numbers))
                if engines["quiver"]["hot"][k] is not None and engines[name]["hot"][k] is not None
            ]
            mine = sum(engines["quiver"]["hot"][k] for k in common)
            theirs = sum(engines[name]["hot"][k] for k in common)
            if theirs:
                lines.append(
                    f"- vs {name}: quiver {mine:.2f} s, {name} {theirs:.2f} s over the {len(common)} "
                    f"queries both ran (ratio {mine / theirs:.2f})"
                )
        lines.append("")
    return "\n".join(lines) + "\n"


def chart(results: dict, numbers: list[int], out: pathlib.Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    variants = list(results)
    fig, axes = plt.subplots(len(variants), 1, figsize=(15, 4.5 * len(variants)), squeeze=False)
    for ax, variant in zip(axes[:, 0], variants):
        engines = results[variant]
        width = 0.8 / len(engines)
        for j, (name, data) in enumerate(engines.items()):
            xs = [i + j * width for i in range(len(numbers))]
            ax.bar(xs, [v or 0 for v in data["hot"]], width=width, label=name)
        ax.set_yscale("log")
        ax.set_xticks(
            [i + 0.4 for i in range(len(numbers))], [f"Q{n}" for n in numbers], fontsize=7
        )
        ax.set_title(f"ClickBench over a pandas DataFrame ({variant}): hot seconds (log)")
        ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=100)


def run_worker(args, engine: str, variant: str, numbers: list[int]) -> dict | None:
    """One engine's pass over the queries, in a fresh process; None if the process failed."""
    done = subprocess.run(
        [
            sys.executable,
            __file__,
            "--worker",
            engine,
            "--variant",
            variant,
            "--rows",
            str(args.rows),
            "--runs",
            str(args.runs),
            "--queries",
            ",".join(map(str, numbers)),
        ],
        capture_output=True,
        text=True,
    )
    sys.stderr.write(done.stderr[-4000:])
    if done.returncode != 0:
        print(f"  {engine} failed: exit {done.returncode}", flush=True)
        return None
    return json.loads(done.stdout.strip().splitlines()[-1])


def best_of(earlier: dict | None, later: dict) -> dict:
    """Two passes of one engine merged query by query: the better time of each kind (a query
    that failed in one pass and ran in the other keeps the time it has)."""
    if earlier is None:
        return later

    def better(a, b):
        return b if a is None else a if b is None else min(a, b)

    return {
        kind: [better(a, b) for a, b in zip(earlier[kind], later[kind])]
        for kind in ("first", "hot")
    } | {
        "setup": min(earlier["setup"], later["setup"]),
        "answers": [
            a if a is not None else b for a, b in zip(earlier["answers"], later["answers"])
        ],
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2, help="passes per engine, see above")
    parser.add_argument("--variants", default="str,object")
    parser.add_argument("--engines", default=",".join(ENGINES))
    parser.add_argument("--queries", default=None, help="comma-separated query numbers")
    parser.add_argument("--out", default="clickbench_pandas", help="results/<out>.{md,json,png}")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--variant", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    count = len(load_queries())
    numbers = [int(n) for n in args.queries.split(",")] if args.queries else list(range(count))
    if args.worker:
        print(json.dumps(worker(args.worker, args.variant, args.rows, args.runs, numbers)))
        return
    results: dict = {}
    engines = args.engines.split(",")
    for variant in args.variants.split(","):
        results[variant] = {}
        for round_ in range(args.rounds):
            for engine in engines if round_ % 2 == 0 else engines[::-1]:
                print(f"{engine} / {variant} (round {round_ + 1}) ...", flush=True)
                measured = run_worker(args, engine, variant, numbers)
                if measured is not None:
                    results[variant][engine] = best_of(results[variant].get(engine), measured)
        # Report the engines in the order given, whatever order the last round ran them in.
        results[variant] = {e: results[variant][e] for e in engines if e in results[variant]}
    RESULTS.mkdir(exist_ok=True)
    text = report(results, numbers, args.rows, args.runs, args.rounds)
    text += "\nVersions: " + ", ".join(f"{k} {v}" for k, v in versions().items()) + "\n"
    print(text)
    (RESULTS / f"{args.out}.md").write_text(text)
    (RESULTS / f"{args.out}.json").write_text(
        json.dumps(
            {
                "rows": args.rows,
                "runs": args.runs,
                "rounds": args.rounds,
                "queries": numbers,
                "results": results,
            }
        )
    )
    chart(results, numbers, RESULTS / f"{args.out}.png")


if __name__ == "__main__":
    main()
