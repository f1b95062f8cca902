"""The checks: a case is made from a seed, run, and judged; a failing case can be run again
(while :mod:`sqlfuzz.shrink` makes it smaller) and gives the same signature while it fails the
same way.

* ``differential``: quiver against DuckDB on a query of the DuckDB-safe generator.
* ``tlp``: ternary logic partitioning (Rigger and Su, OOPSLA 2020). The rows of ``Q`` are the
  rows of ``Q WHERE p``, ``Q WHERE NOT p`` and ``Q WHERE p IS NULL`` together — also for
  DISTINCT (their UNION), GROUP BY (the groups' aggregates recomposed: counts and sums summed,
  minima of minima, maxima of maxima) and HAVING (partitioning the HAVING predicate).
* ``norec``: non-optimizing reference engine construction (Rigger and Su, ESEC/FSE 2020).
  ``SELECT count(*) FROM t WHERE p`` counts the rows where
  ``sum(CASE WHEN p THEN 1 ELSE 0 END)`` is 1, which no optimizer can rewrite as a filter.
* ``optoff``: quiver against itself with ``SET quiver.optimizations = false``.

TLP, NoREC and optoff run on quiver alone, so they use the full generator (``duck=False``).
"""

from __future__ import annotations

import random
import re
import signal
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

import duckdb
import pyarrow as pa
import quiver

from sqlfuzz import allowlist
from sqlfuzz.compare import as_rows, compare, contains
from sqlfuzz.data import Profile
from sqlfuzz.gen import Generator
from sqlfuzz.nodes import Derived, Expr, Item, Select, SetOp, Table
from sqlfuzz.sources import SOURCES, Engines

CHECKS = ("differential", "tlp", "norec", "optoff")
TIMEOUT = 30.0


class Timeout(Exception):
    pass


@contextmanager
def deadline(seconds: float):
    """Raises Timeout in the main thread after `seconds`: both engines poll for signals while a
    query runs, so a runaway query is cancelled rather than waited for."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(signum, frame):
        raise Timeout(f"query ran longer than {seconds:.0f} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@dataclass(frozen=True)
class Case:
    check: str
    seed: int
    body: Any  # a query (differential, optoff), a TlpBody or a NorecBody
    source: str
    connection: int


@dataclass(frozen=True)
class TlpBody:
    mode: str  # where, union, distinct, aggregate, aggregate_sql, having
    base: Select
    p: Expr


@dataclass(frozen=True)
class NorecBody:
    mode: str  # case, istrue, grouped
    source: Any
    p: Expr
    key: Expr | None = None


@dataclass
class Outcome:
    status: str  # ok, skip, fail, known
    message: str = ""
    signature: str = ""
    sql: list = field(default_factory=list)
    expected: list | None = None
    got: list | None = None
    shared: bool = False  # fails the same with quiver.optimizations = false


def error_signature(error: BaseException) -> str:
    """An error's kind and first line with the particulars (numbers, names) taken out."""
    text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    text = re.sub(r"\"[^\"]*\"|'[^']*'|`[^`]*`", "…", text)
    text = re.sub(r"\d+", "N", text)
    return f"{type(error).__name__}: {text[:160]}"


