"""Failures that are not quiver regressions: DataFusion bugs quiver inherits, and quiver bugs
already being fixed. Each entry says why; prefer changing the generator so it does not produce
the construct (``sqlfuzz.gen`` and ``sqlfuzz.data`` say what they leave out and why) over
adding an entry here. The F-numbers refer to the findings file of the fuzzing work
(minimal reproductions, both answers, triage).
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Allowed:
    message: str  # a regular expression searched in the failure's message (quiver's error)
    reason: str
    sql: str = ""  # and, if given, one searched in the failing SQL
    # Only when stock DataFusion planning (`quiver.optimizations = false`) fails the same way,
    # so a quiver rule that starts failing like a DataFusion bug still fails the run.
    shared_only: bool = True

    def matches(self, message: str, sql: str, shared: bool | None) -> bool:
        if self.shared_only and shared is False:
            return False
        if re.search(self.message, message) is None:
            return False
        return not self.sql or re.search(self.sql, sql) is not None


# DataFusion bugs: quiver raises where DuckDB answers, and stock DataFusion raises the same.
ALLOWLIST: tuple[Allowed, ...] = (
    Allowed(
        r"SanityCheckPlan: .*PARTITION BY \[CASE WHEN",
        "F6: DataFusion's sanity check rejects a window partitioned by a CASE over a function "
        "(apache/datafusion#20194 family)",
    ),
    Allowed(
        r"Can not create index of type Int8 from value",
        "F7: DataFusion's window functions over Dictionary(Int8, _) fail past 127 rows "
        "(pandas categoricals have int8 codes)",
    ),
    Allowed(
        r"Physical input schema should be the same as the one converted from logical input "
        r"schema(.|\n)*field nullability",
        "F9: DataFusion's physical plan gets a nullability its logical plan did not "
        "(apache/datafusion#15394 family)",
    ),
    Allowed(
        r"Schema contains duplicate unqualified field name \"\w+\(",
        "F11: DataFusion leaves casts out of names, so `avg(x)` and `avg(CAST(x AS DOUBLE))` "
        "collide in one aggregate",
    ),
    Allowed(
        r"Invalid comparison operation: Decimal128",
        "F13: DataFusion's single_distinct_aggregation_to_group_by widens a SUM of decimals "
        "beside a DISTINCT aggregate past its declared type",
        sql=r"\(DISTINCT ",
    ),
    Allowed(
        r"Optimizer rule '\w+' failed: Projections require unique expression names",
        "F14: DataFusion's rules (single_distinct_aggregation_to_group_by, "
        "eliminate_group_by_constant) name `x` and `CAST(x AS ...)` alike under GROUP BY",
    ),
)

# quiver bugs with a fix under way: a hit is counted and reported but does not fail the run.
# Remove an entry when its fix lands, so a regression fails again.
KNOWN_BUGS: tuple[Allowed, ...] = ()


def allowed(message: str, sql: str, shared: bool | None) -> Allowed | None:
    """The entry allowing a failure; `shared`: whether it fails the same with quiver's
    optimizations off (None: cannot tell)."""
    for entry in ALLOWLIST:
        if entry.matches(message, sql, shared):
            return entry
    return None


def known_bug(message: str, sql: str = "") -> Allowed | None:
    for entry in KNOWN_BUGS:
        if entry.matches(message, sql, None):
            return entry
    return None
