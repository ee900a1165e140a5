"""doctor's and optimize's distributed entry points: `--nproc-per-node N` starts torchrun
(torch's own launcher, `python -m torch.distributed.run --standalone`), and a process that
torchrun started runs the lockstep diagnosis (diagnose.py) or search (optimize.py). Rank 0
alone writes the result; every rank exits non-zero when any rank fails."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Callable, Sequence
from typing import Any

from gobrrr.dist.lockstep import DistError
from gobrrr.errors import UserError

__all__ = ["launch", "strip_option", "run_rank", "run_child"]

# Signals a launcher passes on to its child (torchrun, which stops its workers on them).
_FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def strip_option(argv: Sequence[str], option: str) -> list[str]:
    """argv without `option VALUE` / `option=VALUE`."""
    out: list[str] = []
    skip = False
    for a in argv:
        if skip:
            skip = False
            continue
        if a == option:
            skip = True
            continue
        if a.startswith(option + "="):
            continue
        out.append(a)
    return out


def launch(nproc: int, argv: Sequence[str] | None = None, command: str = "doctor") -> int:
    """Run this same `command` (doctor, optimize) under torchrun with `nproc`
    processes; its exit code. `argv`: the command line after the program name (default:
    sys.argv[1:]); it must contain `command`."""
    args = list(sys.argv[1:] if argv is None else argv)
    if command not in args:
        raise UserError(f"--nproc-per-node: cannot find the {command} command on the "
                        f"command line; run torchrun --nproc-per-node N -m gobrrr {command} "
                        "... instead")
    i = args.index(command)
    rest = strip_option(args[i + 1:], "--nproc-per-node")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           "--nproc-per-node", str(nproc), "-m", "gobrrr", *args[:i], command, *rest]
    return run_child(cmd)


def _die_with_parent() -> None:
    """In the child, before exec (Linux): SIGTERM when the launcher dies, even of a
    SIGKILL no handler sees; torchrun then stops its workers. Elsewhere: nothing."""
    if sys.platform.startswith("linux"):
        import ctypes

        PR_SET_PDEATHSIG = 1
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM))


def run_child(cmd: Sequence[str]) -> int:
    """Run `cmd` (torchrun) and stop it with this process: a SIGTERM, SIGINT or SIGHUP
    sent to the launcher is passed on (subprocess.call passed nothing: stopping
    `gobrrr doctor --nproc-per-node 2` left torchrun and both workers running, and they
    printed the report later), and the child gets SIGTERM when the launcher dies. The
    child's exit code; 128 + the signal's number when a signal stopped the launcher."""
    proc = subprocess.Popen(list(cmd), preexec_fn=_die_with_parent)  # noqa: PLW1509
    got: list[int] = []

    def forward(signum: int, _frame: Any) -> None:
        got.append(signum)
        proc.send_signal(signum)

    previous = {s: signal.signal(s, forward) for s in _FORWARDED}
    try:
        code = proc.wait()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    return 128 + got[0] if got else code


def run_rank(body: Callable[[], Any], rank: int) -> Any:
    """A rank's body: a DistError (a peer failed; rank 0 says which) is printed by rank 0
    only and exits 2 on every rank; every other error keeps the CLI's one style."""

    try:
        return body()
    except DistError as exc:
        if rank == 0:
            raise
        sys.exit(exc.exit_code)
