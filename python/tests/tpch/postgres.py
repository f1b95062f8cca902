"""A throwaway PostgreSQL cluster holding TPC-H with the specification's own DDL, and Postgres'
answers to the queries, for comparing quiver's scans of Postgres with Postgres itself.

The cluster lives in a private temp dir, listens on a Unix socket there only, and is stopped
and deleted by `Cluster.stop` — and, should this process die first, by a watchdog shell that
waits for it to exit. Postgres refuses to run as root, so as root the cluster belongs to the
user `postgres` and its tools run through `runuser`. Binaries are found as the Rust tests find
them (crates/quiver-postgres/tests/common/mod.rs): PATH, /usr/local/bin, /usr/lib/postgresql.

Each scale factor is a database `tpch_sf<scale>`: the tables of dss.ddl (TPC-H 3.0.1, with its
CHAR(n) columns: Postgres pads them with blanks, which quiver must not return), loaded from
tpchgen-cli's CSV with COPY, then the primary keys of dss.ri, an index for Postgres' own
runs of Q17 and Q20, and ANALYZE.
"""

from __future__ import annotations

import csv
import datetime
import glob
import io
import os
import pathlib
import shutil
import subprocess
import tempfile
from decimal import Decimal

from tpch.answers import Answer

# dss.ddl, as printed in the specification (clause 1.4) and shipped with dbgen.
DDL = """
CREATE TABLE nation (n_nationkey integer NOT NULL, n_name char(25) NOT NULL,
    n_regionkey integer NOT NULL, n_comment varchar(152));
CREATE TABLE region (r_regionkey integer NOT NULL, r_name char(25) NOT NULL,
    r_comment varchar(152));
CREATE TABLE part (p_partkey integer NOT NULL, p_name varchar(55) NOT NULL,
    p_mfgr char(25) NOT NULL, p_brand char(10) NOT NULL, p_type varchar(25) NOT NULL,
    p_size integer NOT NULL, p_container char(10) NOT NULL,
    p_retailprice decimal(15,2) NOT NULL, p_comment varchar(23) NOT NULL);
CREATE TABLE supplier (s_suppkey integer NOT NULL, s_name char(25) NOT NULL,
    s_address varchar(40) NOT NULL, s_nationkey integer NOT NULL, s_phone char(15) NOT NULL,
    s_acctbal decimal(15,2) NOT NULL, s_comment varchar(101) NOT NULL);
CREATE TABLE partsupp (ps_partkey integer NOT NULL, ps_suppkey integer NOT NULL,
    ps_availqty integer NOT NULL, ps_supplycost decimal(15,2) NOT NULL,
    ps_comment varchar(199) NOT NULL);
CREATE TABLE customer (c_custkey integer NOT NULL, c_name varchar(25) NOT NULL,
    c_address varchar(40) NOT NULL, c_nationkey integer NOT NULL, c_phone char(15) NOT NULL,
    c_acctbal decimal(15,2) NOT NULL, c_mktsegment char(10) NOT NULL,
    c_comment varchar(117) NOT NULL);
CREATE TABLE orders (o_orderkey integer NOT NULL, o_custkey integer NOT NULL,
    o_orderstatus char(1) NOT NULL, o_totalprice decimal(15,2) NOT NULL,
    o_orderdate date NOT NULL, o_orderpriority char(15) NOT NULL, o_clerk char(15) NOT NULL,
    o_shippriority integer NOT NULL, o_comment varchar(79) NOT NULL);
CREATE TABLE lineitem (l_orderkey integer NOT NULL, l_partkey integer NOT NULL,
    l_suppkey integer NOT NULL, l_linenumber integer NOT NULL,
    l_quantity decimal(15,2) NOT NULL, l_extendedprice decimal(15,2) NOT NULL,
    l_discount decimal(15,2) NOT NULL, l_tax decimal(15,2) NOT NULL,
    l_returnflag char(1) NOT NULL, l_linestatus char(1) NOT NULL, l_shipdate date NOT NULL,
    l_commitdate date NOT NULL, l_receiptdate date NOT NULL, l_shipinstruct char(25) NOT NULL,
    l_shipmode char(10) NOT NULL, l_comment varchar(44) NOT NULL);
"""

# The primary keys of dss.ri, added after the load (building an index once beats updating it
# row by row).
PRIMARY_KEYS = {
    "region": "r_regionkey",
    "nation": "n_nationkey",
    "part": "p_partkey",
    "supplier": "s_suppkey",
    "partsupp": "ps_partkey, ps_suppkey",
    "customer": "c_custkey",
    "orders": "o_orderkey",
    "lineitem": "l_orderkey, l_linenumber",
}

# An index on lineitem's foreign key to partsupp (dss.ri; the specification allows indexes on
# primary and foreign keys): Postgres runs the correlated subqueries of Q17 and Q20 as one scan of lineitem per
# outer row, a minute at scale factor 0.1 without it, a second with it. quiver does not use it.
FOREIGN_KEY_INDEX = "CREATE INDEX lineitem_partsupp ON lineitem (l_partkey, l_suppkey);\n"

# Written between the column types and the rows of an answer (see `Cluster.answer`).
_SEPARATOR = "-- quiver tpch: rows follow --"
_PORT = 5432  # Only names the socket file: the socket's directory is private to the cluster.


