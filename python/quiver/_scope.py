"""Finding a table name among the caller's variables (DuckDB's replacement scans).

A name in a query that is not a table in the catalog is looked up in the calling frame's
locals, then its globals, then the frames further out; an exact name wins over one that
differs only by case. Only objects quiver can scan match.
"""

from __future__ import annotations

import sys
from typing import Any

from quiver import _sources


class Resolver:
    """Asked by the engine, during planning, for names the catalog does not know."""

    __slots__ = ("_frames",)

    def __init__(self, depth: int) -> None:
        frames = []
        frame = sys._getframe(depth + 1)
        while frame is not None:
            frames.append(frame)
            frame = frame.f_back
        self._frames = frames

    def _namespaces(self):
        for frame in self._frames:
            yield frame.f_locals
            if frame.f_globals is not frame.f_locals:
                yield frame.f_globals

    def lookup(self, name: str, words: Any = None) -> Any:
        """The table for ``name`` (a ``_quiver.Table``), or None. ``words``: the query's
        lowercased words when it can only reach the columns they name."""
        found = self._find(name)
        return None if found is None else _sources.table(found, words)

    def _find(self, name: str) -> Any:
        for namespace in self._namespaces():
            if name in namespace and _sources.can_scan(namespace[name]):
                return namespace[name]
        lowered = name.lower()
        for namespace in self._namespaces():
            matches = [
                key
                for key, value in list(namespace.items())
                if isinstance(key, str) and key.lower() == lowered and _sources.can_scan(value)
            ]
            if len(matches) == 1:
                return namespace[matches[0]]
        return None

    def candidates(self) -> list[str]:
        seen: dict[str, None] = {}
        for namespace in self._namespaces():
            for key, value in list(namespace.items()):
                if (
                    isinstance(key, str)
                    and not key.startswith("_")
                    and _sources.is_table_like(value)
                ):
                    seen.setdefault(key)
        return sorted(seen)

    def close(self) -> None:
        self._frames = []
