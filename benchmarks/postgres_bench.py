#!/usr/bin/env python3
"""Postgres-scanner benchmarks, every peer in one run (see benchmarks/README.md).

    python benchmarks/postgres_bench.py [--dsn 'host=... port=... user=postgres dbname=tpch']
                                        [--connections 2] [--runs 3] [--single-rounds 5]
                                        [--skip-scan] [--skip-tpch]
                                        [--queries 17,18,21] [--quiver PATH]
                                        [--peers quiver,duckdb,postgres]

The quiver binary is --quiver, else $QUIVER_BINARY, else `dist` or `ci` under $CARGO_TARGET_DIR
(default ~/.cache/quiver/target); it is copied to a temporary file first, so a build in the
same target directory during the run cannot replace it. --queries runs a subset of TPC-H; a
subset, --skip-scan or --skip-tpch does not overwrite the results files unless --write is given.

Needs the TPC-H database of `postgres_setup.py` and a venv with duckdb==1.5.5,
duckdb-extension-postgres-scanner, duckdb-extension-tpch, connectorx and pyarrow.

1. Full scan of `lineitem` into Arrow with N connections: quiver (CLI, `--time`), DuckDB's
   postgres_scanner, ConnectorX (partition_on="l_orderkey"), and the floor: N `psql` processes
   writing the binary COPY of the same ctid halves to /dev/null. Best of --runs, the readers
   taking turns run by run, each with the CPU seconds it cost the client and the server, and
   each reader's ratio to the floor run of the same round (with their median). Then
   --single-rounds rounds of the floor and quiver with one connection each, where one backend
   leaves the client a core of its own.
2. The 22 TPC-H queries: quiver over the attached database, DuckDB over the same database
   (ATTACH ... TYPE postgres), and Postgres running them itself, 60 s timeout each, answers
   checked against DuckDB's `tpch_answers()` (scale factor 1). The systems take turns query
   by query, so load from outside the run falls on all of them alike.

Writes benchmarks/results/postgres.{md,json}.
"""

import argparse
import concurrent.futures
import glob
import json
import math
import os
import pathlib
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
TIMEOUT_S = 60
ELAPSED = re.compile(r"Elapsed: ([0-9.]+) s")


_BINARY = None
compare_binary = None


def quiver_binary() -> str:
    if _BINARY:
        return _BINARY
    if os.environ.get("QUIVER_BINARY"):
        return os.environ["QUIVER_BINARY"]
    target = os.environ.get("CARGO_TARGET_DIR", str(pathlib.Path.home() / ".cache/quiver/target"))
    for profile in ("dist", "ci"):
        path = pathlib.Path(target) / profile / "quiver"
        if path.exists():
            return str(path)
    sys.exit("no quiver binary: run `make build` or `make bench-build` first")


def dsn_parts(dsn: str) -> dict:
    return dict(part.split("=", 1) for part in dsn.split())


def duckdb_connection(threads: int):
    import duckdb

    con = duckdb.connect(config={"allow_unsigned_extensions": "true"})
    site = pathlib.Path(duckdb.__file__).resolve().parent.parent
    for name in ("postgres_scanner", "tpch"):
        path = glob.glob(
            str(site / f"duckdb_extension_{name}" / "extensions" / "*" / f"{name}.duckdb_extension")
        )
        con.execute(f"LOAD '{path[0]}'")
    con.execute(f"SET threads = {threads}")
    return con


def fetch_arrow(result):
    if hasattr(result, "to_arrow_table"):
        return result.to_arrow_table()
    return result.fetch_arrow_table()


# The floor's name in the scan's readers, results and report.
FLOOR = "floor (psql binary COPY to /dev/null)"


def paired_ratios(samples):
    """Each reader's wall time over the floor's in the same round (the readers take turns
    round by round), and the median of those ratios: on a VM whose speed drifts from minute
    to minute, a steadier measure than one best-of-N over another."""
    floors = [run[0] for run in samples.get(FLOOR, [])]
    out = {}
    for name, runs in samples.items():
        if name == FLOOR or len(runs) != len(floors) or not runs:
            continue
        ratios = [run[0] / floor for run, floor in zip(runs, floors)]
        out[name] = {"rounds": ratios, "median": statistics.median(ratios)}
    return out


def best(samples):
    samples = [s for s in samples if s is not None]
    return min(samples) if samples else None