def bin_dir() -> pathlib.Path | None:
    """The directory with initdb and pg_ctl, or None when PostgreSQL is not installed."""
    candidates = [pathlib.Path(p) for p in os.environ.get("PATH", "").split(os.pathsep) if p]
    candidates.append(pathlib.Path("/usr/local/bin"))
    candidates += [pathlib.Path(p) for p in sorted(glob.glob("/usr/lib/postgresql/*/bin"))[::-1]]
    for directory in candidates:
        if (directory / "initdb").is_file() and (directory / "pg_ctl").is_file():
            # /usr/local/bin holds symlinks: psql lives beside their targets.
            return (directory / "initdb").resolve().parent
    return None


class Cluster:
    """A running private cluster (see the module docstring)."""

    def __init__(self, bindir: pathlib.Path) -> None:
        self.bindir = bindir
        self.as_root = os.geteuid() == 0
        self.root = pathlib.Path(tempfile.mkdtemp(prefix="quiver-tpch-pg-"))
        self.loaded: dict[str, str] = {}
        if self.as_root:
            shutil.chown(self.root, "postgres", "postgres")
        self._spawn_watchdog()
        try:
            self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> None:
        data = str(self.root / "data")
        self._tool(
            "initdb",
            ["-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync"],
        )
        options = (
            f"-p {_PORT} -k {self.root} -c listen_addresses='' -c fsync=off "
            "-c synchronous_commit=off -c full_page_writes=off -c jit=off "
            "-c shared_buffers=256MB -c work_mem=64MB"
        )
        log = str(self.root / "server.log")
        self._tool("pg_ctl", ["-D", data, "-o", options, "-l", log, "-w", "start"])

    def _command(self, tool: str, args: list[str]) -> list[str]:
        path = str(self.bindir / tool)
        return ["runuser", "-u", "postgres", "--", path, *args] if self.as_root else [path, *args]

    def _tool(self, tool: str, args: list[str]) -> None:
        done = subprocess.run(self._command(tool, args), capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"{tool} failed: {done.stdout}\n{done.stderr}")

    def _spawn_watchdog(self) -> None:
        stop = " ".join(
            self._command("pg_ctl", ["-D", str(self.root / "data"), "-m", "immediate", "stop"])
        )
        script = (
            f"while kill -0 {os.getpid()} 2>/dev/null; do sleep 0.5; done; "
            f"{stop} >/dev/null 2>&1; rm -rf {self.root}"
        )
        subprocess.Popen(
            ["sh", "-c", script],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )

    def stop(self) -> None:
        data = str(self.root / "data")
        subprocess.run(
            self._command("pg_ctl", ["-D", data, "-m", "immediate", "stop"]), capture_output=True
        )
        shutil.rmtree(self.root, ignore_errors=True)

    def dsn(self, database: str) -> str:
        return f"host={self.root} port={_PORT} user=postgres dbname={database}"

    def psql(self, database: str, script: str) -> str:
        """Runs ``script`` (SQL and psql meta-commands) and returns its unaligned output."""
        command = [str(self.bindir / "psql"), "-X", "-q", "-A", "-t", "-F", "\x1f"]
        command += ["-v", "ON_ERROR_STOP=1", "-h", str(self.root), "-p", str(_PORT)]
        command += ["-U", "postgres", "-d", database, "-f", "-"]
        done = subprocess.run(command, input=script, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"psql on {database} failed: {done.stderr.strip()}")
        return done.stdout

    def load_tpch(self, scale: str, csv_files: dict[str, pathlib.Path]) -> str:
        """The name of the database with TPC-H at ``scale``, loading it the first time."""
        if scale in self.loaded:
            return self.loaded[scale]
        database = "tpch_sf" + scale.replace(".", "_")
        self.psql("postgres", f"CREATE DATABASE {database};")
        # \copy reads the files in this process: the server's user may not see our cache.
        copies = "".join(
            f"\\copy {table} FROM '{path}' (FORMAT csv, HEADER true)\n"
            for table, path in csv_files.items()
        )
        keys = "".join(
            f"ALTER TABLE {table} ADD PRIMARY KEY ({columns});\n"
            for table, columns in PRIMARY_KEYS.items()
        )
        self.psql(database, DDL + copies + keys + FOREIGN_KEY_INDEX + "ANALYZE;\n")
        self.loaded[scale] = database
        return database

    def answer(self, database: str, sql: str) -> Answer:
        """Postgres' answer to ``sql``, typed after its result's column types."""
        query = sql.strip().rstrip(";")
        output = self.psql(
            database,
            f"{query}\n\\gdesc\n\\echo '{_SEPARATOR}'\n"
            f"COPY ({query}) TO STDOUT (FORMAT csv, NULL '\\N');\n",
        )
        described, _, data = output.partition(_SEPARATOR + "\n")
        columns, types = [], []
        for line in described.splitlines():
            name, type_name = line.split("\x1f")
            columns.append(name)
            types.append(type_name)
        rows = [
            tuple(_parse(value, t) for value, t in zip(record, types))
            for record in csv.reader(io.StringIO(data))
        ]
        return Answer(columns, rows)


def _parse(value: str, type_name: str):
    if value == "\\N":
        return None
    if type_name in ("integer", "bigint", "smallint"):
        return int(value)
    if type_name.startswith("numeric"):
        return Decimal(value)
    if type_name in ("double precision", "real"):
        return float(value)
    if type_name == "date":
        return datetime.date.fromisoformat(value)
    if type_name.startswith("character(") or type_name == "bpchar":
        # CHAR(n) compares and casts to text without its padding (Postgres manual 8.3).
        return value.rstrip(" ")
    return value
