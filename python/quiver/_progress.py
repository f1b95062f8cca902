"""Progress of queries that run longer than a second: a live line in a Jupyter notebook, a
status line on a terminal's stderr, nothing otherwise (scripts, pipes, tests).

``quiver.set_progress_bar(False)`` turns it off (DuckDB: ``enable_progress_bar``).
"""

from __future__ import annotations

import sys

_enabled = True


def set_progress_bar(enabled: bool) -> None:
    """Show (True, the default) or hide the progress of long-running queries."""
    global _enabled
    _enabled = bool(enabled)


def reporter():
    """A callable for ``_quiver.Result.watch``, or None where no one would see it."""
    if not _enabled:
        return None
    if _in_notebook():
        return _NotebookLine()
    stderr = sys.stderr
    if stderr is not None and hasattr(stderr, "isatty") and stderr.isatty():
        return _TerminalLine(stderr)
    return None


def _in_notebook() -> bool:
    ipython = sys.modules.get("IPython")
    if ipython is None:
        return False
    shell = ipython.get_ipython()
    return shell is not None and "IPKernelApp" in getattr(shell, "config", {})


def describe(rows: int, nbytes: int, seconds: float) -> str:
    seconds = max(seconds, 1e-9)
    return (
        f"{rows:,} rows, {_human(nbytes)} read "
        f"({int(rows / seconds):,} rows/s, {_human(nbytes / seconds)}/s), {seconds:.1f} s"
    )


def _human(nbytes: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if nbytes < 1000 or unit == "TB":
            return f"{nbytes:.0f} {unit}" if unit == "B" else f"{nbytes:.1f} {unit}"
        nbytes /= 1000
    return f"{nbytes:.1f} TB"


class _TerminalLine:
    __slots__ = ("_stream",)

    def __init__(self, stream) -> None:
        self._stream = stream

    def __call__(self, rows: int, nbytes: int, seconds: float, done: bool) -> None:
        text = "" if done else "Progress: " + describe(rows, nbytes, seconds)
        self._stream.write("\r\x1b[K" + text)
        self._stream.flush()


class _NotebookLine:
    __slots__ = ("_handle",)

    def __init__(self) -> None:
        self._handle = None

    def __call__(self, rows: int, nbytes: int, seconds: float, done: bool) -> None:
        from IPython.display import HTML, display

        if done:
            html = HTML("")
        else:
            html = HTML(
                '<div style="font-family: monospace">&#9203; quiver: '
                f"{describe(rows, nbytes, seconds)}</div>"
            )
        if self._handle is None:
            self._handle = display(html, display_id=True)
        else:
            self._handle.update(html)
