"""The generated queries as trees, so a failing one can be made smaller part by part.

Expressions are all one node, :class:`Expr`: a format string over child nodes (``"lower({0})"``,
``"({0} AND {1})"``, ``"EXISTS ({0})"``). That keeps the generator short and lets the
minimiser treat every expression alike: replace a node by a child of the same kind, or by a
simpler form the generator recorded (a window without its ORDER BY, say). Queries are
:class:`Select` and :class:`SetOp`; FROM items are :class:`Table`, :class:`Join` and
:class:`Derived`. Every node is immutable; :func:`walk` and :func:`replace_at` edit by path.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Union


@dataclass(frozen=True)
class Expr:
    """``fmt`` with ``{0}``, ``{1}``... filled by ``args`` (expressions or queries).

    ``kind`` is the generator's type (int, float, dec, str, bool, ts, date, rel for a
    query); ``safe``: DuckDB and DataFusion agree on comparing and ordering its values;
    ``agg``: contains an aggregate (not under a window); ``simpler``: smaller forms of this
    node, tried first when minimising.
    """

    fmt: str
    args: tuple = ()
    kind: str = "int"
    safe: bool = True
    agg: bool = False
    domain: str = ""
    summable: bool = False
    unique: bool = False
    simpler: tuple = field(default=(), compare=False)
    origin: tuple = field(default=(), compare=False)

    def sql(self) -> str:
        return self.fmt.format(*(a.sql() for a in self.args))


def col(qualifier: str, column: Any, **overrides) -> Expr:
    """A column reference carrying the column's roles (a data.Column or an output column)."""
    attrs = dict(
        kind=column.kind,
        safe=column.safe,
        domain=column.domain,
        summable=column.summable,
        unique=column.unique,
    )
    attrs.update(overrides)
    return Expr(f"{qualifier}.{column.name}", (), **attrs)


def lit(text: str, kind: str) -> Expr:
    return Expr(text.replace("{", "{{").replace("}", "}}"), (), kind=kind)


@dataclass(frozen=True)
class Item:
    expr: Expr
    alias: str


@dataclass(frozen=True)
class Order:
    """ORDER BY the ``position``-th output column (0-based)."""

    position: int
    desc: bool
    nulls_first: bool

    def sql(self) -> str:
        direction = " DESC" if self.desc else ""
        nulls = " NULLS FIRST" if self.nulls_first else " NULLS LAST"
        return f"{self.position + 1}{direction}{nulls}"


@dataclass(frozen=True)
class Table:
    name: str
    alias: str
    shout: bool = False  # the alias written in capitals here, in lower case where used

    def sql(self) -> str:
        alias = self.alias.upper() if self.shout else self.alias
        return f"{{{{{self.name}}}}} AS {alias}"


@dataclass(frozen=True)
class Join:
    kind: str  # JOIN, LEFT JOIN, RIGHT JOIN, FULL JOIN
    left: Any
    right: Any
    on: Expr

    def sql(self) -> str:
        return f"{self.left.sql()} {self.kind} {self.right.sql()} ON {self.on.sql()}"


@dataclass(frozen=True)
class Derived:
    query: Any
    alias: str
    shout: bool = False

    def sql(self) -> str:
        alias = self.alias.upper() if self.shout else self.alias
        return f"({self.query.sql()}) AS {alias}"


@dataclass(frozen=True)
class Select:
    items: tuple
    source: Any
    where: Expr | None = None
    group_by: tuple = ()
    having: Expr | None = None
    order_by: tuple = ()
    limit: int | None = None
    offset: int | None = None
    distinct: bool = False

    def sql(self) -> str:
        parts = ["SELECT DISTINCT" if self.distinct else "SELECT"]
        parts.append(
            ", ".join(
                f"{i.expr.sql()} AS {i.alias}" if i.alias else i.expr.sql() for i in self.items
            )
        )
        parts.append(f"FROM {self.source.sql()}")
        if self.where is not None:
            parts.append(f"WHERE {self.where.sql()}")
        if self.group_by:
            parts.append("GROUP BY " + ", ".join(e.sql() for e in self.group_by))
        if self.having is not None:
            parts.append(f"HAVING {self.having.sql()}")
        if self.order_by:
            parts.append("ORDER BY " + ", ".join(o.sql() for o in self.order_by))
        if self.limit is not None:
            parts.append(f"LIMIT {self.limit}")
            if self.offset:
                parts.append(f"OFFSET {self.offset}")
        return " ".join(parts)

    @property
    def total_order(self) -> bool:
        """Whether ORDER BY fixes the order of every two rows that differ."""
        ordered = {o.position for o in self.order_by}
        if not ordered:
            return False
        if ordered == set(range(len(self.items))):
            return True
        # A unique column among the keys orders every two rows.
        return any(self.items[o.position].expr.unique for o in self.order_by)


@dataclass(frozen=True)
class SetOp:
    op: str  # UNION ALL, UNION, INTERSECT, EXCEPT
    left: Any
    right: Any

    def sql(self) -> str:
        return f"({self.left.sql()}) {self.op} ({self.right.sql()})"

    @property
    def items(self) -> tuple:
        return self.left.items


Query = Union[Select, SetOp]
Node = Union[Expr, Item, Table, Join, Derived, Select, SetOp, Order]

Path = tuple


def _children(node: Any) -> Iterator[tuple[str, int | None, Any]]:
    if not dataclasses.is_dataclass(node):
        return
    for f in dataclasses.fields(node):
        if f.name == "simpler":
            continue
        value = getattr(node, f.name)
        if isinstance(value, tuple):
            for i, v in enumerate(value):
                if dataclasses.is_dataclass(v):
                    yield f.name, i, v
        elif dataclasses.is_dataclass(value):
            yield f.name, None, value


def walk(node: Any, path: Path = ()) -> Iterator[tuple[Path, Any]]:
    """Every node under `node` (itself first) with its path, depth first."""
    yield path, node
    for name, index, child in _children(node):
        yield from walk(child, (*path, (name, index)))


def replace_at(node: Any, path: Path, new: Any) -> Any:
    if not path:
        return new
    (name, index), rest = path[0], path[1:]
    value = getattr(node, name)
    if index is None:
        return dataclasses.replace(node, **{name: replace_at(value, rest, new)})
    items = list(value)
    items[index] = replace_at(items[index], rest, new)
    return dataclasses.replace(node, **{name: tuple(items)})
