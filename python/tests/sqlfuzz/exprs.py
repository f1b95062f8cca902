"""Random expressions over a scope of columns: literals, values, predicates, aggregates and
GROUP BY keys, for :mod:`sqlfuzz.gen`, which builds queries from them. With ``duck=True`` they
leave out what DuckDB and DataFusion define differently (listed in :mod:`sqlfuzz.gen`).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, replace

from sqlfuzz.data import (
    CATEGORIES,
    DIM_NAMES,
    FACT_COLUMNS,
    WORDS,
    Profile,
    columns_of,
    python_value_sql,
)
from sqlfuzz.nodes import Expr, SetOp, Table, col, lit

COMPARISONS = ("=", "<>", "<", "<=", ">", ">=", "IS DISTINCT FROM", "IS NOT DISTINCT FROM")
FACT_WEIGHTS = (("tiny", 2), ("mid", 10), ("big", 3))
ORDERABLE = ("int", "float", "dec", "str", "bool", "ts", "date")
NUMERIC = ("int", "float", "dec")


@dataclass(frozen=True)
class OutColumn:
    """A column of a derived table or a set operation's output."""

    name: str
    kind: str
    safe: bool = True
    domain: str = ""
    summable: bool = False
    unique: bool = False
    special: bool = False


@dataclass
class Scope:
    """The columns a clause can name: (qualifier, column), and which tables they come from."""

    columns: list
    tables: dict  # qualifier -> logical table name, for base tables

    def pick(self, rng, kinds=None, safe=False, domain=None, summable=None, plain=False):
        """A random column; `plain`: not a float column holding NaN or infinities."""
        options = [
            (q, c)
            for q, c in self.columns
            if (kinds is None or c.kind in kinds)
            and (not safe or c.safe)
            and (domain is None or c.domain == domain)
            and (summable is None or c.summable == summable)
            and not (plain and getattr(c, "special", False))
        ]
        return rng.choice(options) if options else None

    def __add__(self, other: Scope) -> Scope:
        return Scope(self.columns + other.columns, {**self.tables, **other.tables})


def out_columns(query) -> list[OutColumn]:
    if isinstance(query, SetOp):
        left, right = out_columns(query.left), out_columns(query.right)
        return [
            replace(a, safe=a.safe and b.safe, special=a.special or b.special, unique=False)
            for a, b in zip(left, right)
        ]
    return [
        OutColumn(
            i.alias,
            i.expr.kind,
            i.expr.safe,
            i.expr.domain,
            i.expr.summable,
            i.expr.unique,
            mentions_special(i.expr),
        )
        for i in query.items
    ]


