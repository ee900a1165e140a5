"""Running under torchrun: the world, the process groups, and doing everything in lockstep.

- `World.from_env()`: RANK, WORLD_SIZE, LOCAL_RANK as torchrun sets them.
- `setup(world, device, timeout_s)`: the default process group, if the target has not
  made one (NCCL on CUDA with the device from LOCAL_RANK, gloo on CPU), with the timeout;
  and gobrrr's own *control* group (gloo, CPU tensors, the same timeout) for every
  collective gobrrr issues itself: sample counts, statuses, the gathered results. A
  control group apart means gobrrr's bookkeeping never enters the user's NCCL stream and
  always has a timeout, even when the target made the default group with its own.
- `Lockstep.stage(what, fn)`: every rank runs `fn`, then all ranks agree it succeeded: a
  rank that raised writes its line to the job's store and exits, its peers' collectives
  fail and they raise DistError with that line (rank 0 prints it); a rank that never
  arrives (it hangs) makes the others time out (`timeout_s`) and say so. Never a hang
  longer than the timeout.
- A Lockstep is the coordinator (coordinator.py) of the timer and the A/B harness:
  `decide` is rank 0's value broadcast, `share` every rank's value, so every rank makes
  exactly the same number of calls: a rank that made one call more would wait forever
  in a collective its peers never issue.
"""

from __future__ import annotations

import atexit
import datetime as _dt
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from gobrrr.errors import UserError, first_line

__all__ = ["World", "DistError", "Lockstep", "setup", "timeout_from_env",
           "collective_failure", "DEFAULT_TIMEOUT_S", "REPORT_WAIT_S"]

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


# gobrrr made the default group (the CLI under torchrun), not the user's script: a
# failing rank may then tear it down so that its peers' collectives fail at once.
_OWN_DEFAULT_GROUP = False


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
        global _OWN_DEFAULT_GROUP
        _OWN_DEFAULT_GROUP = True
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


# After a collective failed, how long a rank waits for a peer's own report of what went
# wrong (the peer writes it before it exits, which is what closed the connection).
REPORT_WAIT_S = 3.0
# Errors of a collective itself (a peer gone, a timeout), as gloo and NCCL word them: a
# consequence of another rank's failure, never the cause to report.
_COLLECTIVE_MARKS = ("Connection closed by peer", "Connection reset by peer",
                     "Timed out waiting", "Application timeout caused pair closure",
                     "Broken pipe", "NCCL communicator was aborted", "NCCL error")


def collective_failure(exc: BaseException) -> bool:
    """Whether `exc` (or the user's exception a WorkloadError wraps) is a collective's own
    failure: a peer that died or hangs, not an error of this rank's code."""
    import torch.distributed as dist

    inner = getattr(exc, "original", exc)
    if isinstance(inner, dist.DistError):
        return True
    return isinstance(inner, RuntimeError) and any(m in str(inner) for m in _COLLECTIVE_MARKS)