class Harness:
    """Makes and runs cases against one set of engines."""

    def __init__(self, engines: Engines, profile: Profile, timeout: float = TIMEOUT) -> None:
        self.engines = engines
        self.profile = profile
        self.timeout = timeout
        # Run quiver's side with its optimizations off (to tell quiver's bugs from DataFusion's).
        self.off = False
        self.queries = 0  # statements run, on either engine

    # --- making cases -------------------------------------------------------------------------
    def make(self, check: str, seed: int) -> Case:
        rng = random.Random(f"{check}:{seed}")
        source = rng.choice(SOURCES)
        connection = rng.randrange(len(self.engines.connections))
        if check == "differential":
            body = Generator(seed, self.profile, duck=True).query()
        elif check == "optoff":
            body = Generator(seed, self.profile, duck=False).query()
        elif check == "tlp":
            body = self.make_tlp(seed)
        elif check == "norec":
            body = self.make_norec(seed)
        else:
            raise ValueError(check)
        return Case(check, seed, body, source, connection)

    def make_tlp(self, seed: int) -> TlpBody:
        g = Generator(seed, self.profile, duck=False)
        rng = g.rng
        mode = rng.choice(("where", "union", "distinct", "aggregate", "aggregate_sql", "having"))
        src, scope = g.source()
        w = g.predicate(scope) if g.chance(0.4) else None
        if mode in ("where", "union", "distinct"):
            items = tuple(
                Item(g.scalar(scope, None, depth=1), f"c{i}") for i in range(rng.randint(1, 4))
            )
            base = Select(items, src, w, distinct=mode == "distinct")
            return TlpBody(mode, base, g.predicate(scope))
        keys = [g.key(scope) for _ in range(rng.choice((0, 1, 1, 2)) if mode != "having" else 1)]
        aggs = []
        while len(aggs) < rng.randint(1, 3):
            a = g.aggregate(scope)
            # Only aggregates whose value over a union of parts follows from the parts'.
            if mode == "having" or re.match(
                r"(count\((?!DISTINCT)|sum\((?!DISTINCT)|min\(|max\()", a.fmt
            ):
                aggs.append(a)
        if not keys:
            aggs = g.global_aggregates(aggs)
        items = (
            *(Item(k, f"k{i}") for i, k in enumerate(keys)),
            *(Item(a, f"a{i}") for i, a in enumerate(aggs)),
        )
        if mode == "having":
            h = g.having(scope, keys) if g.chance(0.5) else None
            base = Select(items, src, w, tuple(keys), h)
            p = g.having(scope, keys) if g.chance(0.6) else g.predicate_over(keys)
            return TlpBody(mode, base, p)
        return TlpBody(mode, Select(items, src, w, tuple(keys)), g.predicate(scope))

    def make_norec(self, seed: int) -> NorecBody:
        g = Generator(seed, self.profile, duck=False)
        mode = g.rng.choice(("case", "case", "istrue", "grouped"))
        src, scope = g.source()
        key = g.key(scope) if mode == "grouped" else None
        return NorecBody(mode, src, g.predicate(scope, 3), key)

    # --- running ------------------------------------------------------------------------------
    def run(self, case: Case) -> Outcome:
        """Runs the case. A failure is run again with `quiver.optimizations = false`; if stock
        DataFusion planning fails the same way it is marked `shared` (a DataFusion bug, or
        quiver's front end: names, sources), which both helps triage and lets the allowlist's
        DataFusion entries apply. An allowed failure is skipped."""
        outcome = self._run(case)
        if outcome.status != "fail" or self.off:
            return outcome
        shared = None
        if self.engines.optimizations_off and case.check != "optoff":
            self.off = True
            try:
                again = self._run(case)
            finally:
                self.off = False
            # The same kind of failure: both wrong answers, or both errors (DataFusion words
            # one error differently depending on the plan around it).
            mismatch = outcome.signature == "mismatch"
            shared = again.status == "fail" and (again.signature == "mismatch") == mismatch
            outcome.shared = shared
            if shared:
                outcome.message += "\n(the same with quiver.optimizations = false)"
            else:
                detail = again.signature or again.message.split("\n")[0] or "agrees"
                outcome.message += (
                    f"\n(with quiver.optimizations = false: {again.status}, {detail})"
                )
        entry = allowlist.allowed(outcome.message, " ".join(outcome.sql), shared)
        if entry:
            return Outcome("skip", f"allowed: {entry.reason}")
        return outcome

    def culprits(self, case: Case, outcome: Outcome) -> list[str]:
        """The `quiver.optimizer.<layer>` switches each of which, turned off alone, makes the
        failure go away: the quiver layer to look at first."""
        con = self.connection(case)
        names = [
            row[0]
            for row in con.sql(
                "SELECT name FROM information_schema.df_settings "
                "WHERE name LIKE 'quiver.optimizer.%' ORDER BY name"
            ).fetchall()
        ]
        found = []
        for name in names:
            con.sql(f"SET {name} = false")
            try:
                again = self._run(case)
            finally:
                con.sql(f"SET {name} = true")
            if again.status != "fail" or again.signature != outcome.signature:
                found.append(name)
        return found

    def _run(self, case: Case) -> Outcome:
        try:
            if case.check == "differential":
                return self.run_differential(case)
            if case.check == "optoff":
                return self.run_optoff(case)
            if case.check == "tlp":
                return self.run_tlp(case)
            return self.run_norec(case)
        except Timeout as error:
            return Outcome("skip", str(error))

    def connection(self, case: Case) -> quiver.Connection:
        connections = self.engines.connections_off if self.off else self.engines.connections
        return connections[case.connection]

    def quiver(self, case: Case, sql: str) -> pa.Table:
        self.queries += 1
        with deadline(self.timeout):
            return self.connection(case).sql(self.engines.quiver_sql(sql, case.source)).arrow()

    def quiver_error(
        self, case: Case, sql: str, error: BaseException, strict: bool = True
    ) -> Outcome:
        """The outcome of quiver raising `error`. Not `strict`: only an internal error (a
        panic, `InternalError`) fails; others are skipped, for queries whose reference ran
        without the same expressions (a TLP part may evaluate a cast the whole query did not
        reach)."""
        if isinstance(error, (KeyboardInterrupt, SystemExit, Timeout)):
            raise error
        message = str(error)
        internal = isinstance(error, quiver.InternalError) or not isinstance(error, Exception)
        if not strict and not internal and not allowlist.known_bug(message, sql):
            return Outcome("skip", f"a part raised {error_signature(error)}")
        if isinstance(error, quiver.QueryCancelled) and "longer than" in message:
            return Outcome("skip", message)
        known = allowlist.known_bug(message, sql)
        if known:
            return Outcome("known", known.reason, f"known: {known.reason}", [sql])
        return Outcome(
            "fail",
            f"quiver raised {error_signature(error)}\n{message}",
            error_signature(error),
            [sql],
        )

    def run_differential(self, case: Case) -> Outcome:
        sql = case.body.sql()
        try:
            with deadline(self.timeout):
                self.queries += 1
                expected = self.engines.run_duck(_reference_sql(case.body))
        except (duckdb.Error, RuntimeError) as error:
            # RuntimeError: DuckDB's "Query interrupted" when the deadline expires.
            return Outcome("skip", f"DuckDB raised {error_signature(error)}")
        try:
            got = self.quiver(case, sql)
        except BaseException as error:
            return self.quiver_error(case, sql, error)
        return self.judge([sql], expected, got, _ordered(case.body), _subset_limit(case.body))

    def run_optoff(self, case: Case) -> Outcome:
        if not self.engines.optimizations_off:
            return Outcome("skip", "quiver has no setting quiver.optimizations yet")
        sql = case.body.sql()
        try:
            with deadline(self.timeout):
                self.queries += 1
                expected = self.engines.run_quiver_off(
                    _reference_sql(case.body), case.source, case.connection
                )
        except BaseException as error:
            if isinstance(error, (KeyboardInterrupt, SystemExit, Timeout)):
                raise
            # A panic is a BaseException (pyo3's PanicException): findings F2.
            return Outcome("skip", f"quiver (optimizations off) raised {error_signature(error)}")
        try:
            got = self.quiver(case, sql)
        except BaseException as error:
            return self.quiver_error(case, sql, error)
        return self.judge([sql], expected, got, _ordered(case.body), _subset_limit(case.body))

    def judge(
        self, sql: list, expected: pa.Table, got: pa.Table, ordered: bool, limit: int | None = None
    ) -> Outcome:
        verdict = (
            compare(expected, got, ordered) if limit is None else contains(expected, got, limit)
        )
        if verdict.equal:
            return Outcome("ok")
        return Outcome(
            "fail",
            verdict.reason,
            "mismatch",
            sql,
            verdict.left_rows if verdict.left_rows is not None else as_rows(expected),
            verdict.right_rows if verdict.right_rows is not None else as_rows(got),
        )

    def run_tlp(self, case: Case) -> Outcome:
        body: TlpBody = case.body
        base = body.base
        if not tlp_valid(body):
            return Outcome("skip", "not a TLP case (minimised past its mode)")
        try:
            expected = self.quiver(case, base.sql())
        except BaseException as error:
            if isinstance(error, (KeyboardInterrupt, SystemExit, Timeout)):
                raise
            return Outcome("skip", f"base query raised {error_signature(error)}")
        queries = tlp_queries(body)
        sqls = [base.sql(), *(q.sql() for q in queries)]
        results = []
        for q in queries:
            try:
                results.append(self.quiver(case, q.sql()))
            except BaseException as error:
                return self.quiver_error(case, q.sql(), error, strict=False)
        got = pa.concat_tables(results, promote_options="permissive")
        if body.mode == "aggregate":
            # Recompose the parts' aggregates with quiver over the parts' rows.
            con = self.connection(case)
            con.register("tlp_parts", got)
            try:
                outer = recompose(base, Table("tlp_parts_", "u"))
                sql = outer.sql().replace("{{tlp_parts_}}", "tlp_parts")
                sqls.append(sql)
                self.queries += 1
                with deadline(self.timeout):
                    got = con.sql(sql).arrow()
            except BaseException as error:
                return self.quiver_error(case, sql, error, strict=False)
            finally:
                con.unregister("tlp_parts")
        return self.judge(sqls, expected, got, False)

    def run_norec(self, case: Case) -> Outcome:
        body: NorecBody = case.body
        counted, reference = norec_queries(body)
        try:
            expected = self.quiver(case, reference.sql())
        except BaseException as error:
            if isinstance(error, (KeyboardInterrupt, SystemExit, Timeout)):
                raise
            return Outcome("skip", f"reference query raised {error_signature(error)}")
        try:
            got = self.quiver(case, counted.sql())
        except BaseException as error:
            return self.quiver_error(case, counted.sql(), error, strict=False)
        if body.mode == "case":
            # sum() over no rows is NULL where count(*) is 0.
            value = expected.column(0)[0].as_py() or 0
            expected = pa.table({"c": pa.array([value], pa.int64())})
        return self.judge([counted.sql(), reference.sql()], expected, got, False)