class ExprGenerator:
    def __init__(self, seed: int, profile: Profile, duck: bool = True) -> None:
        self.rng = random.Random(seed)
        self.profile = profile
        self.duck = duck
        self.aliases = 0

    # --- helpers ------------------------------------------------------------------------------
    def chance(self, p: float) -> bool:
        return self.rng.random() < p

    def alias(self, prefix: str = "t") -> str:
        self.aliases += 1
        return f"{prefix}{self.aliases}"

    def fact(self, allow_big: bool = True) -> str:
        names = [(n, w) for n, w in FACT_WEIGHTS if allow_big or n != "big"]
        return self.rng.choices([n for n, _ in names], [w for _, w in names])[0]

    def base(self, name: str, alias: str | None = None) -> tuple[Table, Scope]:
        alias = alias or self.alias()
        columns = [(alias, c) for c in columns_of(name)]
        # Names match ignoring case: `FROM t AS T1 ... t1.x`.
        return Table(name, alias, self.chance(0.05)), Scope(columns, {alias: name})

    def column(self, scope: Scope, q: str, c) -> Expr:
        origin = (scope.tables[q], c.name) if q in scope.tables else ()
        x = replace(col(q, c), origin=origin)
        if self.chance(0.03):
            # Column names match ignoring case (quiver's `identifiers.rs`).
            x = replace(x, fmt=f"{q}.{c.name.upper()}")
        return x

    # --- literals -------------------------------------------------------------------------------
    def literal(self, like: Expr) -> Expr:
        kind = like.kind
        rng = self.rng
        if like.origin and self.chance(0.7):
            sample = self.profile.sample(*like.origin)
            if sample:
                column = next(c for c in columns_of(like.origin[0]) if c.name == like.origin[1])
                value = rng.choice(sample)
                if kind == "float" and isinstance(value, float) and abs(value) < float("inf"):
                    return lit(float_sql(value), kind)
                if kind == "dec" and value is not None:
                    return lit(self.decimal_sql(format(value, "f")), kind)
                return lit(python_value_sql(value, column), kind)
        if kind == "int":
            value = rng.choice((0, 1, -1, 2, 7, 100, -100, 127, -128, 255, 32767, 65535, 10**6))
            if not self.duck and self.chance(0.1):
                value = rng.choice((2**31 - 1, -(2**31), 2**63 - 1, 2**32))
            return lit(str(value), kind)
        if kind == "float":
            return lit(
                rng.choice(("0.0", "1.5", "-2.25", "100.0", "0.125", float_sql(1e300))), kind
            )
        if kind == "dec":
            return lit(
                self.decimal_sql(rng.choice(("0", "0.01", "-1.5", "12345.67", "-99999.99"))), kind
            )
        if kind == "str":
            word = rng.choice((*WORDS, *CATEGORIES, *DIM_NAMES, "zzz", "k000010"))
            return lit("'" + word.replace("'", "''") + "'", kind)
        if kind == "bool":
            return lit(rng.choice(("TRUE", "FALSE")), kind)
        if kind == "ts":
            return lit(
                rng.choice(
                    (
                        "TIMESTAMP '2000-01-01 00:00:00'",
                        "TIMESTAMP '1970-01-02 00:00:00'",
                        "TIMESTAMP '2020-09-13 12:26:40'",
                        "TIMESTAMP '1999-12-31 23:59:59.999999'",
                    )
                ),
                kind,
            )
        if kind == "date":
            return lit(
                rng.choice(("DATE '2000-01-01'", "DATE '1970-01-01'", "DATE '2050-06-15'")), kind
            )
        raise ValueError(kind)

    def decimal_sql(self, text: str) -> str:
        """A decimal literal. DataFusion types `19.99` as a DOUBLE (DuckDB: DECIMAL); quiver
        compares a DECIMAL with it as the decimal written (`decimal_literals.rs`), but
        arithmetic with it stays float, so the DuckDB comparison spells out a decimal."""
        return f"CAST('{text}' AS DECIMAL(20, 6))" if self.duck else text

    # --- scalar expressions ---------------------------------------------------------------------
    def scalar(self, scope: Scope, kinds=None, safe=False, depth=1, always_safe=False) -> Expr:
        """A value expression; `safe`: usable in comparisons and ordering in the DuckDB check
        (`always_safe`: in every check)."""
        need_safe = (safe and self.duck) or always_safe
        picked = scope.pick(self.rng, kinds, safe=need_safe)
        if picked is None:
            picked = scope.pick(self.rng, None, safe=need_safe) or scope.pick(self.rng)
        x = self.column(scope, *picked)
        if depth <= 0 or self.chance(0.55):
            return x
        return self.wrap(x, scope, safe, depth - 1, kinds)

    def wrap(self, x: Expr, scope: Scope, safe: bool, depth: int, kinds=None) -> Expr:
        rng = self.rng
        options = []
        k = x.kind
        same = dict(safe=x.safe, domain=x.domain, summable=x.summable)
        if k == "int":
            m = rng.choice((2, 3, 7, 10, 13, 100, 1000, 10000))
            options += [
                Expr("({0} % " + str(m) + ")", (x,), "int", x.safe, domain="small", summable=True),
                Expr("({0} & 255)", (x,), "int", x.safe, domain="small", summable=True),
                Expr("CAST({0} AS DOUBLE)", (x,), "float", **same),
            ]
            # Not over UInt64 (not summable): its values past 2**63 do not fit a BIGINT.
            if x.summable:
                add, times = rng.randint(-5, 5), rng.choice((2, -3))
                options += [
                    Expr("(CAST({0} AS BIGINT) + " + str(add) + ")", (x,), "int", **same),
                    Expr("(CAST({0} AS BIGINT) * " + str(times) + ")", (x,), "int", **same),
                    Expr("abs(CAST({0} AS BIGINT))", (x,), "int", **same),
                ]
            if not self.duck:
                options.append(Expr("({0} + 1)", (x,), "int", x.safe, domain=x.domain))
        elif k == "float":
            options += [
                Expr("({0} + 1.5)", (x,), "float", x.safe, domain=x.domain, summable=x.summable),
                Expr("({0} * 2)", (x,), "float", x.safe, domain=x.domain, summable=x.summable),
                Expr("abs({0})", (x,), "float", x.safe, domain=x.domain, summable=x.summable),
                Expr("({0} / 4.0)", (x,), "float", x.safe, domain=x.domain, summable=x.summable),
            ]
        elif k == "dec":
            options += [
                Expr("({0} + 1)", (x,), "dec", x.safe, domain=x.domain, summable=x.summable),
                Expr("({0} * 2)", (x,), "dec", x.safe, domain=x.domain, summable=x.summable),
                Expr("CAST({0} AS DOUBLE)", (x,), "float", x.safe, domain=x.domain),
            ]
        elif k == "str":
            options += [
                Expr("lower({0})", (x,), "str", x.safe, domain=x.domain),
                Expr("substr({0}, 1, 2)", (x,), "str", x.safe, domain="small"),
                Expr("({0} || 'x')", (x,), "str", x.safe, domain=x.domain),
                Expr("length({0})", (x,), "int", x.safe, domain="small", summable=True),
                Expr("trim({0})", (x,), "str", x.safe, domain=x.domain),
            ]
            if not self.duck:
                options.append(Expr("upper({0})", (x,), "str", x.safe, domain=x.domain))
        elif k == "ts" and (x.safe or not self.duck):
            # Not over `tsny` for DuckDB: DataFusion truncates and extracts in the column's
            # zone, DuckDB in the session's (UTC).
            unit = rng.choice(("day", "month", "year", "hour"))
            part = rng.choice(("year", "month", "day", "hour", "minute"))
            options += [
                Expr("date_trunc('" + unit + "', {0})", (x,), "ts", x.safe, domain="large"),
                Expr(
                    "extract(" + part + " FROM {0})",
                    (x,),
                    "int",
                    x.safe,
                    domain="small",
                    summable=True,
                ),
                Expr("CAST({0} AS DATE)", (x,), "date", x.safe, domain="large"),
            ]
        elif k == "date":
            part = rng.choice(("year", "month", "day"))
            options += [
                Expr(
                    "extract(" + part + " FROM {0})",
                    (x,),
                    "int",
                    x.safe,
                    domain="small",
                    summable=True,
                ),
            ]
        elif k == "bool":
            options += [Expr("(NOT {0})", (x,), "bool", x.safe, domain="small")]
        if kinds is not None:
            options = [o for o in options if o.kind in kinds]
        # coalesce and CASE keep the kind of what they wrap. Not around `tsny` for DuckDB: it
        # reads the literal TIMESTAMP in UTC, DataFusion in the column's zone (New York).
        if (x.kind != "bool" or not kinds or "bool" in kinds) and (x.safe or not self.duck):
            options.append(
                Expr(
                    "coalesce({0}, {1})",
                    (x, self.literal(x)),
                    x.kind,
                    x.safe,
                    domain=x.domain,
                    summable=x.summable,
                )
            )
            if depth > 0 or self.chance(0.3):
                p = self.predicate(scope, 0)
                y = self.literal(x)
                options.append(
                    Expr(
                        "CASE WHEN {0} THEN {1} ELSE {2} END",
                        (p, x, y),
                        x.kind,
                        x.safe and p.safe,
                        domain=x.domain,
                        summable=x.summable,
                    )
                )
        return rng.choice(options) if options else x

    # --- predicates ------------------------------------------------------------------------------
    def predicate(self, scope: Scope, depth: int = 2) -> Expr:
        rng = self.rng
        r = rng.random()
        if depth > 0 and r < 0.3:
            op = rng.choice(("AND", "OR"))
            a, b = self.predicate(scope, depth - 1), self.predicate(scope, depth - 1)
            return Expr("({0} " + op + " {1})", (a, b), "bool", a.safe and b.safe)
        if depth > 0 and r < 0.38:
            a = self.predicate(scope, depth - 1)
            return Expr("(NOT {0})", (a,), "bool", a.safe)
        if depth > 0 and r < 0.45:
            # A longer AND chain: quiver evaluates one conjunct after another on the rows
            # still selected (`ConjunctionExpr`).
            chain = self.leaf(scope)
            for _ in range(rng.randint(2, 4)):
                b = self.leaf(scope)
                chain = Expr("({0} AND {1})", (chain, b), "bool", chain.safe and b.safe)
            return chain
        return self.leaf(scope)

    def leaf(self, scope: Scope) -> Expr:
        rng = self.rng
        shape = rng.choices(
            ("cmp", "cmp_cols", "null", "in", "between", "like", "bool"), (10, 3, 3, 3, 2, 2, 2)
        )[0]
        if shape == "bool":
            picked = scope.pick(rng, ("bool",), safe=self.duck)
            if picked:
                x = self.column(scope, *picked)
                form = rng.choice(("{0}", "({0} IS TRUE)", "({0} IS NOT FALSE)", "({0} = TRUE)"))
                return Expr(form, (x,), "bool", x.safe)
            shape = "cmp"
        if shape == "like":
            picked = scope.pick(rng, ("str",), safe=self.duck)
            if picked:
                x = self.column(scope, *picked)
                op = rng.choice(("LIKE", "NOT LIKE", "ILIKE", "NOT ILIKE"))
                word = rng.choice((*WORDS, *CATEGORIES, "k0001", "w1"))
                word = "".join(ch for ch in word if ch not in "%_'\\")
                pattern = rng.choice(("{w}%", "%{w}", "%{w}%", "{w}", "_{w}%", "%")).format(
                    w=word[:3]
                )
                return Expr("({0} " + op + " '" + pattern + "')", (x,), "bool", x.safe)
            shape = "cmp"
        if shape == "null":
            x = self.scalar(scope, None, safe=False, depth=1)
            form = rng.choice(("({0} IS NULL)", "({0} IS NOT NULL)"))
            return Expr(form, (x,), "bool", True)
        if shape == "cmp_cols":
            x = self.scalar(scope, ORDERABLE, safe=True, depth=0)
            kinds = (x.kind,) if x.kind not in NUMERIC else NUMERIC
            if self.duck and x.kind in ("dec", "float"):
                # DataFusion compares DECIMAL with DOUBLE as decimals (DuckDB: as doubles),
                # and raises on a NaN it cannot cast (findings: decimal against double).
                kinds = (x.kind, "int")
            picked = scope.pick(rng, kinds, safe=self.duck)
            if picked:
                y = self.column(scope, *picked)
                op = rng.choice(COMPARISONS)
                return Expr("({0} " + op + " {1})", (x, y), "bool", x.safe and y.safe)
        x = self.scalar(scope, ORDERABLE, safe=True, depth=1)
        # DuckDB 1.5.5 folds `date_trunc(...) = <a literal off the unit's boundary>` to FALSE,
        # also where the argument is NULL, so NOT of it is TRUE (findings D1): for DuckDB,
        # date_trunc is only compared by order.
        truncated = self.duck and x.fmt.startswith("date_trunc")
        if shape == "in" and truncated:
            shape = "between"
        if shape == "in":
            values = [self.literal(x) for _ in range(rng.randint(1, 4))]
            if self.chance(0.2):
                values.append(lit("NULL", x.kind))
            fmt = "({0} " + rng.choice(("IN", "NOT IN")) + " ("
            fmt += ", ".join("{" + str(i + 1) + "}" for i in range(len(values))) + "))"
            return Expr(fmt, (x, *values), "bool", x.safe)
        if shape == "between":
            low, high = self.literal(x), self.literal(x)
            op = rng.choice(("BETWEEN", "NOT BETWEEN"))
            return Expr("({0} " + op + " {1} AND {2})", (x, low, high), "bool", x.safe)
        op = rng.choice(COMPARISONS[2:6] if truncated else COMPARISONS)
        return Expr("({0} " + op + " {1})", (x, self.literal(x)), "bool", x.safe)

    # --- aggregates ------------------------------------------------------------------------------
    def aggregate(self, scope: Scope, grouped: bool = True) -> Expr:
        rng = self.rng
        choice = rng.choices(
            ("count_star", "count", "count_distinct", "sum", "avg", "min", "max", "sum_distinct"),
            (3, 2, 2, 4, 3, 3, 3, 1),
        )[0]
        if choice == "count_star":
            return Expr("count(*)", (), "int", agg=True, summable=True)
        if choice in ("sum", "avg", "sum_distinct"):
            picked = scope.pick(rng, NUMERIC, summable=True)
            if picked:
                x = self.column(scope, *picked)
                if self.chance(0.3):
                    x = self.wrap(x, scope, False, 0, NUMERIC)
                    if not x.summable:
                        x = self.column(scope, *picked)
                if choice == "avg":
                    return Expr("avg({0})", (x,), avg_kind(x), x.safe, agg=True)
                distinct = "DISTINCT " if choice == "sum_distinct" else ""
                return Expr(
                    "sum(" + distinct + "{0})", (x,), x.kind, x.safe, agg=True, summable=True
                )
            choice = "min"
        if choice in ("min", "max"):
            picked = scope.pick(rng, ORDERABLE, plain=grouped)
            if picked is None:
                return Expr("count(*)", (), "int", agg=True, summable=True)
            x = self.column(scope, *picked)
            if self.chance(0.4):
                x = self.wrap(x, scope, False, 0)
            return Expr(choice + "({0})", (x,), x.kind, x.safe, agg=True)
        # DISTINCT over -0.0 and 0.0 counts them once or twice depending on the plan in
        # DataFusion (findings F21), also in the checks of quiver against itself.
        x = self.scalar(scope, ORDERABLE, safe=True, depth=1, always_safe=True)
        if choice == "count_distinct":
            return Expr("count(DISTINCT {0})", (x,), "int", agg=True, summable=True)
        return Expr("count({0})", (x,), "int", agg=True, summable=True)

    def global_aggregates(self, aggs: list) -> list:
        """`aggs` for an aggregate without GROUP BY. DataFusion 55 feeds MIN/MAX of a column
        back to the scan as a dynamic filter that prunes row groups which cannot change
        them, also when another aggregate of the same scan (`max(x + 1)`) needs those rows
        (findings F17, apache/datafusion#24816): so MIN/MAX of a bare column only beside
        other MIN/MAX of bare columns."""
        plain = [is_plain_min_max(a) for a in aggs]
        if all(plain) or not any(plain):
            return aggs
        return [
            replace(
                a,
                args=(
                    Expr(
                        "coalesce({0}, {1})",
                        (a.args[0], self.literal(a.args[0])),
                        a.args[0].kind,
                        a.args[0].safe,
                    ),
                ),
            )
            if p
            else a
            for a, p in zip(aggs, plain)
        ]

    def key(self, scope: Scope, domain: str | None = None) -> Expr:
        """A GROUP BY key: a column, or an expression (`k % 7`, `lower(s)`, ...)."""
        picked = scope.pick(self.rng, ORDERABLE, safe=self.duck, domain=domain)
        if picked is None:
            picked = scope.pick(self.rng, ORDERABLE, safe=self.duck)
        x = self.column(scope, *picked)
        if self.chance(0.35):
            x = self.wrap(x, scope, True, 0)
            if x.kind == "float" and self.duck and not x.safe:
                x = self.column(scope, *picked)
        return x

    # --- FROM -------------------------------------------------------------------------------------
    def having(self, scope: Scope, keys: list) -> Expr:
        agg = self.aggregate(scope)
        if self.duck and not agg.safe:
            agg = Expr("count(*)", (), "int", agg=True)
        op = self.rng.choice(COMPARISONS[:6])
        value = {"int": "2", "float": "0.0", "dec": "0"}.get(agg.kind)
        rhs = lit(value, agg.kind) if value else self.literal(agg)
        p = Expr("({0} " + op + " {1})", (agg, rhs), "bool", agg.safe, agg=True)
        if self.chance(0.3):
            k = self.rng.choice(keys)
            q = Expr("({0} IS NOT NULL)", (k,), "bool")
            p = Expr(
                "({0} " + self.rng.choice(("AND", "OR")) + " {1})", (p, q), "bool", p.safe, agg=True
            )
        return p

    def predicate_over(self, keys: list) -> Expr:
        """A HAVING predicate on GROUP BY keys."""
        k = self.rng.choice(keys)
        if self.chance(0.2):
            return Expr("({0} IS NULL)", (k,), "bool")
        op = self.rng.choice(COMPARISONS)
        return Expr("({0} " + op + " {1})", (k, self.literal(k)), "bool", k.safe)


SPECIAL_COLUMNS = re.compile(
    r"\.(" + "|".join(c.name for c in FACT_COLUMNS if c.special) + r")\b", re.IGNORECASE
)


def avg_kind(x: Expr) -> str:
    """AVG of a DECIMAL is a DECIMAL in DataFusion (a DOUBLE in DuckDB): compared with a
    double literal, it would be compared as decimals (findings F4, F5)."""
    return "dec" if x.kind == "dec" else "float"


def is_plain_min_max(e: Expr) -> bool:
    """MIN or MAX of a bare column."""
    return e.fmt in ("min({0})", "max({0})") and not e.args[0].args and "." in e.args[0].fmt


def mentions_special(e: Expr) -> bool:
    """Whether `e` reads a float column holding NaN or infinities."""
    return SPECIAL_COLUMNS.search(e.sql()) is not None


def float_sql(value: float) -> str:
    """A double literal read the same by both engines: DuckDB types `1.1` as DECIMAL and
    rounds it to DOUBLE by division, which can miss the nearest double by one ulp."""
    text = repr(value)
    if len(text) <= 8 and "e" not in text:
        return text
    return f"CAST('{text}' AS DOUBLE)"
