"""One error style: a one-line message and exit code 2 for anything the user can fix;
a failure the run survives is a note that starts with WARNING."""

from __future__ import annotations

import traceback
from pathlib import Path

__all__ = ["UserError", "WorkloadError", "WARNING", "first_line", "user_traceback"]

_PKG_DIR = str(Path(__file__).resolve().parent)
# Notes that start so are failures the run survived (an experiment that raised, NaN in
# the output): the CLI prints them on stderr even with -q, which silences progress only.
WARNING = "warning: "


class UserError(Exception):
    """Bad input the user can fix: shown as one line, exit code 2."""

    exit_code = 2


class WorkloadError(Exception):
    """The user's workload raised: shown with the user's own traceback, exit code 2."""

    exit_code = 2

    def __init__(self, where: str, exc: BaseException) -> None:
        super().__init__(f"the workload raised {type(exc).__name__} while {where}: {exc}")
        self.where = where
        self.original = exc


def user_traceback(exc: BaseException) -> str:
    """The traceback of `exc` with gobrrr's own frames (and torch's plumbing above the
    user's code) removed, so the user sees where *their* code failed."""
    frames = traceback.extract_tb(exc.__traceback__)
    keep = [f for f in frames if not f.filename.startswith(_PKG_DIR)]
    lines = ["Traceback (most recent call last):\n"]
    lines += traceback.format_list(keep)
    lines += traceback.format_exception_only(type(exc), exc)
    return "".join(lines)


def first_line(exc: BaseException, limit: int = 240) -> str:
    """"Type: the message's first line" (the type alone for an empty message): what a
    warning or a remedy's reason shows of an exception. For a WorkloadError, the user's
    exception: gobrrr's wrapper adds nothing the warning's own words do not say."""
    if isinstance(exc, WorkloadError):
        exc = exc.original
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0][:limit]}" if lines else type(exc).__name__