def _subset_limit(query) -> int | None:
    """A LIMIT without ORDER BY: the answer is any such number of the query's rows."""
    if isinstance(query, Select) and query.limit is not None and not query.order_by:
        return query.limit
    return None


def _reference_sql(query) -> str:
    """The reference runs a LIMIT without ORDER BY without its LIMIT (see `contains`)."""
    if _subset_limit(query) is not None:
        return replace(query, limit=None, offset=None).sql()
    return query.sql()


def _ordered(query) -> bool:
    return isinstance(query, Select) and bool(query.order_by) and query.total_order


def _and(a: Expr | None, b: Expr) -> Expr:
    if a is None:
        return b
    return Expr("({0} AND {1})", (a, b), "bool", a.safe and b.safe, a.agg or b.agg)


def partitions(p: Expr) -> list[Expr]:
    return [
        p,
        Expr("(NOT {0})", (p,), "bool", p.safe, p.agg),
        Expr("({0} IS NULL)", (p,), "bool", p.safe, p.agg),
    ]


def tlp_valid(body: TlpBody) -> bool:
    """Whether partitioning `body.base` must give back its rows: DISTINCT exactly in the
    distinct mode (a DISTINCT per part can repeat a row across parts), and every GROUP BY key
    shown (the recomposition groups by the shown keys)."""
    base = body.base
    if base.distinct != (body.mode == "distinct"):
        return False
    if body.mode in ("aggregate", "aggregate_sql"):
        shown = {item.expr for item in base.items}
        return all(key in shown for key in base.group_by)
    return True


