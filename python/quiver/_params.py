"""Placeholders in SQL text: DB-API's ``?`` (qmark) next to quiver's ``$1`` and ``$name``.

The engine knows ``$1`` and ``$name``; a ``?`` becomes the next ``$n`` here, before the text
reaches it. The SQL is scanned token by token so that a ``?`` or ``$`` inside a string, a
quoted identifier or a comment is left alone.
"""

from __future__ import annotations

import re

from quiver.errors import InvalidInputError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

# What may contain a `?` or `$` that is not a placeholder, then the placeholders themselves.
# Strings double their quote to escape it (`'it''s'`), E'...' strings also take backslashes.
_TOKENS = re.compile(
    r"""
      (?P<skip>
          [eE]'(?:[^'\\]|\\.|'')*'
        | '(?:[^']|'')*'
        | "(?:[^"]|"")*"
        | `[^`]*`
        | --[^\n]*
        | /\*.*?\*/
        | \$(?P<tag>[A-Za-z_]\w*|)\$.*?\$(?P=tag)\$
      )
    | (?P<qmark>\?)
    | \$(?P<number>\d+)
    | \$(?P<name>[A-Za-z_]\w*)
    """,
    re.VERBOSE | re.DOTALL,
)


class Placeholders:
    """The placeholders of one SQL text, and the text the engine runs."""

    __slots__ = ("names", "numbers", "qmarks", "sql")

    def __init__(self, sql: str) -> None:
        self.qmarks = 0
        self.numbers: set[int] = set()
        self.names: set[str] = set()
        # Cheap exit for the common query without any placeholder.
        if "?" not in sql and "$" not in sql:
            self.sql = sql
            return
        parts = []
        end = 0
        for match in _TOKENS.finditer(sql):
            if match.group("qmark"):
                self.qmarks += 1
                parts.append(sql[end : match.start()])
                parts.append(f"${self.qmarks}")
                end = match.end()
            elif match.group("number"):
                self.numbers.add(int(match.group("number")))
            elif match.group("name"):
                self.names.add(match.group("name"))
        parts.append(sql[end:])
        self.sql = "".join(parts)
        if self.qmarks and (self.numbers or self.names):
            raise InvalidInputError(
                "the statement mixes ? placeholders with $1/$name ones; use one style"
            )

    @property
    def positional(self) -> int:
        """How many values a list of parameters must hold."""
        return self.qmarks or max(self.numbers, default=0)

    def check(self, params: Any) -> None:
        """Raises :class:`InvalidInputError` (a ``ProgrammingError``) unless ``params`` fills every placeholder."""
        if params is None:
            if self.qmarks:
                raise InvalidInputError(
                    f"the statement has {self.qmarks} ? placeholder(s) but no parameters were given"
                )
            return
        if isinstance(params, dict):
            if self.qmarks or self.numbers:
                raise InvalidInputError(
                    "parameters given as a dict fill $name placeholders; this statement uses "
                    + ("?" if self.qmarks else "$1, $2, ...")
                    + ", so give a list or tuple"
                )
            missing = sorted(
                name for name in self.names if name not in params and f"${name}" not in params
            )
            if missing:
                raise InvalidInputError(
                    "no value given for placeholder(s) " + ", ".join(f"${n}" for n in missing)
                )
            return
        if isinstance(params, (str, bytes)):
            raise InvalidInputError(
                "parameters must be a list or tuple of values (or a dict), not a single "
                f"{type(params).__name__}"
            )
        try:
            given = len(params)
        except TypeError:
            raise InvalidInputError(
                f"parameters must be a list, tuple or dict, not {type(params).__name__}"
            ) from None
        if self.names:
            raise InvalidInputError(
                "the statement uses $name placeholders; give the parameters as a dict"
            )
        wanted = self.positional
        if given != wanted:
            style = "?" if self.qmarks else "$n"
            raise InvalidInputError(
                f"the statement has {wanted} {style} placeholder(s) but {given} parameter(s) "
                "were given"
            )