# ---------------------------------------------------------------- 1. full scan of lineitem
def scan_quiver(dsn, connections, runs, binary=None):
    sql = (
        f"SELECT * FROM postgres_scan('{dsn}', 'public', 'lineitem', connections => {connections});\n"
    ) * runs
    done = subprocess.run(
        [
            binary or quiver_binary(),
            "--no-progress",
            "--threads",
            str(connections),
            "-f",
            "Null",
            "--time",
        ],
        input=sql,
        capture_output=True,
        text=True,
        timeout=600,
    )
    times = [float(t) for t in ELAPSED.findall(done.stderr)]
    if done.returncode != 0 or len(times) != runs:
        print("quiver scan failed:", done.stderr[-500:])
        return None
    return min(times)


def scan_duckdb(dsn, connections, runs):
    con = duckdb_connection(connections)
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        reader = con.execute(
            f"SELECT * FROM postgres_scan('{dsn}', 'public', 'lineitem')"
        ).fetch_record_batch(122880)
        rows = sum(batch.num_rows for batch in reader)
        samples.append(time.perf_counter() - started)
        assert rows == 6001215, rows
    return min(samples)


def scan_connectorx(dsn, connections, runs):
    import connectorx as cx

    parts = dsn_parts(dsn)
    uri = f"postgresql://{parts['user']}@localhost:{parts['port']}/{parts['dbname']}"
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        table = cx.read_sql(
            uri,
            "SELECT * FROM lineitem",
            partition_on="l_orderkey",
            partition_num=connections,
            return_type="arrow",
        )
        samples.append(time.perf_counter() - started)
        assert table.num_rows == 6001215, table.num_rows
        del table
    return min(samples)


