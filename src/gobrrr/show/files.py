"""A report's files written while a program runs on (`gobrrr run`, the trainer
callbacks): each one that cannot be written is a warning, never the program's failure."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from gobrrr import jsontext
from gobrrr.errors import WARNING

__all__ = ["write_report_files", "write_files"]


def write_report_files(d: Mapping[str, Any], json_path: Path | None, html_path: Path | None,
                       trace_path: Path | None, say: Callable[[str], None]) -> None:
    """The report's JSON, Perfetto trace and HTML page, those asked for, now (the
    program may run for hours more); a file that cannot be written is said and skipped."""
    from gobrrr.show import save_html, save_trace

    writes: list[tuple[Path, Callable[[Path], Any]]] = []
    if json_path is not None:
        writes.append((json_path, lambda p: p.write_text(jsontext.dumps(d))))
    if trace_path is not None:
        writes.append((trace_path, lambda p: save_trace(d, p)))
    if html_path is not None:
        writes.append((html_path, lambda p: save_html(d, p)))
    for failed in write_files(writes, say):
        say(f"{WARNING}{failed}")


def write_files(writes: Sequence[tuple[Path, Callable[[Path], Any]]],
                say: Callable[[str], None]) -> list[str]:
    """Each file written (its folder created), `say`ing so; the ones that failed, one
    line each ("cannot write PATH: why"), for the caller to warn or fail with."""
    failed: list[str] = []
    for path, write in writes:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write(path)
            say(f"wrote {path}")
        except OSError as exc:
            failed.append(f"cannot write {path}: {exc.strerror or exc}")
    return failed
