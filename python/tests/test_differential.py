"""Random queries: quiver against DuckDB, and against itself (TLP, NoREC, optimizations off).

A fixed-seed slice of the fuzzer in ``sqlfuzz`` (long runs: ``python -m sqlfuzz``). Each test
lists every failing seed with its SQL and both answers; with ``QUIVER_FUZZ_OUT=DIR`` set, each
failure is also minimised and written to DIR as an ``.slt`` case.
"""

import os
import warnings

import pyarrow as pa
import pytest
from sqlfuzz.compare import compare
from sqlfuzz.runner import OUT_ENV, Runner

# Seeds per check: about 6,300 queries in all (a differential or optoff case runs 2, a NoREC
# case 2, a TLP case 3 to 5), about two minutes on the 2-core CI machine. A failure is run
# again with quiver's optimizations off, so failing cases cost more.
SLICE = {
    "differential": range(0, 1500),
    "tlp": range(0, 300),
    "norec": range(0, 400),
    "optoff": range(0, 800),
}


@pytest.fixture(scope="module")
def runner(tmp_path_factory):
    return Runner(data_seed=0, folder=str(tmp_path_factory.mktemp("sqlfuzz")))


def run_slice(runner: Runner, check: str) -> None:
    report = runner.run(check, SLICE[check])
    print(report.summary())
    for reason, hits in report.known.items():
        warnings.warn(f"{check}: known quiver bug hit {hits} times: {reason}", stacklevel=2)
    if not report.failures:
        return
    out = os.environ.get(OUT_ENV)
    messages = []
    for case, outcome in report.failures:
        messages.append(runner.describe(case, outcome))
        if out:
            try:
                small, small_outcome, tables = runner.minimise(case, outcome, seconds=30)
                path = runner.write(out, small, small_outcome, tables)
            except Exception as error:  # the failure above is still reported
                messages.append(f"  could not minimise or write it: {error!r}")
            else:
                messages.append(f"  written to {path}")
    total = len(SLICE[check])
    pytest.fail(
        f"{len(report.failures)} of {total} {check} cases failed:\n\n" + "\n\n".join(messages),
        pytrace=False,
    )


def test_quiver_answers_random_queries_like_duckdb(runner):
    run_slice(runner, "differential")


def test_where_partitions_recompose_every_query(runner):
    run_slice(runner, "tlp")


def test_count_where_matches_sum_of_case(runner):
    run_slice(runner, "norec")


def test_optimizations_do_not_change_answers(runner):
    if not runner.engines.optimizations_off:
        pytest.skip("quiver has no `SET quiver.optimizations = false` yet")
    run_slice(runner, "optoff")


# --- the comparison itself ---------------------------------------------------------------------


def test_comparison_equates_nan_signed_zeros_nulls_and_types():
    left = pa.table(
        {
            "a": pa.array([1, None, 3], pa.int8()),
            "f": pa.array([float("nan"), -0.0, 1.0]),
            "s": pa.array(["x", "", None]).dictionary_encode(),
        }
    )
    # The same rows in another order, as another engine might type and round them.
    right = pa.table(
        {
            "a": pa.array([3, 1, None], pa.decimal128(38, 0)),
            "f": pa.array([1.0 + 1e-12, float("nan"), 0.0]),
            "s": pa.array([None, "x", ""], pa.string_view()),
        }
    )
    assert compare(left, right, ordered=False).equal
    assert not compare(left, right, ordered=True).equal
    changed = right.set_column(1, "f", pa.array([1.0, float("nan"), 0.5]))
    assert not compare(left, changed, ordered=False).equal


def test_comparison_reports_a_missing_row():
    left = pa.table({"k": [1, 2, 2]})
    right = pa.table({"k": [1, 2]})
    verdict = compare(left, right, ordered=False)
    assert not verdict.equal
    assert "3 rows against 2" in verdict.reason
