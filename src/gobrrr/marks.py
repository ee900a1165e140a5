"""What a script may call to mark its own steps under `gobrrr run`: `gobrrr.step()` and
`with gobrrr.watch():`. Light on purpose (no torch import): a script keeps the calls
when it runs without gobrrr, where they do nothing. The script source (script.py)
registers the watcher of the script it runs here."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, Protocol

__all__ = ["Marks", "step", "watch", "running", "ACTIVE"]


class Marks(Protocol):
    """What a running script's watcher does with the marks."""

    def manual(self) -> None: ...

    def enter_watch(self) -> None: ...

    def exit_watch(self) -> None: ...


# the watchers of the scripts now running under gobrrr run, innermost last
ACTIVE: list[Any] = []


def running() -> Marks | None:
    return ACTIVE[-1] if ACTIVE else None


def step() -> None:
    """Mark the end of a step in a script run by `gobrrr run` (it then counts these
    instead of optimizer steps or forwards). Outside `gobrrr run`: does nothing."""
    if (w := running()) is not None:
        w.manual()


@contextlib.contextmanager
def watch() -> Iterator[None]:
    """Under `gobrrr run`, count steps only inside this region (its first entry restarts
    the warm-up). Outside `gobrrr run`: does nothing. Also a decorator (`@watch()`)."""
    w = running()
    if w is not None:
        w.enter_watch()
    try:
        yield
    finally:
        if w is not None:
            w.exit_watch()
