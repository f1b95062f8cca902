"""TPC-H tables from `tpchgen-cli` (dbgen's output, byte for byte), generated once per scale
factor into a cache directory that later runs reuse.

The cache is ``$QUIVER_TPCH_CACHE`` or ``~/.cache/quiver/tpch``, one folder per scale factor
and format: ``sf0.1/parquet/lineitem.parquet``, ``sf0.1/csv/lineitem.csv``. A folder is
written under a temporary name and renamed when complete, so an interrupted run leaves nothing
that a later run would take for a finished one.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

TABLES = ("region", "nation", "supplier", "customer", "part", "partsupp", "orders", "lineitem")


def cache_root() -> pathlib.Path:
    configured = os.environ.get("QUIVER_TPCH_CACHE")
    if configured:
        return pathlib.Path(configured)
    return pathlib.Path.home() / ".cache" / "quiver" / "tpch"


def _tpchgen() -> str:
    # The venv's console script sits next to its interpreter; PATH is the fallback.
    beside = pathlib.Path(sys.executable).with_name("tpchgen-cli")
    if beside.is_file():
        return str(beside)
    found = shutil.which("tpchgen-cli")
    if found is None:
        raise RuntimeError("tpchgen-cli not found: `make venv` installs it (requirements-dev.txt)")
    return found


def tables(scale: str, fmt: str) -> dict[str, pathlib.Path]:
    """The path of each table at scale factor ``scale`` (e.g. "0.01") in ``fmt`` ("parquet"
    or "csv", the latter with a header line), generating them on first use."""
    folder = cache_root() / f"sf{scale}" / fmt
    if not _complete(folder, fmt):
        _generate(scale, fmt, folder)
    return {table: folder / f"{table}.{fmt}" for table in TABLES}


def _complete(folder: pathlib.Path, fmt: str) -> bool:
    return all((folder / f"{table}.{fmt}").is_file() for table in TABLES)


def _generate(scale: str, fmt: str, folder: pathlib.Path) -> None:
    folder.parent.mkdir(parents=True, exist_ok=True)
    scratch = pathlib.Path(tempfile.mkdtemp(prefix=f".{fmt}-", dir=folder.parent))
    try:
        subprocess.run(
            [_tpchgen(), fmt, "--scale-factor", scale, "--output-dir", str(scratch), "--quiet"],
            check=True,
            capture_output=True,
            text=True,
        )
        if folder.exists() and not _complete(folder, fmt):
            # Not one of ours (each run renames a finished folder): a hand-edited cache.
            shutil.rmtree(folder)
        try:
            os.rename(scratch, folder)
        except OSError:
            # Another run finished the same folder meanwhile: the same bytes, keep theirs.
            if not _complete(folder, fmt):
                raise
    except subprocess.CalledProcessError as e:
        raise RuntimeError(f"tpchgen-cli {fmt} -s {scale} failed: {e.stderr.strip()}") from e
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
