#!/usr/bin/env python3
"""A local PostgreSQL with TPC-H for the Postgres-scanner benchmarks (`postgres_bench.py`).

    python benchmarks/postgres_setup.py [--dir /var/tmp/quiver-pg-bench] [--sf 1] [--port 54329]

Creates (once) a private cluster in --dir, starts it on a Unix socket in that directory, and
loads TPC-H at scale factor --sf into the database `tpch` (data from DuckDB's `dbgen`, the
same generator as `tpchgen-cli`, written to CSV and loaded with COPY) with the specification's
DDL (`char(n)` columns), primary keys and ANALYZE, as a plain TPC-H set-up on Postgres. As root, the cluster belongs to `postgres`.
Prints the connection string.
"""

import argparse
import glob
import os
import pathlib
import shutil
import subprocess
import sys

# The TPC-H specification's own DDL (dss.ddl): CHAR(n) where it says CHAR, blank-padded by
# Postgres, as every TPC-H set-up on Postgres has them; primary keys as in dss.ri.
TABLES = {
    "region": "r_regionkey integer primary key, r_name char(25), r_comment varchar(152)",
    "nation": "n_nationkey integer primary key, n_name char(25), n_regionkey integer, n_comment varchar(152)",
    "supplier": "s_suppkey integer primary key, s_name char(25), s_address varchar(40), s_nationkey integer, "
    "s_phone char(15), s_acctbal decimal(15,2), s_comment varchar(101)",
    "customer": "c_custkey integer primary key, c_name varchar(25), c_address varchar(40), c_nationkey integer, "
    "c_phone char(15), c_acctbal decimal(15,2), c_mktsegment char(10), c_comment varchar(117)",
    "part": "p_partkey integer primary key, p_name varchar(55), p_mfgr char(25), p_brand char(10), "
    "p_type varchar(25), p_size integer, p_container char(10), p_retailprice decimal(15,2), p_comment varchar(23)",
    "partsupp": "ps_partkey integer, ps_suppkey integer, ps_availqty integer, ps_supplycost decimal(15,2), "
    "ps_comment varchar(199), primary key (ps_partkey, ps_suppkey)",
    "orders": "o_orderkey integer primary key, o_custkey integer, o_orderstatus char(1), o_totalprice decimal(15,2), "
    "o_orderdate date, o_orderpriority char(15), o_clerk char(15), o_shippriority integer, o_comment varchar(79)",
    "lineitem": "l_orderkey integer, l_partkey integer, l_suppkey integer, l_linenumber integer, "
    "l_quantity decimal(15,2), l_extendedprice decimal(15,2), l_discount decimal(15,2), l_tax decimal(15,2), "
    "l_returnflag char(1), l_linestatus char(1), l_shipdate date, l_commitdate date, l_receiptdate date, "
    "l_shipinstruct char(25), l_shipmode char(10), l_comment varchar(44), primary key (l_orderkey, l_linenumber)",
}


def bin_dir() -> pathlib.Path:
    for candidate in [
        shutil.which("initdb"),
        *sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), reverse=True),
    ]:
        if candidate:
            return pathlib.Path(candidate).resolve().parent
    sys.exit("initdb not found: install postgresql (make postgres)")


def as_owner(args: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *args] if os.geteuid() == 0 else args


def psql(bindir, sock, port, db, sql):
    return subprocess.run(
        [
            str(bindir / "psql"),
            "-X",
            "-q",
            "-A",
            "-t",
            "-v",
            "ON_ERROR_STOP=1",
            "-h",
            sock,
            "-p",
            str(port),
            "-U",
            "postgres",
            "-d",
            db,
            "-c",
            sql,
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dir", default="/var/tmp/quiver-pg-bench")
    parser.add_argument("--sf", type=float, default=1)
    parser.add_argument("--port", type=int, default=54329)
    args = parser.parse_args()
    bindir = bin_dir()
    root = pathlib.Path(args.dir)
    data = root / "data"
    sock = str(root)
    if not data.exists():
        root.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            shutil.chown(root, "postgres", "postgres")
            root.chmod(0o755)
        subprocess.run(
            as_owner(
                [
                    str(bindir / "initdb"),
                    "-D",
                    str(data),
                    "-U",
                    "postgres",
                    "-A",
                    "trust",
                    "-E",
                    "UTF8",
                    "--locale=C",
                    "--no-sync",
                ]
            ),
            check=True,
            capture_output=True,
        )
    status = subprocess.run(
        as_owner([str(bindir / "pg_ctl"), "-D", str(data), "status"]), capture_output=True
    )
    if status.returncode != 0:
        options = (
            f"-p {args.port} -k {sock} -c listen_addresses='localhost' -c shared_buffers=2GB "
            "-c work_mem=64MB -c max_connections=100 -c fsync=off -c synchronous_commit=off "
            "-c max_parallel_workers_per_gather=2 -c jit=off"
        )
        subprocess.run(
            as_owner(
                [
                    str(bindir / "pg_ctl"),
                    "-D",
                    str(data),
                    "-o",
                    options,
                    "-l",
                    str(root / "server.log"),
                    "-w",
                    "start",
                ]
            ),
            check=True,
        )
    exists = psql(
        bindir,
        sock,
        args.port,
        "postgres",
        "SELECT count(*) FROM pg_database WHERE datname = 'tpch'",
    )
    if exists == "0":
        psql(bindir, sock, args.port, "postgres", "CREATE DATABASE tpch")
    # Loaded, and with the standard DDL (an older set-up of this script used varchar(n)).
    loaded = psql(
        bindir,
        sock,
        args.port,
        "tpch",
        "SELECT count(*) FROM information_schema.columns WHERE table_name = 'customer' "
        "AND column_name = 'c_mktsegment' AND data_type = 'character'",
    )
    if loaded == "0":
        import duckdb

        con = duckdb.connect(config={"allow_unsigned_extensions": "true"})
        ext = glob.glob(
            os.path.join(
                os.path.dirname(duckdb.__file__),
                "..",
                "duckdb_extension_tpch",
                "extensions",
                "*",
                "tpch.duckdb_extension",
            )
        )
        con.execute(f"LOAD '{ext[0]}'")
        con.execute(f"CALL dbgen(sf={args.sf})")
        csv_dir = root / "csv"
        csv_dir.mkdir(exist_ok=True)
        for table, columns in TABLES.items():
            path = csv_dir / f"{table}.csv"
            con.execute(f"COPY {table} TO '{path}' (FORMAT csv, HEADER false)")
            os.chmod(path, 0o644)
            psql(
                bindir,
                sock,
                args.port,
                "tpch",
                f"DROP TABLE IF EXISTS {table}; CREATE TABLE {table} ({columns})",
            )
            psql(bindir, sock, args.port, "tpch", f"COPY {table} FROM '{path}' (FORMAT csv)")
            print(
                f"loaded {table}: {psql(bindir, sock, args.port, 'tpch', f'SELECT count(*) FROM {table}')} rows"
            )
        psql(bindir, sock, args.port, "tpch", "VACUUM ANALYZE")
        shutil.rmtree(csv_dir)
    print(f"host={sock} port={args.port} user=postgres dbname=tpch")


if __name__ == "__main__":
    main()
