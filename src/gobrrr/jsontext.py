"""JSON text as gobrrr writes it (`--json`, report files): indented for reading, except
tables, which are one row per line. A report's per-call and per-kernel tables hold
thousands of flat rows; indented, each row took 16 lines and a third of its bytes were
spaces (a TinyLlama generation's report: 4.7 MB). One row per line keeps the file
readable and diffable.

A table row's floats are written to TABLE_DIGITS significant digits (7.349566313303171e-07
becomes 7.34957e-07): a row's times, bytes per second and fractions are measurements whose
noise is percents, and the full repr took a tenth of a generation report's bytes (issue 21:
a report under 2 MB). Everything outside tables keeps its full value."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["dumps", "as_saved", "MIN_TABLE_ROWS", "TABLE_DIGITS"]

INDENT = 2
MIN_TABLE_ROWS = 4  # a shorter list of flat dicts reads as well indented
TABLE_DIGITS = 6  # significant digits of a table row's floats (module docstring)
_MARK = "@@gobrrr-table-{}@@"


def _is_table(value: Any) -> bool:
    """A list of MIN_TABLE_ROWS or more dicts whose values are all scalars."""
    return (isinstance(value, list) and len(value) >= MIN_TABLE_ROWS
            and all(isinstance(row, dict) and
                    all(not isinstance(v, dict | list) for v in row.values())
                    for row in value))


def _short(value: Any) -> Any:
    """A float to TABLE_DIGITS significant digits (inf and nan as they are); else as is."""
    if isinstance(value, float):
        return float(f"{value:.{TABLE_DIGITS}g}")
    return value


def dumps(data: Any) -> str:
    """`data` as JSON text: indented by INDENT, every table's rows one per line, their
    floats to TABLE_DIGITS significant digits."""
    tables: list[list[dict[str, Any]]] = []

    def mark(value: Any) -> Any:
        if _is_table(value):
            tables.append(value)
            return _MARK.format(len(tables) - 1)
        if isinstance(value, dict):
            return {k: mark(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [mark(v) for v in value]
        return value

    text = json.dumps(mark(data), indent=INDENT, default=str)
    for i, rows in enumerate(tables):
        quoted = f'"{_MARK.format(i)}"'
        at = text.index(quoted)
        line_start = text.rfind("\n", 0, at) + 1
        pad = " " * (len(text[line_start:at]) - len(text[line_start:at].lstrip(" ")))
        body = ",\n".join(pad + " " * INDENT + json.dumps({k: _short(v) for k, v in r.items()},
                                                       default=str) for r in rows)
        text = text[:at] + "[\n" + body + "\n" + pad + "]" + text[at + len(quoted):]
    return text


def as_saved(data: Any) -> Any:
    """`data` as its saved JSON holds it (table rows' floats to TABLE_DIGITS digits):
    what a renderer draws from, so that the terminal, the page and the trace of a live
    report are the ones `gobrrr show` draws from its file."""
    return json.loads(dumps(data))
