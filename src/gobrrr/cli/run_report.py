"""`gobrrr run`'s report process: the script's process hands it the closed window
(script_window.Window, pickled) and goes on with the script at once; this process makes
the report (script_report.report_of), writes the --json, --html and --trace files as soon
as it has them, and leaves the report's dict for the script's process, which prints it
after the script's own output (cli/run.py). The script's process so never loads the
analysis (docs/run.md, "The cost after the window").

  python -m gobrrr.cli.run_report JOB.pickle OUT.json

JOB: {"window", "json", "html", "trace", "quiet"}, written by cli/run.py (read, then
removed). OUT: {"report": the report's dict} (exit 0), or {"error": one line} (exit 1).
Progress goes to stderr as the script's process shows it. The process runs at a lower
priority (os.nice): on a machine whose cores the script keeps busy, its steps come
first and the report later.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import sys
from pathlib import Path
from typing import Any

from gobrrr import jsontext
from gobrrr.cli.run import progress_lines
from gobrrr.errors import WARNING, first_line
from gobrrr.script_report import report_of
from gobrrr.show.files import write_report_files

__all__ = ["main", "NICE"]

# The report's priority below the script's (os.nice's increment; 19 is the lowest).
NICE = 10


def _write(out: Path, data: dict[str, Any]) -> None:
    """`data` at `out` whole or not at all (the script's process reads it once this
    process has exited)."""
    part = out.with_suffix(".part")
    part.write_text(jsontext.dumps(data))
    part.replace(out)


def main(argv: list[str] | None = None) -> int:
    job_path, out = (Path(a) for a in (argv if argv is not None else sys.argv[1:]))
    with contextlib.suppress(OSError):  # not permitted here: the script's priority
        os.nice(NICE)
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