def tlp_parts(body: TlpBody) -> list[Select]:
    if body.mode == "having":
        return [replace(body.base, having=_and(body.base.having, q)) for q in partitions(body.p)]
    return [replace(body.base, where=_and(body.base.where, q)) for q in partitions(body.p)]


def tlp_queries(body: TlpBody) -> list:
    """The queries whose rows, together, must be the base query's."""
    parts = tlp_parts(body)
    if body.mode == "union":
        return [SetOp("UNION ALL", SetOp("UNION ALL", parts[0], parts[1]), parts[2])]
    if body.mode == "distinct":
        return [SetOp("UNION", SetOp("UNION", parts[0], parts[1]), parts[2])]
    if body.mode == "aggregate_sql":
        union = SetOp("UNION ALL", SetOp("UNION ALL", parts[0], parts[1]), parts[2])
        return [recompose(body.base, Derived(union, "u"))]
    return parts


def recompose(base: Select, source) -> Select:
    """The base query's aggregates over the union of its parts' rows (aliased `u`)."""
    keys = []
    items = []
    for item in base.items:
        ref = Expr(f"u.{item.alias}", (), item.expr.kind)
        if item.expr.agg:
            name = "sum" if item.expr.fmt.startswith(("count", "sum")) else item.expr.fmt[:3]
            items.append(Item(Expr(name + "({0})", (ref,), item.expr.kind, agg=True), item.alias))
        else:
            keys.append(ref)
            items.append(Item(ref, item.alias))
    return Select(tuple(items), source, None, tuple(keys))