class Lockstep:
    """gobrrr's collectives on the control group (module docstring).

    When a rank fails, it writes its one line to the job's store (the default group's,
    torchrun's TCPStore) before it raises, and the process exits: its peers, blocked in a
    collective of the workload's or of gobrrr's, see that collective fail (the connection
    closed) and report the line they find in the store, so rank 0 prints the failing
    rank's own exception. A rank that hangs reports nothing: its peers' collectives time
    out after `timeout_s`, and they say so."""

    _made = 0  # Locksteps made in this process: every rank makes them in the same order

    def __init__(self, world: World, ctrl: Any, timeout_s: float) -> None:
        Lockstep._made += 1
        self.world = world
        self.ctrl = ctrl
        self.timeout_s = timeout_s
        self._key = f"gobrrr/lockstep{Lockstep._made}/failed"
        # kept: the store outlives the groups a failing rank tears down
        self._kept_store = self._store()

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

    @staticmethod
    def _store() -> Any:
        import torch.distributed.distributed_c10d as c10d

        try:
            return c10d._get_default_store()
        except (RuntimeError, ValueError, AttributeError):  # no store: no reports
            return None

    def _report(self, line: str) -> None:
        """This rank's failure, for peers whose collective fails because of it."""
        store = self._kept_store
        if store is not None:
            try:
                store.set(f"{self._key}/{self.rank}", line)
            except Exception:  # noqa: BLE001 - the store is gone too: the timeout says it
                pass

    def _reported(self, wait_s: float) -> tuple[int, str] | None:
        """(rank, line) of the first rank that reported a failure, waiting up to
        `wait_s` for one; None when none did."""
        store = self._kept_store
        if store is None:
            return None
        deadline = time.monotonic() + wait_s
        keys = [f"{self._key}/{r}" for r in range(self.size)]
        while True:
            try:
                for r, k in enumerate(keys):
                    if store.check([k]):
                        return r, store.get(k).decode()
            except Exception:  # noqa: BLE001 - the store's host (rank 0's agent) is gone
                return None
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.1)

    def _peer_failed(self, what: str, exc: BaseException, since: float) -> DistError:
        """The DistError of a collective that failed: the peer's own line when it
        reported one, else what this rank saw (a timeout: the peer hangs; a closed
        connection before it: the peer died)."""
        found = self._reported(REPORT_WAIT_S)
        if found is not None:
            if self.rank == 0 and self._kept_store is not None:
                try:  # the failing rank may exit now: rank 0 has its line to print
                    self._kept_store.set(f"{self._key}/seen", "1")
                except Exception:  # noqa: BLE001 - it exits at its own deadline anyway
                    pass
            return DistError(f"rank {found[0]} failed while {found[1]}")
        waited = time.monotonic() - since
        if waited >= 0.9 * self.timeout_s:
            return DistError(f"rank {self.rank}: a peer did not reach '{what}' within "
                             f"{self.timeout_s:g} s and reported no error (it hangs, or "
                             f"died without a word): {first_line(exc)}")
        return DistError(f"rank {self.rank}: a peer's connection closed after "
                         f"{waited:.1f} s, during '{what}', and it reported no error (it "
                         f"died): {first_line(exc)}")

    def _release_peers(self) -> None:
        """After this rank reported its failure: peers blocked in a collective of the
        workload's wait for it until the timeout, unless its connections close. Where
        gobrrr made the default group (the CLI), tear every group down now (gloo: their
        pending collectives fail at once, "Connection closed by peer"; NCCL: aborted,
        which never waits on a peer), then give rank 0 a moment to read the line, so
        torchrun, which stops every rank once one has exited, does not stop rank 0
        before it prints. The user's own group (gobrrr.diagnose in their script) is left
        alone: peers then find the line when their collective times out."""
        import torch.distributed as dist
        import torch.distributed.distributed_c10d as c10d

        if not _OWN_DEFAULT_GROUP or not dist.is_initialized():
            return
        try:
            if dist.get_backend() == "nccl":
                c10d._abort_process_group()
            else:
                dist.destroy_process_group()
        except Exception:  # noqa: BLE001 - best effort: the timeout still bounds the wait
            return
        if self.rank != 0 and self._kept_store is not None:
            deadline = time.monotonic() + 2 * REPORT_WAIT_S
            while time.monotonic() < deadline:
                try:
                    if self._kept_store.check([f"{self._key}/seen"]):
                        return
                except Exception:  # noqa: BLE001 - the store is gone: nobody to wait for
                    return
                time.sleep(0.05)

    def _collective(self, what: str, fn: Callable[[], T]) -> T:
        since = time.monotonic()
        try:
            return fn()
        except Exception as exc:  # a timeout or a peer that closed its connection
            raise self._peer_failed(what, exc, since) from exc

    def all_gather(self, obj: Any, what: str) -> list[Any]:
        """Every rank's `obj` on every rank."""
        import torch.distributed as dist

        out: list[Any] = [None] * self.world.size
        self._collective(what, lambda: dist.all_gather_object(out, obj, group=self.ctrl))
        return out

    def gather(self, obj: Any, what: str) -> list[Any] | None:
        """Every rank's `obj` on rank 0 (None elsewhere): an all-gather, for one
        protocol (results are small dicts)."""
        got = self.all_gather(obj, what)
        return got if self.rank == 0 else None

    def broadcast(self, obj: Any, what: str) -> Any:
        """Rank 0's `obj` on every rank (an all-gather: see all_gather)."""
        return self.all_gather(obj if self.rank == 0 else None, what)[0]

    def stage(self, what: str, fn: Callable[[], T]) -> T:
        """Run `fn` on every rank, then agree that every rank succeeded. A rank whose
        `fn` raises reports its line (class docstring) and raises DistError with it; a
        rank whose `fn` failed in a collective (the failing peer gone) raises the peer's
        line; every other rank finds it when the agreement fails."""
        since = time.monotonic()
        try:
            result = fn()
        except DistError:
            raise  # a peer's failure, already reported
        except Exception as exc:
            if collective_failure(exc):
                raise self._peer_failed(what, exc, since) from exc
            line = f"{what}: {first_line(exc)}"
            self._report(line)
            self._release_peers()
            raise DistError(f"rank {self.rank} failed while {line}") from exc
        self.all_gather(None, what)
        return result
