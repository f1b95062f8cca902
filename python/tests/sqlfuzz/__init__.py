"""A random-query harness that checks quiver against DuckDB and against itself.

Three kinds of check run on the same generated data (:mod:`sqlfuzz.data`):

* **differential**: a random query (:mod:`sqlfuzz.gen`) runs on DuckDB, the reference, and on
  quiver over the same rows read from a pandas DataFrame, a Parquet file or a quiver table;
  the answers are compared as multisets of rows (:mod:`sqlfuzz.compare`). Constructs where the
  two dialects legitimately differ are not generated (each place says why) or are listed in
  :mod:`sqlfuzz.allowlist`.
* **TLP** and **NoREC** (:mod:`sqlfuzz.oracles`): reference-free checks on quiver alone —
  Rigger and Su's ternary logic partitioning (OOPSLA 2020) and non-optimizing reference engine
  construction (ESEC/FSE 2020).
* **optimizations off**: quiver against itself with ``SET quiver.optimizations = false``
  (stock DataFusion planning), once that setting exists.

Entry points: ``python/tests/test_differential.py`` (a fixed-seed slice run by pytest) and
``python -m sqlfuzz`` (long runs over new seeds that write each failure, minimised, as an
``.slt`` case; see :mod:`sqlfuzz.__main__`).
"""
