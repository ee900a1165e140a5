"""Who decides, when several processes measure one job together.

The timer (timing.measure) and the A/B harness (remedies/verify.ab_time) take a
coordinator. Every count of calls they make (warm-up, calls per sample, when to stop) is
a decision, and every time they measure is shared:

- `decide(value)`: rank 0's value, on every rank. A rank that made one call more than
  its peers would wait forever in a collective they never issue, so under torchrun no
  rank may decide alone.
- `share(value)`: every rank's value, on every rank (a step ends when its slowest rank
  does: the caller takes the max).

`SOLO` is the coordinator of one process: it decides alone and shares with itself, so
the single-process paths run the very same loop. Under torchrun, gobrrr.dist.lockstep's
Lockstep is the coordinator (its control group, with timeouts).
"""

from __future__ import annotations

from typing import Any, Protocol, TypeVar

__all__ = ["Coordinator", "Solo", "SOLO"]

T = TypeVar("T")


class Coordinator(Protocol):
    @property
    def rank(self) -> int: ...

    @property
    def size(self) -> int: ...

    def share(self, obj: Any, what: str) -> list[Any]:
        """Every rank's `obj`, in rank order, on every rank."""
        ...

    def decide(self, obj: Any, what: str) -> Any:
        """Rank 0's `obj` on every rank."""
        ...


class Solo:
    """One process: its own decisions, its own values."""

    rank = 0
    size = 1

    def share(self, obj: T, what: str) -> list[T]:
        return [obj]

    def decide(self, obj: T, what: str) -> T:
        return obj


SOLO = Solo()