# ------------------------------------------------ CPU accounting of a scan (client and server)
class CpuMeter:
    """CPU seconds a scan cost the client (this process and the processes it waited for: the
    quiver CLI, psql) and the server (the postmaster's backends, reaped or still running).

    On a machine where client and server share the cores the wall time is bounded below by
    their sum over the cores, so these say what a reader's decoding costs the scan. The server
    side needs the cluster on this machine, readable in /proc (as `postgres_setup.py` makes
    it); elsewhere it is None."""

    TICK = os.sysconf("SC_CLK_TCK")

    def __init__(self, dsn):
        self.postmaster = None
        try:
            out = subprocess.run(
                [*psql_base(dsn), "-A", "-t", "-c", "SHOW data_directory"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.strip()
            self.postmaster = int(pathlib.Path(out, "postmaster.pid").read_text().split()[0])
            self.server_seconds()
        except (OSError, ValueError, IndexError, subprocess.CalledProcessError):
            self.postmaster = None

    @staticmethod
    def _stat(pid):
        # The fields after the command name: state is 0, utime 11, stime 12, cutime 13, cstime 14.
        fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return fields

    def server_seconds(self):
        if self.postmaster is None:
            return None
        fields = self._stat(self.postmaster)
        ticks = sum(int(x) for x in fields[11:15])
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) == self.postmaster:
                continue
            try:
                child = self._stat(entry)
            except OSError:
                continue
            if int(child[1]) == self.postmaster:
                ticks += int(child[11]) + int(child[12])
        return ticks / self.TICK

    @staticmethod
    def client_seconds():
        import resource

        own = resource.getrusage(resource.RUSAGE_SELF)
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime

    def measure(self, fn, *args):
        """Runs fn(*args); returns (its result, client CPU s, server CPU s or None)."""
        client, server = self.client_seconds(), self.server_seconds()
        result = fn(*args)
        # Backends exit as their connections close; give the postmaster time to reap them.
        time.sleep(0.3)
        after = self.server_seconds()
        return (
            result,
            self.client_seconds() - client,
            None if server is None or after is None else after - server,
        )


def psql_base(dsn):
    parts = dsn_parts(dsn)
    return [
        psql_path(),
        "-X",
        "-q",
        "-h",
        parts["host"],
        "-p",
        parts["port"],
        "-U",
        parts["user"],
        "-d",
        parts["dbname"],
    ]


def psql_path():
    for candidate in [*sorted(glob.glob("/usr/lib/postgresql/*/bin/psql"), reverse=True), "psql"]:
        return candidate


def scan_floor(dsn, connections, runs):
    base = psql_base(dsn)
    pages = int(
        subprocess.run(
            [
                *base,
                "-A",
                "-t",
                "-c",
                "SELECT pg_relation_size('lineitem') / current_setting('block_size')::int",
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    step = math.ceil(pages / connections)
    commands = []
    for i in range(connections):
        low, high = i * step, (i + 1) * step
        cond = f"ctid >= '({low},0)'::tid" + (
            f" AND ctid < '({high},0)'::tid" if i + 1 < connections else ""
        )
        commands.append(
            [*base, "-c", f"COPY (SELECT * FROM lineitem WHERE {cond}) TO STDOUT (FORMAT binary)"]
        )
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        procs = [subprocess.Popen(c, stdout=subprocess.DEVNULL) for c in commands]
        for p in procs:
            assert p.wait() == 0
        samples.append(time.perf_counter() - started)
    return min(samples)


# ---------------------------------------------------------------- 2. TPC-H
def tpch_queries_and_answers():
    con = duckdb_connection(2)
    queries = [
        q for _, q in sorted(con.execute("SELECT query_nr, query FROM tpch_queries()").fetchall())
    ]
    answers = {
        nr: text
        for nr, text in con.execute(
            "SELECT query_nr, answer FROM tpch_answers() WHERE scale_factor = 1"
        ).fetchall()
    }
    return queries, answers


def cells(line: str):
    return [c.strip() for c in line.split("|")]


def same_answer(rows: list[list[str]], answer: str) -> bool:
    expected = [cells(line) for line in answer.strip().splitlines()[1:]]
    if len(rows) != len(expected):
        return False
    for got, want in zip(rows, expected):
        if len(got) != len(want):
            return False
        for g, w in zip(got, want):
            if g == w:
                continue
            try:
                if abs(float(g) - float(w)) > 0.01 + 1e-6 * abs(float(w)):
                    return False
            except ValueError:
                if g.strip() != w.strip():
                    return False
    return True


def run_tpch_quiver(dsn, queries, answers, threads, binary=None):
    binary = binary or quiver_binary()
    times, correct = [], []
    for number, query in queries:
        script = (
            f"ATTACH '{dsn}' AS tpch (TYPE postgres, READ_ONLY);\n"
            "SET datafusion.catalog.default_schema = 'tpch';\n" + query.strip().rstrip(";") + ";\n"
        )
        try:
            done = subprocess.run(
                [
                    binary,
                    "--no-progress",
                    "--threads",
                    str(threads),
                    "-f",
                    "TSV",
                    "--time",
                ],
                input=script,
                capture_output=True,
                text=True,
                timeout=TIMEOUT_S,
            )
        except subprocess.TimeoutExpired:
            print(f"  quiver Q{number}: timeout", flush=True)
            times.append(None)
            correct.append(False)
            continue
        elapsed = [float(t) for t in ELAPSED.findall(done.stderr)]
        if done.returncode != 0 or len(elapsed) != 3:
            print(f"  quiver Q{number}: failed: {done.stderr.strip()[-400:]}", flush=True)
            times.append(None)
            correct.append(False)
            continue
        rows = (
            [line.split("\t") for line in done.stdout.strip().splitlines()]
            if done.stdout.strip()
            else []
        )
        ok = same_answer(rows, answers[number])
        times.append(elapsed[2])
        correct.append(ok)
        print(f"  quiver Q{number}: {elapsed[2]:.3f} s{'' if ok else ' WRONG ANSWER'}", flush=True)
    return times, correct


def duckdb_tpch_connection(dsn, threads):
    con = duckdb_connection(threads)
    con.execute(f"ATTACH '{dsn}' AS tpch (TYPE postgres, READ_ONLY)")
    con.execute("USE tpch")
    return con


def run_tpch_duckdb(con, queries, answers):
    times, correct = [], []
    for number, query in queries:
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            started = time.perf_counter()
            future = pool.submit(lambda: con.execute(query).fetchall())
            try:
                rows = future.result(timeout=TIMEOUT_S)
                elapsed = time.perf_counter() - started
            except concurrent.futures.TimeoutError:
                con.interrupt()
                print(f"  duckdb Q{number}: timeout", flush=True)
                times.append(None)
                correct.append(False)
                continue
        text = [
            [("" if v is None else (f"{v:.2f}" if isinstance(v, float) else str(v))) for v in row]
            for row in rows
        ]
        ok = same_answer(text, answers[number])
        times.append(elapsed)
        correct.append(ok)
        print(
            f"  duckdb Q{number}: {elapsed:.3f} s{'' if ok else ' (answer differs in formatting or value)'}",
            flush=True,
        )
    return times, correct


def run_tpch_postgres(dsn, queries):
    parts = dsn_parts(dsn)
    base = [
        psql_path(),
        "-X",
        "-q",
        "-A",
        "-t",
        "-h",
        parts["host"],
        "-p",
        parts["port"],
        "-U",
        parts["user"],
        "-d",
        parts["dbname"],
        "-v",
        "ON_ERROR_STOP=1",
    ]
    times = []
    for number, query in queries:
        script = (
            f"SET statement_timeout = '{TIMEOUT_S}s';\n\\timing on\n{query.strip().rstrip(';')};\n"
        )
        done = subprocess.run(base, input=script, capture_output=True, text=True)
        ms = re.findall(r"Time: ([0-9.]+) ms", done.stdout)
        if done.returncode != 0 or not ms:
            print(
                f"  postgres Q{number}: timeout or error: {done.stderr.strip()[-200:]}", flush=True
            )
            times.append(None)
        else:
            times.append(float(ms[-1]) / 1000)
            print(f"  postgres Q{number}: {times[-1]:.3f} s", flush=True)
    return times


def fmt(value):
    return "timeout/failed" if value is None else f"{value:.2f}"


def fmt_cpu(value):
    return "-" if value is None else f"{value:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--dsn", default="host=/var/tmp/quiver-pg-bench port=54329 user=postgres dbname=tpch"
    )
    parser.add_argument("--connections", type=int, default=2)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--single-rounds",
        type=int,
        default=5,
        help="rounds of the floor and quiver with one connection, after the scan (0: none)",
    )
    parser.add_argument("--skip-scan", action="store_true")
    parser.add_argument("--skip-tpch", action="store_true")
    parser.add_argument("--queries", help="TPC-H query numbers to run, e.g. 17,18,21 (default all)")
    parser.add_argument("--peers", default="quiver,duckdb,postgres", help="TPC-H systems to run")
    parser.add_argument("--quiver", help="the quiver binary (default: see the module docstring)")
    parser.add_argument("--write", action="store_true", help="write results even for a subset")
    parser.add_argument(
        "--compare", help="a second quiver binary, run in turn with the first (an A/B column)"
    )
    args = parser.parse_args()
    global _BINARY
    source = args.quiver or quiver_binary()
    snapshot = tempfile.NamedTemporaryFile(prefix="quiver-bench-", delete=False)
    snapshot.close()
    shutil.copy2(source, snapshot.name)
    _BINARY = snapshot.name
    print(f"quiver binary: {source} (copied to {snapshot.name})", flush=True)
    global compare_binary
    if args.compare:
        other = tempfile.NamedTemporaryFile(prefix="quiver-bench-b-", delete=False)
        other.close()
        shutil.copy2(args.compare, other.name)
        compare_binary = other.name
    try:
        run(args, source)
    finally:
        os.unlink(snapshot.name)
        if compare_binary:
            os.unlink(compare_binary)


def scan_rounds(meter, readers, dsn, connections, rounds, label=""):
    """`rounds` scans by each of `readers` ((name, scan function) pairs) with `connections`
    connections, the readers taking turns round by round so that outside load falls on all of
    them alike; per reader, its runs' (wall, client CPU, server CPU)."""
    samples = {name: [] for name, _ in readers}
    for _ in range(rounds):
        for name, fn in readers:
            try:
                wall, client, server = meter.measure(fn, dsn, connections, 1)
            except Exception as error:  # a peer failing is a result, not a crash
                print(f"  {name}{label} failed: {error}", flush=True)
                continue
            if wall is not None:
                samples[name].append((wall, client, server))
            print(
                f"  {name}{label}: {fmt(wall)} s, client CPU {fmt_cpu(client)} s, "
                f"server CPU {fmt_cpu(server)} s",
                flush=True,
            )
    return samples


def single_connection(args, meter, results):
    """The floor and quiver with one connection each, round by round: one backend then
    leaves the client a core of its own, where with as many connections as cores the client's
    decoding takes its CPU from the backends'."""
    print("full scan of lineitem, 1 connection", flush=True)
    readers = [(FLOOR, scan_floor), ("quiver", scan_quiver)]
    samples = scan_rounds(meter, readers, args.dsn, 1, args.single_rounds, ", 1 connection")
    paired = paired_ratios(samples).get("quiver")
    results["scan_one_connection"] = {"rounds": samples, "paired": paired}
    if paired is None:
        return ["With one connection: quiver failed in a round; no ratio.", ""]

    def median_of(name, i):
        values = [run[i] for run in samples[name] if run[i] is not None]
        return statistics.median(values) if values else None

    return [
        f"With one connection (a core left for the client), {args.single_rounds} rounds: quiver "
        "against the floor's one COPY of the same round "
        + ", ".join(f"{r:.2f}" for r in paired["rounds"])
        + f"x (median {paired['median']:.2f}x); medians of the rounds: wall "
        f"{fmt(median_of(FLOOR, 0))} s against {fmt(median_of('quiver', 0))} s, client CPU "
        f"{fmt_cpu(median_of(FLOOR, 1))} s against {fmt_cpu(median_of('quiver', 1))} s, "
        f"server CPU {fmt_cpu(median_of(FLOOR, 2))} s against "
        f"{fmt_cpu(median_of('quiver', 2))} s.",
        "",
    ]


def run(args, source: str) -> None:
    peers = set(args.peers.split(","))
    results = {"connections": args.connections}
    lines = [
        f"Postgres scanner benchmarks (one run, {args.connections} connections/threads, "
        f"binary `{pathlib.Path(source).name}` from `{pathlib.Path(source).parent.name}`, "
        "copied before the run; the systems take turns query by query)",
        "",
    ]
    if not args.skip_scan:
        print("full scan of lineitem", flush=True)
        readers = [
            (FLOOR, scan_floor),
            ("quiver", scan_quiver),
            ("DuckDB 1.5.5 postgres_scanner", scan_duckdb),
            ("ConnectorX", scan_connectorx),
        ]
        if args.compare:
            readers.insert(
                2,
                (
                    f"quiver B ({args.compare})",
                    lambda dsn, n, runs: scan_quiver(dsn, n, runs, binary=compare_binary),
                ),
            )
        meter = CpuMeter(args.dsn)
        samples = scan_rounds(meter, readers, args.dsn, args.connections, args.runs)
        # Each reader's fastest run, with the CPU that run took.
        paired = paired_ratios(samples)
        results["scan_rounds"] = {name: [run[0] for run in runs] for name, runs in samples.items()}
        results["scan_paired"] = paired
        fastest = {
            name: min(values, key=lambda run: run[0]) if values else None
            for name, values in samples.items()
        }
        scan = {name: run[0] if run else None for name, run in fastest.items()}
        results["scan"] = scan
        results["scan_cpu"] = {
            name: {"client": run[1], "server": run[2]} if run else None
            for name, run in fastest.items()
        }
        floor = scan[FLOOR]
        duck = scan["DuckDB 1.5.5 postgres_scanner"]
        lines += [
            f"## Full scan of lineitem (6,001,215 rows) into Arrow, best of {args.runs}",
            "",
            "| reader | seconds | × floor | × DuckDB | client CPU s | server CPU s | cores busy |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        cores = os.cpu_count() or 1
        for name, value in scan.items():
            ratio_floor = f"{value / floor:.2f}" if value and floor else "-"
            ratio_duck = f"{value / duck:.2f}" if value and duck else "-"
            run = fastest[name]
            busy = (
                f"{(run[1] + run[2]) / run[0] / cores:.0%}" if run and run[2] is not None else "-"
            )
            lines.append(
                f"| {name} | {fmt(value)} | {ratio_floor} | {ratio_duck} | "
                f"{fmt_cpu(run[1] if run else None)} | {fmt_cpu(run[2] if run else None)} | "
                f"{busy} |"
            )
        lines += [
            "",
            f"CPU seconds of each reader's fastest run: the client's (the reader's process and "
            f"the processes it ran) and the Postgres backends'; cores busy = their sum over "
            f"the wall time and the machine's {cores} cores.",
            "",
        ]
        # Best of N pairs each reader's quietest moment, which on a shared VM may be a
        # different moment for each; a round's ratio compares runs a few seconds apart.
        for name, ratios in paired.items():
            lines.append(
                f"{name} against the floor run of the same round, round by round: "
                + ", ".join(f"{r:.2f}" for r in ratios["rounds"])
                + f"x (median {ratios['median']:.2f}x)."
            )
        lines.append("")
        if args.single_rounds > 0 and args.connections > 1:
            lines += single_connection(args, meter, results)
    if not args.skip_tpch:
        all_queries, answers = tpch_queries_and_answers()
        wanted = (
            {int(n) for n in args.queries.split(",")}
            if args.queries
            else set(range(1, len(all_queries) + 1))
        )
        queries = [(n, q) for n, q in enumerate(all_queries, start=1) if n in wanted]
        q_times, q_ok, b_times, b_ok, d_times, d_ok, p_times = [], [], [], [], [], [], []
        con = duckdb_tpch_connection(args.dsn, args.connections) if "duckdb" in peers else None
        # Peers take turns query by query, so load from outside the run (other builds on a
        # shared machine) falls on all of them alike; who goes first rotates, because the
        # first to run a query after another one is slower on this VM (up to 2x for Q13 and
        # Q18, for every build alike) and the ones after it find the server warm.
        runners = []
        if "quiver" in peers:
            runners.append(
                ("quiver", lambda one: run_tpch_quiver(args.dsn, [one], answers, args.connections))
            )
        if args.compare:
            runners.append(
                (
                    "compare",
                    lambda one: run_tpch_quiver(
                        args.dsn, [one], answers, args.connections, binary=compare_binary
                    ),
                )
            )
        if con is not None:
            runners.append(("duckdb", lambda one: run_tpch_duckdb(con, [one], answers)))
        if "postgres" in peers:
            runners.append(("postgres", lambda one: (run_tpch_postgres(args.dsn, [one]), [True])))
        for i, one in enumerate(queries):
            print(f"Q{one[0]}", flush=True)
            ran = {}
            for k in range(len(runners)):
                name, runner = runners[(i + k) % len(runners)]
                ran[name] = runner(one)
            t, ok = ran.get("quiver", ([None], [False]))
            q_times += t
            q_ok += ok
            if args.compare:
                t, ok = ran["compare"]
                b_times += t
                b_ok += ok
            t, ok = ran.get("duckdb", ([None], [False]))
            d_times += t
            d_ok += ok
            p_times += ran["postgres"][0] if "postgres" in ran else [None]
        results["tpch"] = {
            "queries": [n for n, _ in queries],
            "quiver": q_times,
            "quiver_correct": q_ok,
            "duckdb": d_times,
            "duckdb_correct": d_ok,
            "postgres": p_times,
        }
        if args.compare:
            results["tpch"]["compare"] = {"binary": args.compare, "times": b_times, "correct": b_ok}
        lines += [
            "## TPC-H SF1 over Postgres (60 s timeout per query)",
            "",
            "| query | quiver s | answer | DuckDB s | Postgres s |"
            + (" B s | B answer |" if args.compare else ""),
            "|---|---:|:---:|---:|---:|" + ("---:|:---:|" if args.compare else ""),
        ]
        for i, (number, _) in enumerate(queries):
            lines.append(
                f"| Q{number} | {fmt(q_times[i])} | {'ok' if q_ok[i] else 'WRONG/failed'} | "
                f"{fmt(d_times[i])} | {fmt(p_times[i])} |"
                + (
                    f" {fmt(b_times[i])} | {'ok' if b_ok[i] else 'WRONG/failed'} |"
                    if args.compare
                    else ""
                )
            )
        total = lambda ts: sum(t for t in ts if t is not None)
        lines += [
            "",
            f"Totals: quiver {total(q_times):.2f} s ({sum(t is None for t in q_times)} failed, "
            f"{sum(not ok for ok in q_ok)} not matching tpch_answers()), DuckDB {total(d_times):.2f} s "
            f"({sum(t is None for t in d_times)} failed), Postgres {total(p_times):.2f} s "
            f"({sum(t is None for t in p_times)} timed out)."
            + (f" B ({args.compare}): {total(b_times):.2f} s." if args.compare else ""),
        ]
        both = [i for i in range(len(queries)) if p_times[i] is not None and q_times[i] is not None]
        lines.append(
            f"On the {len(both)} queries Postgres finished: quiver {sum(q_times[i] for i in both):.2f} s, "
            f"Postgres {sum(p_times[i] for i in both):.2f} s."
        )
    print("\n".join(lines))
    partial = args.queries or args.skip_scan or args.skip_tpch
    if (partial or peers != {"quiver", "duckdb", "postgres"}) and not args.write:
        return
    out = HERE / "results"
    out.mkdir(exist_ok=True)
    (out / "postgres.md").write_text("\n".join(lines) + "\n")
    (out / "postgres.json").write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