def norec_queries(body: NorecBody) -> tuple[Select, Select]:
    """(the optimizable query, the reference) for NoREC."""
    p = body.p
    flag = Expr("CASE WHEN {0} THEN 1 ELSE 0 END", (p,), "int")
    count = Expr("count(*)", (), "int", agg=True)
    if body.mode == "grouped":
        k = body.key
        counted = Select((Item(k, "k"), Item(count, "c")), body.source, p, (k,))
        total = Expr("sum({0})", (flag,), "int", agg=True)
        having = Expr("({0} > 0)", (total,), "bool", agg=True)
        reference = Select((Item(k, "k"), Item(total, "c")), body.source, None, (k,), having)
        return counted, reference
    counted = Select((Item(count, "c"),), body.source, p)
    if body.mode == "istrue":
        reference = Select((Item(count, "c"),), body.source, Expr("(({0}) IS TRUE)", (p,), "bool"))
    else:
        total = Expr("sum({0})", (flag,), "int", agg=True)
        reference = Select((Item(total, "c"),), body.source)
    return counted, reference


def describe(engines: Engines, case: Case, outcome: Outcome) -> str:
    """A failure as the report prints it: seed, SQL as quiver ran it, both answers."""
    threads = engines.connections_threads[case.connection]
    lines = [
        f"[{case.check} seed={case.seed} source={case.source} threads={threads}] {outcome.message}",
    ]
    for sql in outcome.sql:
        lines.append("  SQL: " + engines.quiver_sql(sql, case.source))
    if outcome.expected is not None:
        label = (
            "quiver (optimizations off)"
            if case.check == "optoff"
            else ("DuckDB" if case.check == "differential" else "reference")
        )
        lines.append(f"  {label}: {outcome.expected}")
        lines.append(f"  quiver: {outcome.got}")
    return "\n".join(lines)
