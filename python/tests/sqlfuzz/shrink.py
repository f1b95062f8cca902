"""Makes a failing case smaller while it fails the same way (the same error, or a mismatch).

Greedy, largest steps first: drop a clause (WHERE, HAVING, ORDER BY, LIMIT, DISTINCT), an
output column, a GROUP BY key, a join side or a set operation's branch; move to a smaller
table; replace an expression by one of its operands of the same kind or by a simpler form the
generator recorded. A candidate the reference rejects (DuckDB, or quiver's base query for
TLP/NoREC) is not a reproduction and is skipped. Then :func:`shrink_rows` drops rows of the
tables while the failure persists (delta debugging over row chunks).
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
import time
from collections.abc import Iterator

import pyarrow as pa

from sqlfuzz.nodes import Derived, Expr, Join, Select, SetOp, Table, replace_at, walk
from sqlfuzz.oracles import Case, Harness, Outcome
from sqlfuzz.sources import Engines

SMALLER_TABLE = {"big": "mid", "mid": "tiny"}


def _select_candidates(q: Select) -> Iterator[Select]:
    if q.where is not None:
        yield dataclasses.replace(q, where=None)
    if q.having is not None:
        yield dataclasses.replace(q, having=None)
    if q.order_by or q.limit is not None:
        yield dataclasses.replace(q, order_by=(), limit=None, offset=None)
    if q.order_by and q.limit is None:
        yield dataclasses.replace(q, order_by=())
    if q.offset:
        yield dataclasses.replace(q, offset=None)
    if q.distinct:
        yield dataclasses.replace(q, distinct=False)
    if len(q.items) > 1:
        for i in range(len(q.items)):
            yield _drop_item(q, i)
    for i, key in enumerate(q.group_by):
        rest = q.group_by[:i] + q.group_by[i + 1 :]
        items = tuple(item for item in q.items if item.expr != key)
        if items:
            yield _keep_items(q, items, rest)


def _drop_item(q: Select, i: int) -> Select:
    return _keep_items(q, q.items[:i] + q.items[i + 1 :], q.group_by)


def _keep_items(q: Select, items: tuple, group_by: tuple) -> Select:
    """`q` with only `items` (ORDER BY positions renumbered; LIMIT kept only if the order stays
    total, since otherwise either answer would be right)."""
    position = {id(item): n for n, item in enumerate(items)}
    order = []
    for o in q.order_by:
        kept = position.get(id(q.items[o.position]))
        if kept is not None:
            order.append(dataclasses.replace(o, position=kept))
    shrunk = dataclasses.replace(q, items=items, group_by=group_by, order_by=tuple(order))
    if shrunk.limit is not None and shrunk.order_by and not shrunk.total_order:
        shrunk = dataclasses.replace(shrunk, limit=None, offset=None, order_by=())
    return shrunk


def _expr_candidates(e: Expr) -> Iterator[Expr]:
    yield from e.simpler
    for arg in e.args:
        if (
            isinstance(arg, Expr)
            and arg.kind == e.kind
            and (arg.agg or not e.agg or e.kind == "bool")
        ):
            yield arg


def candidates(node) -> Iterator:
    """Smaller versions of `node` itself (not of its children)."""
    if isinstance(node, Select):
        yield from _select_candidates(node)
    elif isinstance(node, SetOp):
        yield node.left
        yield node.right
        if node.op != "UNION ALL":
            yield dataclasses.replace(node, op="UNION ALL")
    elif isinstance(node, Join):
        yield node.left
        yield node.right
        if node.kind != "JOIN":
            yield dataclasses.replace(node, kind="JOIN")
    elif isinstance(node, Table):
        smaller = SMALLER_TABLE.get(node.name)
        if smaller:
            yield dataclasses.replace(node, name=smaller)
        if node.shout:
            yield dataclasses.replace(node, shout=False)
    elif isinstance(node, Expr):
        yield from _expr_candidates(node)
    elif isinstance(node, Derived) and isinstance(node.query, SetOp):
        yield dataclasses.replace(node, query=node.query.left)


def _variants(body) -> Iterator:
    for path, node in walk(body):
        for smaller in candidates(node):
            yield replace_at(body, path, smaller)
    # A predicate kept whole can still lose its operands one at a time, so also try each
    # node's children in place of a conjunction directly above them.
    for path, node in walk(body):
        if (
            isinstance(node, Expr)
            and node.kind == "bool"
            and node.fmt in ("({0} AND {1})", "({0} OR {1})")
        ):
            for arg in node.args:
                yield replace_at(body, path, arg)


def _same(outcome: Outcome, target: Outcome) -> bool:
    return outcome.status == target.status and outcome.signature == target.signature


def shrink(harness: Harness, case: Case, outcome: Outcome, seconds: float = 60.0) -> tuple:
    """The smallest variant of `case` found within `seconds` that fails like `outcome`."""
    stop = time.monotonic() + seconds
    best, best_outcome = case, outcome
    improved = True
    while improved and time.monotonic() < stop:
        improved = False
        seen = set()
        for body in _variants(best.body):
            if time.monotonic() >= stop:
                break
            key = repr(body)
            if key in seen:
                continue
            seen.add(key)
            candidate = dataclasses.replace(best, body=body)
            result = harness.run(candidate)
            if _same(result, outcome):
                best, best_outcome = candidate, result
                improved = True
                break
    return best, best_outcome


def tables_of(case: Case) -> list[str]:
    return sorted({node.name for _, node in walk(case.body) if isinstance(node, Table)})


def shrink_rows(harness: Harness, case: Case, outcome: Outcome, seconds: float = 60.0):
    """Drops rows of the case's tables while it still fails (delta debugging over chunks of
    rows); returns the smaller tables and the outcome on them, or (None, None) when no row
    could go."""
    stop = time.monotonic() + seconds
    names = tables_of(case)
    tables = {n: harness.engines.tables[n] for n in names}
    threads = (harness.engines.connections_threads[case.connection],)
    single = dataclasses.replace(case, connection=0)
    kept = None
    for name in names:
        chunks = 2
        while time.monotonic() < stop and len(tables[name]) > 1:
            table = tables[name]
            size = -(-len(table) // chunks)
            removed = False
            for start in range(0, len(table), size):
                if time.monotonic() >= stop:
                    break
                rest = pa.concat_tables([table.slice(0, start), table.slice(start + size)])
                result = _run_on({**tables, name: rest}, harness, single, threads)
                if _same(result, outcome):
                    tables[name] = rest
                    kept = result
                    chunks = max(chunks - 1, 2)
                    removed = True
                    break
            if not removed:
                if size == 1:
                    break
                chunks = min(chunks * 2, len(table))
    return (tables, kept) if kept is not None else (None, None)


def _run_on(tables: dict, harness: Harness, case: Case, threads: tuple) -> Outcome:
    """`case` run on engines holding only `tables`."""
    folder = tempfile.mkdtemp(prefix="sqlfuzz-rows-")
    try:
        engines = Engines(tables, folder, threads)
        return Harness(engines, harness.profile, harness.timeout).run(case)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


__all__ = ["candidates", "shrink", "shrink_rows", "tables_of"]
