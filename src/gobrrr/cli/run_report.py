"""`gobrrr run`'s report process: the script's process hands it the closed window
(script_window.Window, pickled) and goes on with the script at once; this process makes
the report (script_report.report_of), writes the --json, --html and --trace files as soon
as it has them, and leaves the report's dict for the script's process, which prints it
after the script's own output (cli/run.py). The script's process so never loads the
analysis (docs/run.md, "The cost after the window").

  python -m gobrrr.cli.run_report JOB.pickle OUT.json

JOB: {"window", "json", "html", "trace", "quiet"}, written by cli/run.py (read, then
removed). OUT: {"report": the report's dict} (exit 0), or {"error": one line} (exit 1).
Progress goes to stderr as the script's process shows it.

The process puts itself below the script before it imports the analysis (seconds of CPU
time): SCHED_IDLE (nice 19 where that is refused) and, as the leader of the session
cli/run.py starts it in, that session's autogroup at nice 19 (lower_priority). On a
machine whose cores the script keeps busy, its steps come first and the report later.
Why: on the H200 a ResNet-50 script whose DataLoader (num_workers=0) ran per-sample
torch transforms on 16 intra-op threads waited 0.16 s for its batch before the window
and a median 1.12 s (0.23-3.14 s) in the 13 steps after it, while this process ran at
nice 10 (set after its imports): each parallel region waits for the thread that shares a
core with this process. On a 2-core CPU with autogroups (the kernel shares CPU time out
by session first) a process in a session of its own took half a core at nice 10, nice 19
or SCHED_IDLE alike; a CPU script of the same kind lost 7.9 s over its 60 steps after
the window with nice 10 after the imports, 8.9 s with SCHED_IDLE alone, 0.5-0.8 s with
the autogroup lowered too (benchmarks/run_after_window_cpu.py; docs/run.md, "The cost
after the window"). The report then takes longer: 15 s there instead of 8, ending
after the script.
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import Any

__all__ = ["main", "lower_priority", "NICE"]

# The nice value this process and its session's autogroup take (19: the lowest).
NICE = 19
AUTOGROUP = Path("/proc/self/autogroup")


def lower_priority() -> list[str]:
    """This process below every other process's CPU time, before it imports anything
    heavy; what was done, in words. SCHED_IDLE where there is one (else nice 19): it
    runs only on a core nothing else wants and a thread of the script that wakes takes
    the core back at once. Then, if this process leads its own session (cli/run.py
    starts it so), that session's autogroup goes to nice 19 too: where the kernel groups
    CPU time by session (CONFIG_SCHED_AUTOGROUP, a process in the root CPU cgroup) the
    session competes with the script's session as a whole, whatever this process's own
    policy, and took half of a core the script's thread wanted (docs/run.md). The
    script's own session is never touched."""
    done: list[str] = []
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
        done.append("SCHED_IDLE")
    except (AttributeError, OSError):
        with contextlib.suppress(OSError):  # not permitted here: the script's priority
            os.nice(NICE - os.nice(0))
            done.append(f"nice {NICE}")
    if os.getsid(0) == os.getpid():
        with contextlib.suppress(OSError):  # no autogroups here, or not permitted
            AUTOGROUP.write_text(str(NICE))
            done.append(f"autogroup nice {NICE}")
    return done


def _write(out: Path, data: dict[str, Any]) -> None:
    """`data` at `out` whole or not at all (the script's process reads it once this
    process has exited)."""
    from gobrrr import jsontext

    part = out.with_suffix(".part")
    part.write_text(jsontext.dumps(data))
    part.replace(out)


def main(argv: list[str] | None = None) -> int:
    job_path, out = (Path(a) for a in (argv if argv is not None else sys.argv[1:]))
    lower_priority()  # first: the imports below are seconds of CPU time
    import pickle

    from gobrrr.cli.run import progress_lines
    from gobrrr.errors import WARNING, first_line
    from gobrrr.script_report import report_of
    from gobrrr.show.files import write_report_files

    say = progress_lines(False)
    try:
        try:
            job = pickle.loads(job_path.read_bytes())  # our own file, from cli/run.py
        finally:
            job_path.unlink(missing_ok=True)
        say = progress_lines(job["quiet"])
        d = report_of(job["window"], say).to_dict()
    except Exception as exc:
        line = f"gobrrr could not make the report: {first_line(exc)}"
        say(f"{WARNING}{line} (the script goes on)")
        _write(out, {"error": line})
        return 1
    write_report_files(d, job["json"], job["html"], job["trace"], say)
    _write(out, {"report": d})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
