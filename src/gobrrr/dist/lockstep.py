"""Running under torchrun: the world, the process groups, and doing everything in lockstep.

- `World.from_env()`: RANK, WORLD_SIZE, LOCAL_RANK as torchrun sets them.
- `setup(world, device, timeout_s)`: the default process group, if the target has not
  made one (NCCL on CUDA with the device from LOCAL_RANK, gloo on CPU), with the timeout;
  and gobrrr's own *control* group (gloo, CPU tensors, the same timeout) for every
  collective gobrrr issues itself: sample counts, statuses, the gathered results. A
  control group apart means gobrrr's bookkeeping never enters the user's NCCL stream and
  always has a timeout, even when the target made the default group with its own.
- `Lockstep.stage(what, fn)`: every rank runs `fn`, then all ranks exchange a status: a
  rank that raised makes every rank raise DistError naming it, and a rank that never
  arrives (dead, or stuck in a collective its peer never joined) makes the others time
  out on the control group (`timeout_s`) and raise DistError. Never a hang longer than
  the timeout per collective.
- A Lockstep is the coordinator (coordinator.py) of the timer and the A/B harness:
  `decide` is rank 0's value broadcast, `share` every rank's value, so every rank makes
  exactly the same number of calls: a rank that made one call more would wait forever
  in a collective its peers never issue.
"""

from __future__ import annotations

import atexit
import datetime as _dt
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from gobrrr.errors import UserError, first_line

__all__ = ["World", "DistError", "Lockstep", "setup", "timeout_from_env",
           "DEFAULT_TIMEOUT_S"]

T = TypeVar("T")

# Every collective gobrrr issues, and the default group gobrrr creates, times out after
# this many seconds (GOBRRR_DIST_TIMEOUT_S or doctor's --dist-timeout overrides it): long
# enough for a slow rank's calibration (~10-30 s on a loaded CPU) between two stages.
DEFAULT_TIMEOUT_S = 60.0


def timeout_from_env() -> float:
    raw = os.environ.get("GOBRRR_DIST_TIMEOUT_S")
    if raw is None:
        return DEFAULT_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        raise UserError(f"GOBRRR_DIST_TIMEOUT_S={raw!r} is not a number of seconds") from None
    if value <= 0:
        raise UserError(f"GOBRRR_DIST_TIMEOUT_S={raw!r} must be positive")
    return value


class DistError(UserError):
    """A distributed run that cannot go on: one line (on rank 0), exit 2 on every rank."""


@dataclass(frozen=True)
class World:
    rank: int
    size: int
    local_rank: int

    @staticmethod
    def from_env() -> World | None:
        """The world torchrun describes, or None outside torchrun."""
        if "WORLD_SIZE" not in os.environ or "RANK" not in os.environ:
            return None
        try:
            return World(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]),
                         int(os.environ.get("LOCAL_RANK", os.environ["RANK"])))
        except ValueError:
            raise UserError("RANK, WORLD_SIZE and LOCAL_RANK must be integers (as torchrun "
                            "sets them)") from None


def keep_stdout_for_results() -> None:
    """Point file descriptor 1 at stderr and keep the real stdout for Python's
    `sys.stdout` only. Under torchrun every rank's stdout is one stream, where rank 0's
    --json goes, and C libraries write to descriptor 1 directly: NCCL with NCCL_DEBUG set
    printed "NCCL version 2.28.9+cuda13.0" before the JSON on the H200s, and pointing
    NCCL_DEBUG_FILE at stderr did not stop it. Idempotent."""
    import io
    import sys

    if getattr(sys.stdout, "_gobrrr_kept", False):
        return
    sys.stdout.flush()
    kept = os.dup(1)
    os.dup2(2, 1)
    out = io.TextIOWrapper(os.fdopen(kept, "wb"), encoding=sys.stdout.encoding or "utf-8",
                           line_buffering=True)
    out._gobrrr_kept = True  # type: ignore[attr-defined]
    sys.stdout = out


