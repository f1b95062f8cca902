"""Runs checks over seeds, keeps the failures, and writes each (minimised) as an ``.slt`` case."""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field

from sqlfuzz import slt
from sqlfuzz.data import Profile, build_tables
from sqlfuzz.oracles import CHECKS, Case, Harness, Outcome, describe
from sqlfuzz.shrink import shrink, shrink_rows, tables_of
from sqlfuzz.sources import Engines

# Where failures are written as .slt cases (the long-run script's --out sets it too).
OUT_ENV = "QUIVER_FUZZ_OUT"


@dataclass
class Report:
    counts: Counter = field(default_factory=Counter)  # (check, status) -> cases
    failures: list = field(default_factory=list)  # (case, outcome)
    known: Counter = field(default_factory=Counter)  # known bug -> hits
    skipped: Counter = field(default_factory=Counter)  # reason -> cases
    seconds: Counter = field(default_factory=Counter)  # check -> seconds
    queries: Counter = field(default_factory=Counter)  # check -> statements run

    def summary(self) -> str:
        lines = []
        for check in CHECKS:
            statuses = {s: n for (c, s), n in self.counts.items() if c == check}
            if statuses:
                total = sum(statuses.values())
                parts = ", ".join(f"{n} {s}" for s, n in sorted(statuses.items()))
                lines.append(
                    f"{check}: {total} cases, {self.queries[check]} queries in "
                    f"{self.seconds[check]:.1f} s ({parts})"
                )
        shared = sum(1 for _, o in self.failures if o.shared)
        if shared:
            lines.append(f"{shared} of the failures also fail with quiver.optimizations = false")
        for reason, n in self.known.most_common():
            lines.append(f"known bug hit {n}x: {reason}")
        return "\n".join(lines)


def shape(sql: str) -> str:
    """A query with its literals and aliases taken out, to tell failures apart."""
    sql = re.sub(r"'(?:[^']|'')*'", "?", sql)
    sql = re.sub(r"\b\d+(\.\d+)?\b", "?", sql)
    return re.sub(r"\b(t|s|d|u)\d+\b", "x", sql)


class Runner:
    def __init__(self, data_seed: int = 0, folder: str | None = None, sizes=None) -> None:
        self.folder = folder or tempfile.mkdtemp(prefix="sqlfuzz-")
        tables = build_tables(data_seed, sizes)
        self.profile = Profile.of(tables, data_seed)
        self.engines = Engines(tables, os.path.join(self.folder, "data"))
        self.harness = Harness(self.engines, self.profile)

    def run(
        self, check: str, seeds, report: Report | None = None, deadline: float | None = None
    ) -> Report:
        report = report or Report()
        start = time.monotonic()
        queries = self.harness.queries
        for seed in seeds:
            if deadline is not None and time.monotonic() >= deadline:
                break
            case = self.harness.make(check, seed)
            try:
                outcome = self.harness.run(case)
            except Exception as error:  # the harness's own bug: report it, keep going
                outcome = Outcome(
                    "fail", f"the harness raised {error!r}", f"harness: {type(error).__name__}"
                )
            report.counts[(check, outcome.status)] += 1
            if outcome.status == "fail":
                report.failures.append((case, outcome))
            elif outcome.status == "known":
                report.known[outcome.message] += 1
            elif outcome.status == "skip":
                report.skipped[outcome.message.splitlines()[0][:120]] += 1
        report.seconds[check] += time.monotonic() - start
        report.queries[check] += self.harness.queries - queries
        return report

    def describe(self, case: Case, outcome: Outcome) -> str:
        return describe(self.engines, case, outcome)

    def minimise(self, case: Case, outcome: Outcome, seconds: float = 60.0) -> tuple:
        """(case, outcome, tables): the smallest case found, and the rows it needs."""
        small, small_outcome = shrink(self.harness, case, outcome, seconds)
        names = tables_of(small)
        tables = {n: self.engines.tables[n] for n in names}
        rows, rows_outcome = shrink_rows(self.harness, small, small_outcome, seconds / 2)
        if rows is not None:
            tables, small_outcome = rows, rows_outcome
        return small, small_outcome, tables

    def culprits(self, case: Case, outcome: Outcome) -> list[str]:
        if outcome.shared or not self.engines.optimizations_off:
            return []
        try:
            return self.harness.culprits(case, outcome)
        except Exception:
            return []  # no per-layer switches in this build

    def write(self, folder: str, case: Case, outcome: Outcome, tables: dict) -> str:
        """Writes the case as `<folder>/<check>_<seed>.slt`, answered by both engines over
        the case's (possibly reduced) tables."""
        stem = f"{case.check}_{case.seed}"
        scratch = tempfile.mkdtemp(prefix="sqlfuzz-write-")
        engines = Engines(tables, scratch, (2,))

        def reference(sql: str):
            if case.check == "optoff":
                return engines.run_quiver_off(sql, "table", 0)
            return engines.run_duck(sql)

        def answer(sql: str):
            return engines.run_quiver(sql, "table")

        try:
            return slt.write_case(folder, stem, case, outcome, tables, reference, answer)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
