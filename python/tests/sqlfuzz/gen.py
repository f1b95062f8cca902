"""Random queries over the fuzzer's tables, deterministic given a seed.

``Generator(seed, profile, duck=True)`` makes queries DuckDB and quiver must answer alike: it
leaves out what the two dialects define differently, each at the place it would be generated,
with the reason. ``duck=False`` (the checks of quiver against itself) generates everything.

What the DuckDB comparison never generates, and why:

* ``/`` between integers (DuckDB divides as doubles, DataFusion truncates) and ``%`` or ``/``
  by zero (DuckDB gives NULL, DataFusion an error): divisors are non-zero literals, integer
  division is not written.
* arithmetic on narrow integers without a cast (DuckDB types ``i8 + 1`` as TINYINT and
  raises on overflow, DataFusion widens): integer arithmetic is ``CAST(x AS BIGINT) + n``.
* ORDER BY without NULLS FIRST/LAST (DuckDB sorts NULLs last both ways, DataFusion first when
  descending): every ORDER BY says where NULLs go.
* LIMIT, row_number(), lag() and lead() without a total order (either answer is right).
* ``upper()`` of 'ß' (DuckDB: 'ẞ', Rust: 'SS'): no upper() in the DuckDB comparison.
* comparing, grouping, ordering or DISTINCT over -0.0, -inf or the NaN of inf + -inf (see
  ``data.FACT_COLUMNS``, column ``fx``), or a timestamp in a zone other than UTC (``tsny``:
  DataFusion reads a literal TIMESTAMP and truncates in the column's zone, DuckDB in UTC).
* a scalar subquery that may return several rows (DuckDB raises, as DataFusion should).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from sqlfuzz.data import columns_of
from sqlfuzz.exprs import (
    COMPARISONS,
    NUMERIC,
    ORDERABLE,
    ExprGenerator,
    OutColumn,
    Scope,
    avg_kind,
    mentions_special,
    out_columns,
)
from sqlfuzz.nodes import Derived, Expr, Item, Join, Order, Select, SetOp, lit


class Generator(ExprGenerator):
    """Queries: FROM items (tables, joins, derived tables) and the query shapes."""

    def join(self, allow_big: bool = True) -> tuple:
        rng = self.rng
        left_name = self.fact(allow_big)
        left, lscope = self.base(left_name)
        a = left.alias
        shape = rng.choices(("dim", "fact", "grouped", "nonequi"), (4, 3, 3, 1))[0]
        if shape == "nonequi" and left_name != "tiny":
            shape = "dim"
        if shape == "fact":
            # Keys with few rows per value, so the join stays near the tables' sizes.
            right_name = rng.choice(("tiny", "mid")) if left_name != "tiny" else "mid"
            right, rscope = self.base(right_name)
            b = right.alias
            key = rng.choice(
                ("kb", "id", "sk", "i16") if left_name != "big" else ("kb", "id", "sk")
            )
            on = Expr(f"{a}.{key} = {b}.{key}", (), "bool")
        elif shape == "dim":
            right, rscope = self.base("dim")
            b = right.alias
            pair = rng.choice((("g", "k"), ("kb", "kb"), ("i8", "k"), ("u8", "k"), ("s", "name")))
            on = Expr(f"{a}.{pair[0]} = {b}.{pair[1]}", (), "bool")
        elif shape == "nonequi":
            right, rscope = self.base("dim")
            b = right.alias
            on = Expr(f"{a}.i8 < {b}.k", (), "bool")
        else:
            right, rscope = self.grouped_subquery()
            b = right.alias
            key = rscope.columns[0][1]
            on = Expr(f"{a}.{key.origin_name} = {b}.{key.name}", (), "bool")
            # origin_name is where the key came from in the fact table.
        if self.chance(0.3):
            extra = self.predicate(rscope, 0)
            on = Expr("{0} AND {1}", (on, extra), "bool", extra.safe)
        kind = rng.choices(("JOIN", "LEFT JOIN", "RIGHT JOIN", "FULL JOIN"), (6, 3, 1, 1))[0]
        scope = lscope + rscope
        # Join outputs repeat rows: nothing in them is unique any more.
        scope.columns = [(q, _not_unique(c)) for q, c in scope.columns]
        return Join(kind, left, right, on), scope

    def grouped_subquery(self) -> tuple:
        """`(SELECT k, avg(v) AS av, count(*) AS c FROM t GROUP BY k) AS alias`."""
        rng = self.rng
        inner, scope = self.base(self.fact())
        key_name = rng.choice(("g", "kb", "i16", "u8", "sk", "s"))
        column = next(c for c in columns_of("mid") if c.name == key_name)
        k = self.column(scope, inner.alias, column)
        aggs = [self.aggregate(scope) for _ in range(rng.randint(1, 3))]
        items = (Item(k, "k"), *(Item(e, f"a{i}") for i, e in enumerate(aggs)))
        where = self.predicate(scope, 1) if self.chance(0.3) else None
        query = Select(items, inner, where, group_by=(k,))
        alias = self.alias("s")
        outs = out_columns(query)
        outs[0] = KeyColumn(**{**outs[0].__dict__, "unique": False}, origin_name=key_name)
        return Derived(query, alias), Scope([(alias, c) for c in outs], {})

    def source(self, allow_big: bool = True, allow_join: bool = True) -> tuple:
        rng = self.rng
        r = rng.random()
        if allow_join and r < 0.3:
            return self.join(allow_big)
        if r < 0.4:
            # A derived table over a filtered table, sometimes `SELECT *` (which turns off
            # quiver's narrowing of the columns a query can see).
            inner, scope = self.base(self.fact(allow_big))
            where = self.predicate(scope, 1)
            if self.chance(0.5):
                items = (Item(Expr(f"{inner.alias}.*", (), "rel"), ""),)
                outs = [c for _, c in scope.columns]
            else:
                chosen = rng.sample([c for _, c in scope.columns], rng.randint(2, 6))
                items = tuple(Item(self.column(scope, inner.alias, c), c.name) for c in chosen)
                outs = chosen
            alias = self.alias("d")
            return Derived(Select(items, inner, where), alias), Scope(
                [(alias, c) for c in outs], {}
            )
        return self.base(self.fact(allow_big))

    # --- queries ----------------------------------------------------------------------------------
    def query(self) -> Select | SetOp:
        shape = self.rng.choices(
            (
                "filter",
                "aggregate",
                "global",
                "join_grouped",
                "union",
                "window",
                "distinct",
                "subquery",
                "topk",
            ),
            (12, 26, 7, 9, 8, 10, 6, 12, 5),
        )[0]
        return getattr(self, "q_" + shape)()

    def finish(self, q: Select, limit_ok: bool = True) -> Select:
        """ORDER BY every output column (in a random order), sometimes LIMIT; or, for a
        GROUP BY or DISTINCT, sometimes a LIMIT alone (quiver aggregates only the first keys it
        sees, `FrozenKeysExec`), which the checks compare as a subset of the whole answer."""
        if (q.group_by or q.distinct) and limit_ok and self.chance(0.1):
            return replace(q, limit=self.rng.choice((1, 5, 20)))
        if not self.chance(0.4):
            return q
        if self.duck and not all(i.expr.safe and i.expr.kind in ORDERABLE for i in q.items):
            return q
        if joins_grouped_subquery(q.source):
            # DataFusion takes the key of a grouped subquery for unique after a join (and a
            # second GROUP BY or DISTINCT), and drops the ORDER BY keys after it (findings F20).
            return q
        if (q.distinct or q.group_by) and any(mentions_special(k) for k in keys_of(q)):
            # DataFusion's TopK aggregation treats NaN keys as distinct and can panic on
            # them (findings F1): no ORDER BY ... LIMIT over DISTINCT/GROUP BY float keys.
            limit_ok = False
        positions = list(range(len(q.items)))
        self.rng.shuffle(positions)
        order = tuple(Order(p, self.chance(0.4), self.chance(0.5)) for p in positions)
        limit = offset = None
        if limit_ok and self.chance(0.6):
            limit = self.rng.choice((1, 3, 10, 50))
            offset = self.rng.choice((None, None, 2))
        return replace(q, order_by=order, limit=limit, offset=offset)

    def q_filter(self) -> Select:
        src, scope = self.source(allow_big=False)
        items = tuple(
            Item(self.scalar(scope, None, depth=1), f"c{i}") for i in range(self.rng.randint(1, 5))
        )
        return self.finish(Select(items, src, self.predicate(scope)))

    def q_aggregate(self, grouped: bool = True) -> Select:
        rng = self.rng
        src, scope = self.source()
        keys = []
        if grouped:
            domain = rng.choice(("small", "large", None))
            keys = [self.key(scope, domain) for _ in range(rng.choices((1, 2, 3), (6, 3, 1))[0])]
        aggs = [self.aggregate(scope, bool(keys)) for _ in range(rng.randint(1, 4))]
        if not keys:
            aggs = self.global_aggregates(aggs)
        items = [Item(k, f"k{i}") for i, k in enumerate(keys)]
        if keys and self.chance(0.15):
            items = items[1:]  # a key not shown is still a key
        items += [Item(e, f"a{i}") for i, e in enumerate(aggs)]
        if keys and self.chance(0.2):
            items.append(Item(self.window_over_aggregates(keys, aggs), "w"))
        where = self.predicate(scope) if self.chance(0.7) else None
        having = None
        if keys and self.chance(0.3):
            having = self.having(scope, keys)
        q = Select(tuple(items), src, where, tuple(keys), having)
        return self.finish(q)

    def q_global(self) -> Select:
        return self.q_aggregate(grouped=False)

    def window_over_aggregates(self, keys: list, aggs: list) -> Expr:
        rng = self.rng
        safe_aggs = [a for a in aggs if a.safe and a.kind in ORDERABLE] or [
            Expr("count(*)", (), "int", agg=True)
        ]
        a = rng.choice(safe_aggs)
        nulls = rng.choice(("NULLS FIRST", "NULLS LAST"))
        forms = [
            Expr("rank() OVER (ORDER BY {0} DESC " + nulls + ")", (a,), "int", agg=True),
            Expr("dense_rank() OVER (ORDER BY {0} " + nulls + ")", (a,), "int", agg=True),
        ]
        if a.summable and a.kind in ("int", "dec"):
            forms.append(Expr("sum({0}) OVER ()", (a,), a.kind, agg=True))
            if len(keys) > 1:
                forms.append(
                    Expr("sum({0}) OVER (PARTITION BY {1})", (a, keys[0]), a.kind, agg=True)
                )
        # The keys order the groups totally.
        order = ", ".join("{" + str(i) + "} " + nulls for i in range(len(keys)))
        forms.append(
            Expr("row_number() OVER (ORDER BY " + order + ")", tuple(keys), "int", agg=True)
        )
        return rng.choice(forms)

    def q_join_grouped(self) -> Select:
        rng = self.rng
        outer, oscope = self.base(self.fact(allow_big=rng.random() < 0.3))
        right, rscope = self.grouped_subquery()
        key = rscope.columns[0][1]
        on = Expr(f"{outer.alias}.{key.origin_name} = {right.alias}.k", (), "bool")
        src = Join(rng.choice(("JOIN", "JOIN", "LEFT JOIN")), outer, right, on)
        scope = oscope + rscope
        scope.columns = [(q, _not_unique(c)) for q, c in scope.columns]
        # `WHERE a.v < b.av`: a row against its group's aggregate.
        agg_col = rscope.columns[-1][1]
        where = None
        if agg_col.kind in NUMERIC and (agg_col.safe or not self.duck):
            kinds = NUMERIC
            if self.duck and agg_col.kind in ("dec", "float"):
                kinds = (agg_col.kind, "int")  # findings F5: DECIMAL against DOUBLE
            picked = oscope.pick(rng, kinds, safe=self.duck)
            if picked:
                x = self.column(oscope, *picked)
                y = Expr(f"{right.alias}.{agg_col.name}", (), agg_col.kind, agg_col.safe)
                where = Expr("({0} " + rng.choice(COMPARISONS[:6]) + " {1})", (x, y), "bool", True)
        if where is None or self.chance(0.3):
            p = self.predicate(scope, 1)
            where = p if where is None else Expr("({0} AND {1})", (where, p), "bool", p.safe)
        if self.chance(0.5):
            keys = [self.key(scope, None)]
            aggs = [self.aggregate(scope) for _ in range(rng.randint(1, 3))]
            items = [Item(keys[0], "k0"), *(Item(e, f"a{i}") for i, e in enumerate(aggs))]
            if self.chance(0.3):
                items.append(Item(self.window_over_aggregates(keys, aggs), "w"))
            return self.finish(Select(tuple(items), src, where, tuple(keys)))
        items = tuple(
            Item(self.scalar(scope, None, depth=0), f"c{i}") for i in range(rng.randint(1, 4))
        )
        return self.finish(Select(items, src, where))

    def q_union(self) -> Select | SetOp:
        rng = self.rng
        width = rng.randint(1, 3)
        kinds = [rng.choice(("int", "str", "float", "dec", "ts", "bool")) for _ in range(width)]
        branches = []
        for _ in range(2):
            src, scope = self.base(self.fact(allow_big=rng.random() < 0.5))
            items = tuple(
                Item(self.scalar(scope, (k,), safe=True, depth=1), f"c{i}")
                for i, k in enumerate(kinds)
            )
            branches.append(
                Select(items, src, self.predicate(scope, 1) if self.chance(0.7) else None)
            )
        # Matching kinds but maybe not types: coerce a branch's types to the first branch's.
        left, right = branches
        right = replace(
            right,
            items=tuple(
                Item(
                    r.expr if r.expr.kind == first.expr.kind else self.literal(first.expr), r.alias
                )
                for first, r in zip(left.items, right.items)
            ),
        )
        op = rng.choices(("UNION ALL", "UNION", "INTERSECT", "EXCEPT"), (6, 2, 1, 1))[0]
        union = SetOp(op, left, right)
        if not self.chance(0.5):
            return union
        alias = self.alias("u")
        scope = Scope([(alias, c) for c in out_columns(union)], {})
        keys = [self.key(scope, None)]
        aggs = [self.aggregate(scope) for _ in range(rng.randint(1, 3))]
        items = (Item(keys[0], "k0"), *(Item(e, f"a{i}") for i, e in enumerate(aggs)))
        return self.finish(Select(items, Derived(union, alias), None, tuple(keys)))

    def q_window(self) -> Select:
        rng = self.rng
        src, scope = self.base(self.fact(allow_big=rng.random() < 0.2))
        a = src.alias
        items = [Item(self.column(scope, a, columns_of("mid")[0]), "id")]
        items += [
            Item(self.scalar(scope, None, depth=0), f"c{i}") for i in range(rng.randint(0, 2))
        ]
        for i in range(rng.randint(1, 3)):
            items.append(Item(self.window(scope, a), f"w{i}"))
        where = self.predicate(scope) if self.chance(0.6) else None
        return self.finish(Select(tuple(items), src, where))

    def window(self, scope: Scope, a: str) -> Expr:
        """A window function over a base table (whose `id` makes any ORDER BY total)."""
        rng = self.rng
        part = self.key(scope, "small")
        order = self.scalar(scope, ORDERABLE, safe=True, depth=0)
        direction = rng.choice(("", " DESC")) + rng.choice((" NULLS FIRST", " NULLS LAST"))
        over = "PARTITION BY {0} ORDER BY {1}" + direction
        total = over + f", {a}.id"
        fn = rng.choice(
            ("rank", "dense_rank", "row_number", "sum", "avg", "count", "min", "max", "lag")
        )
        if fn in ("rank", "dense_rank"):
            return Expr(
                fn + "() OVER (" + over + ")",
                (part, order),
                "int",
                simpler=(Expr(fn + "() OVER (ORDER BY {0}" + direction + ")", (order,), "int"),),
            )
        if fn == "row_number":
            return Expr("row_number() OVER (" + total + ")", (part, order), "int")
        if fn == "lag":
            x = self.scalar(scope, None, depth=0)
            return Expr("lag({2}) OVER (" + total + ")", (part, order, x), x.kind, x.safe)
        if fn in ("sum", "avg"):
            picked = scope.pick(rng, NUMERIC, summable=True)
            x = self.column(scope, *picked)
            kind = avg_kind(x) if fn == "avg" else x.kind
        elif fn == "count":
            x = self.scalar(scope, None, depth=0)
            kind = "int"
        else:
            x = self.scalar(scope, ORDERABLE, depth=0)
            kind = x.kind
        plain = Expr(fn + "({2}) OVER (PARTITION BY {0})", (part, order, x), kind, x.safe)
        if self.chance(0.4):
            return plain
        return Expr(
            fn + "({2}) OVER (" + over + ")", (part, order, x), kind, x.safe, simpler=(plain,)
        )

    def q_distinct(self) -> Select:
        src, scope = self.source()
        items = tuple(Item(self.key(scope, None), f"c{i}") for i in range(self.rng.randint(1, 3)))
        where = self.predicate(scope) if self.chance(0.6) else None
        return self.finish(Select(items, src, where, distinct=True))

    def q_subquery(self) -> Select:
        rng = self.rng
        outer, scope = self.base(self.fact(allow_big=rng.random() < 0.15))
        a = outer.alias
        sub = self.subquery_predicate(scope, a)
        where = sub
        if self.chance(0.4):
            p = self.predicate(scope, 1)
            op = rng.choice(("AND", "OR"))
            if self.duck and "NOT IN (" in sub.fmt:
                # DataFusion turns `x NOT IN (subquery) OR p` TRUE where the subquery holds a
                # NULL and the answer is NULL (findings F12).
                op = "AND"
            where = Expr("({0} " + op + " {1})", (sub, p), "bool", p.safe)
        items = [Item(self.scalar(scope, None, depth=0), f"c{i}") for i in range(rng.randint(1, 3))]
        if self.chance(0.3):
            items.append(Item(self.scalar_subquery(scope, a), "sq"))
        if self.chance(0.3):
            keys = [self.key(scope, "small")]
            aggs = [self.aggregate(scope) for _ in range(rng.randint(1, 2))]
            items = [Item(keys[0], "k0"), *(Item(e, f"a{i}") for i, e in enumerate(aggs))]
            return self.finish(Select(tuple(items), outer, where, tuple(keys)))
        return self.finish(Select(tuple(items), outer, where))

    def subquery_predicate(self, scope: Scope, a: str) -> Expr:
        rng = self.rng
        shape = rng.choice(
            ("exists", "not_exists", "in", "not_in", "in_corr", "scalar", "scalar_corr")
        )
        dim, dscope = self.base("dim")
        d = dim.alias
        dpred = self.predicate(dscope, 1) if self.chance(0.6) else None
        if shape in ("exists", "not_exists"):
            corr = Expr(f"{d}.k = {a}.g", (), "bool")
            if self.chance(0.3):
                corr = Expr(f"({d}.k = {a}.g AND {d}.w > {a}.f)", (), "bool")
            where = (
                corr if dpred is None else Expr("({0} AND {1})", (corr, dpred), "bool", dpred.safe)
            )
            inner = Select((Item(lit("1", "int"), "one"),), dim, where)
            fmt = "EXISTS ({0})" if shape == "exists" else "(NOT EXISTS ({0}))"
            return Expr(fmt, (inner,), "bool", where.safe)
        if shape in ("in", "not_in"):
            inner = Select((Item(Expr(f"{d}.kb", (), "int"), "kb"),), dim, dpred)
            fmt = "({1} IN ({0}))" if shape == "in" else "({1} NOT IN ({0}))"
            return Expr(
                fmt, (inner, Expr(f"{a}.kb", (), "int")), "bool", dpred is None or dpred.safe
            )
        if shape == "in_corr":
            inner_t, iscope = self.base(rng.choice(("tiny", "mid")))
            b = inner_t.alias
            where = Expr(f"{b}.g = {a}.g", (), "bool")
            if self.chance(0.5):
                p = self.predicate(iscope, 0)
                where = Expr("({0} AND {1})", (where, p), "bool", p.safe)
            inner = Select((Item(Expr(f"{b}.kb", (), "int"), "kb"),), inner_t, where)
            return Expr("({1} IN ({0}))", (inner, Expr(f"{a}.kb", (), "int")), "bool", where.safe)
        # A correlated aggregate becomes a grouped one (findings F3: no NaN/inf floats).
        picked = scope.pick(rng, NUMERIC, safe=self.duck, summable=True, plain=True)
        x = self.column(scope, *picked)
        op = rng.choice(COMPARISONS[:6])
        if shape == "scalar":
            inner = Select((Item(Expr(f"avg({d}.w)", (), "float", agg=True), "aw"),), dim, dpred)
        else:
            inner_t, iscope = self.base(rng.choice(("tiny", "mid")))
            b = inner_t.alias
            y = Expr(f"{b}.{picked[1].name}", (), x.kind)
            agg = rng.choice(("avg", "max", "min", "sum"))
            inner = Select(
                (Item(Expr(agg + "({0})", (y,), "float", agg=True), "v"),),
                inner_t,
                Expr(f"{b}.g = {a}.g", (), "bool"),
            )
        return Expr("({1} " + op + " ({0}))", (inner, x), "bool", True)

    def scalar_subquery(self, scope: Scope, a: str) -> Expr:
        dim, _ = self.base("dim")
        d = dim.alias
        form = self.rng.choice(("count(*)", f"max({d}.w)", f"min({d}.name)", f"sum({d}.kb)"))
        kind = {"c": "int", "m": "float", "s": "int"}[form[0]]
        if form.startswith("min"):
            kind = "str"
        where = Expr(f"{d}.k = {a}.g", (), "bool")
        inner = Select((Item(Expr(form, (), kind, agg=True), "v"),), dim, where)
        return Expr("({0})", (inner,), kind)

    def q_topk(self) -> Select:
        """A wide row set ordered by one key then `id`, with a LIMIT: quiver's Top-K that reads
        the wide columns late, over Parquet."""
        rng = self.rng
        src, scope = self.base(self.fact())
        a = src.alias
        names = [c for c in columns_of("mid") if c.safe and c.name != "id"]
        chosen = rng.sample(names, rng.randint(3, 10))
        items = [Item(self.column(scope, a, columns_of("mid")[0]), "id")]
        items += [Item(self.column(scope, a, c), c.name) for c in chosen]
        key = rng.randrange(1, len(items))
        order = (Order(key, self.chance(0.5), self.chance(0.5)), Order(0, self.chance(0.5), False))
        where = self.predicate(scope, 1) if self.chance(0.7) else None
        return Select(tuple(items), src, where, order_by=order, limit=rng.choice((1, 5, 10, 100)))


@dataclass(frozen=True)
class KeyColumn(OutColumn):
    """A grouped subquery's key, remembering the fact column it groups by."""

    origin_name: str = ""


def _not_unique(c):
    """The column (a data.Column or an OutColumn) as a join's output has it: repeatable."""
    return replace(c, unique=False) if c.unique else c


def joins_grouped_subquery(source) -> bool:
    if isinstance(source, Join):
        return joins_grouped_subquery(source.left) or joins_grouped_subquery(source.right)
    return (
        isinstance(source, Derived)
        and isinstance(source.query, Select)
        and bool(source.query.group_by)
    )


def keys_of(q: Select) -> list:
    return list(q.group_by) if q.group_by else [i.expr for i in q.items]
