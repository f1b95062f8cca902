"""The TPC-H correctness harness of test_tpch.py: the 22 queries (queries/qNN.sql), the data
(data.py), answers and their comparison (answers.py), a private PostgreSQL (postgres.py).

The queries are the specification's functional query definitions (TPC-H 3.0.1, clause 2.4)
with the qualification substitution parameters, in the standard SQL that quiver, DuckDB and
Postgres all run: date arithmetic as `date '1994-01-01' + interval '1' year`, as written in the
specification. Each file's header says where it departs from the specification's text (Q1's
interval precision, Q15's view as a WITH clause). Over the same data they give DuckDB's
answers to its own `tpch_queries()`, which fold the date arithmetic into constants.
"""

from __future__ import annotations

import pathlib

QUERY_NUMBERS = tuple(range(1, 23))
_QUERIES = pathlib.Path(__file__).with_name("queries")


def query(number: int) -> str:
    """The text of TPC-H query ``number`` (header comment included)."""
    return (_QUERIES / f"q{number:02d}.sql").read_text()