def setup(world: World, device: str, timeout_s: float) -> tuple[Any, str]:
    """(the control group, the backend of the default group). Initialises the default
    group unless one exists; on CUDA first binds this process to GPU LOCAL_RANK."""
    import torch
    import torch.distributed as dist

    if not dist.is_available():
        raise UserError("torch.distributed is not available in this torch build")
    timeout = _dt.timedelta(seconds=timeout_s)
    if device == "cuda":
        n = torch.cuda.device_count()
        if n == 0:
            raise UserError("NCCL needs GPUs: no CUDA device is visible on this rank "
                            "(use --device cpu for gloo)")
        if world.local_rank >= n:
            raise UserError(f"LOCAL_RANK {world.local_rank} but only {n} GPU(s) visible: "
                            "start at most one process per GPU")
        torch.cuda.set_device(world.local_rank)
    keep_stdout_for_results()
    created = not dist.is_initialized()
    if created:
        backend = "nccl" if device == "cuda" else "gloo"
        kwargs: dict[str, Any] = {}
        if device == "cuda":  # eager NCCL init on this device: no lazy init inside a step
            kwargs["device_id"] = torch.device("cuda", world.local_rank)
        dist.init_process_group(backend, timeout=timeout, **kwargs)
    backend = str(dist.get_backend())
    ctrl = dist.new_group(backend="gloo", timeout=timeout)
    atexit.register(_destroy, ctrl, created and backend == "gloo")
    return ctrl, backend


def _destroy(ctrl: Any, everything: bool) -> None:
    """At exit, gobrrr's gloo groups (the control group; the default one too when gobrrr
    made it with gloo): left to the interpreter's teardown, gloo's threads were destroyed
    still running, and a rank died of SIGABRT ("terminate called without an active
    exception") after its error line, about one exit in ten (tests/test_dist.py, ranks
    on different targets). An NCCL default group is left as before: destroying it can
    wait on a peer that is gone."""
    import torch.distributed as dist

    try:
        if dist.is_initialized():
            dist.destroy_process_group(None if everything else ctrl)
    except Exception:  # noqa: BLE001 - best effort: the process is ending anyway
        pass


class Lockstep:
    """gobrrr's collectives on the control group (module docstring)."""

    def __init__(self, world: World, ctrl: Any, timeout_s: float) -> None:
        self.world = world
        self.ctrl = ctrl
        self.timeout_s = timeout_s

    @property
    def rank(self) -> int:
        return self.world.rank

    @property
    def size(self) -> int:
        return self.world.size

    def share(self, obj: Any, what: str) -> list[Any]:
        """The coordinator's share (coordinator.py): all_gather."""
        return self.all_gather(obj, what)

    def decide(self, obj: Any, what: str) -> Any:
        """The coordinator's decide (coordinator.py): rank 0's value, broadcast."""
        return self.broadcast(obj, what)

    def _collective(self, what: str, fn: Callable[[], T]) -> T:
        try:
            return fn()
        except Exception as exc:  # a timeout or a peer that closed its connection
            raise DistError(f"rank {self.rank}: a peer did not reach '{what}' within "
                            f"{self.timeout_s:g} s (it died, raised, or hangs in a "
                            f"collective): {first_line(exc)}") from exc

    def all_gather(self, obj: Any, what: str) -> list[Any]:
        """Every rank's `obj` on every rank. Every control message is an all-gather of
        ("ok", obj) or ("failed", line): a rank that failed while its peers were
        exchanging anything makes them all raise at once, whatever they were doing."""
        return self._exchange(("ok", obj), what)

    def _exchange(self, msg: tuple[str, Any], what: str) -> list[Any]:
        import torch.distributed as dist

        out: list[Any] = [None] * self.world.size
        self._collective(what, lambda: dist.all_gather_object(out, msg, group=self.ctrl))
        failed = [(r, m[1]) for r, m in enumerate(out) if m[0] != "ok"]
        if failed:
            r, line = failed[0]
            more = f" (and {len(failed) - 1} other rank(s))" if len(failed) > 1 else ""
            raise DistError(f"rank {r} failed while {line}{more}")
        return [m[1] for m in out]

    def gather(self, obj: Any, what: str) -> list[Any] | None:
        """Every rank's `obj` on rank 0 (None elsewhere): an all-gather, for one
        protocol (results are small dicts)."""
        got = self.all_gather(obj, what)
        return got if self.rank == 0 else None

    def broadcast(self, obj: Any, what: str) -> Any:
        """Rank 0's `obj` on every rank (an all-gather: see all_gather)."""
        return self.all_gather(obj if self.rank == 0 else None, what)[0]

    def stage(self, what: str, fn: Callable[[], T]) -> T:
        """Run `fn` on every rank, then agree that every rank succeeded: if any rank
        raised, every rank raises DistError with the first failing rank's one line."""
        try:
            result = fn()
        except DistError:
            raise  # a peer's failure, already known to every rank that exchanged it
        except Exception as exc:
            self._exchange(("failed", f"{what}: {first_line(exc)}"), what)
            raise AssertionError("unreachable: _exchange raises on a failure") from exc
        self.all_gather(None, what)
        return result
