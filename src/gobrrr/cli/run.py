"""`gobrrr run [OPTIONS] SCRIPT.py [ARGS]...` (or `-m MODULE [ARGS]...`): the user's own
script, run in place and unchanged; its steps measured (gobrrr.script). The script keeps
stdout and its exit status: the report's files are written as soon as the measured steps
end, and the terminal report follows the script's own output once it ends, as
`python -m cProfile` prints its table.

The report is made in a child process (cli/run_report.py), started when the window
closes: the script goes on at once and its process never loads the analysis (on a
host-bound CPU loop, the report made in the script's process left each later step 0.67%
slower: docs/run.md, "The cost after the window"). Once the script ends, this process
waits for the child and prints the report it left; a child that failed is one line and a
non-zero exit. Under torchrun rank 0 still makes the merged report in its own process
(gobrrr.script.run_script)."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

import gobrrr

__all__ = ["register", "progress_lines"]

_HELP = """Run your own script unchanged and diagnose its steps.

\b
  gobrrr run train.py --lr 3e-4         your script, its own arguments after it
  gobrrr run -m mypackage.train ...     a module, as python -m runs it
  python -m gobrrr run train.py ...     the same

Steps are found without code changes: each optimizer step() (training), else each
forward of the outermost module (inference); gobrrr.step() in the script marks them by
hand and gobrrr.watch() limits them to a region. --warmup steps run as they are, --steps
are timed unprofiled, then 1 + --profiled are profiled and counted. The report is written
when those steps end; the script then runs to its end (or stops: --exit-after)."""


@click.command(help=_HELP, context_settings={"ignore_unknown_options": True,
                                              "allow_interspersed_args": False})
@click.option("-m", "module", metavar="MODULE", default=None,
              help="Run a module as python -m does (its arguments follow).")
@click.option("--warmup", type=click.IntRange(min=0), default=3, show_default=True,
              help="Steps run as they are first (compile, autotuning, first batches).")
@click.option("--steps", type=click.IntRange(min=1), default=20, show_default=True,
              help="Steps timed unprofiled.")
@click.option("--profiled", type=click.IntRange(min=1), default=3, show_default=True,
              help="Steps profiled and counted (after one profiler warm-up step).")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the report as JSON here.")
@click.option("--html", "html_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Write a self-contained HTML report here.")
@click.option("--trace", "trace_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Write a Chrome/Perfetto trace of the profiled step here.")
@click.option("--exit-after", is_flag=True,
              help="Stop the script once the report is written.")
@click.option("-q", "--quiet", is_flag=True, help="No progress output.")
@click.argument("argv", nargs=-1, type=click.UNPROCESSED)
def run(module: str | None, warmup: int, steps: int, profiled: int,
        json_path: Path | None, html_path: Path | None, trace_path: Path | None,
        exit_after: bool, quiet: bool, argv: tuple[str, ...]) -> None:
    """Run a script in place and diagnose its steps (help: _HELP)."""
    from gobrrr.cli.common import check_writable, run_guarded

    if module is None and not argv:
        raise click.UsageError("give a script (gobrrr run train.py ...) or -m MODULE")
    script, args = (None, list(argv)) if module is not None else (argv[0], list(argv[1:]))
    run_guarded(lambda: check_writable(json_path, html_path, trace_path))
    say = _rank_zero(progress_lines(quiet))
    child = _ReportProcess(json_path, html_path, trace_path, quiet)
    result = run_guarded(lambda: _run(script, module, args, warmup, steps, profiled,
                                      exit_after, json_path, html_path, trace_path, say,
                                      child))
    raise SystemExit(_finish(result, child, say))


def _run(script: str | None, module: str | None, args: list[str], warmup: int,
         steps: int, profiled: int, exit_after: bool, json_path: Path | None,
         html_path: Path | None, trace_path: Path | None, say: Callable[[str], None],
         child: _ReportProcess) -> Any:
    from gobrrr.script import ScriptOptions, run_script

    def deliver(report: Any) -> None:  # the report made here: torchrun's rank 0
        from gobrrr.show.files import write_report_files

        write_report_files(report.to_dict(), json_path, html_path, trace_path, say)

    return run_script(script, args, module=module,
                      opts=ScriptOptions(warmup, steps, profiled, exit_after),
                      progress=say, deliver=deliver, hand_off=child.start)


class _ReportProcess:
    """The child process that makes the report (cli/run_report.py): `start` hands it the
    closed window (a pickle in a folder of its own) and returns at once; `wait`, once the
    script ended, gives the report's dict or the one line saying why there is none.

    The child is in a session of its own: the terminal's Ctrl-C stops the script, not
    the report of its window (which is printed after the script's traceback, as when
    it was made in this process); its stdout is /dev/null (stdout is the script's and
    the report's, printed from here), its stderr this process's (its progress)."""

    def __init__(self, json_path: Path | None, html_path: Path | None,
                 trace_path: Path | None, quiet: bool) -> None:
        self.files = {"json": json_path, "html": html_path, "trace": trace_path}
        self.quiet = quiet
        self.proc: subprocess.Popen[bytes] | None = None
        self.folder: Path | None = None
        self.trace: Path | None = None  # the profiled steps' (the child removes it)

    def start(self, window: Any) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="gobrrr-run-report-"))
        self.trace = window.trace_path
        job = self.folder / "job.pickle"
        job.write_bytes(pickle.dumps({"window": window, "quiet": self.quiet, **self.files}))
        # the child imports this gobrrr, wherever it was imported from here
        root = str(Path(gobrrr.__file__).resolve().parents[1])
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [root, *filter(None, [os.environ.get("PYTHONPATH")])]))
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "gobrrr.cli.run_report", str(job),
                 str(self.folder / "report.json")],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, env=env,
                start_new_session=True)
        except OSError:
            self._clean()
            raise

    def wait(self, say: Callable[[str], None]) -> tuple[dict[str, Any] | None, str]:
        """The report's dict, or None and why (one line); never raises."""
        if self.proc is None or self.folder is None:
            return None, ""
        if self.proc.poll() is None:
            say(f"making the report (process {self.proc.pid})")
        try:
            code = self.proc.wait()
        except KeyboardInterrupt:
            self.proc.kill()
            self.proc.wait()
            self._clean()
            return None, "interrupted while the report was made: no report"
        out = self.folder / "report.json"
        try:
            got = json.loads(out.read_text()) if out.is_file() else {}
        except (OSError, ValueError) as exc:
            got = {"error": f"its output could not be read: {exc}"}
        finally:
            self._clean()
        if code == 0 and "report" in got:
            return got["report"], ""
        if "error" in got:
            return None, str(got["error"])
        how = f"signal {-code}" if code < 0 else f"status {code}"
        return None, (f"gobrrr could not make the report: its process (pid "
                      f"{self.proc.pid}) ended with {how}, saying nothing")

    def _clean(self) -> None:
        """The job's folder and the trace gone, whatever the child did."""
        if self.trace is not None:
            self.trace.unlink(missing_ok=True)
        if self.folder is None:
            return
        for f in self.folder.iterdir():
            f.unlink(missing_ok=True)
        self.folder.rmdir()
        self.folder = None


def progress_lines(quiet: bool) -> Callable[[str], None]:
    """Progress as plain lines on stderr, on a terminal too. The other commands' live
    spinner (common.progress_printer) is rich's Live: a thread that redraws it 10 times a
    second, taking the GIL each time, and a proxy on sys.stdout, both in the script's own
    process from its first step to its end (they stopped at `_finish`): in the timed
    window and in every step after it (1.9% of a core on the 2-core CPU of
    docs/run.md's "The cost after the window"), and the script's prints went through
    the proxy."""
    if quiet:
        return lambda _msg: None
    from rich.console import Console
    from rich.markup import escape

    console = Console(stderr=True)
    return lambda msg: console.print(f"[dim]gobrrr: {escape(msg)}[/dim]", highlight=False)


def _rank_zero(say: Callable[[str], None]) -> Callable[[str], None]:
    """Under torchrun (RANK set in every rank's environment) the other ranks' progress
    would repeat rank 0's line for line: only their warnings are shown."""
    import os

    from gobrrr.errors import WARNING

    if os.environ.get("RANK", "0") == "0":
        return say
    return lambda msg: say(msg) if msg.startswith(WARNING) else None


def _finish(result: Any, child: _ReportProcess, say: Callable[[str], None]) -> int:
    """After the script: its traceback (its own frames), the report on stdout (the
    child's, waited for), and the script's exit status; where gobrrr failed to make the
    report of a window that closed, one line and the script's status or 1."""
    from gobrrr.cli.common import finish_progress, stdout_guarded
    from gobrrr.script import script_traceback

    if result.error is not None:
        sys.stderr.write(script_traceback(result))
    d, why, failed = None, result.why, result.report_failed
    if result.report is not None:
        d = result.report.to_dict()
    elif result.handed_off:
        d, why = child.wait(say)
        failed = d is None
    finish_progress()
    if d is not None:
        from gobrrr.show.terminal import print_report  # the script has ended

        sys.stdout.flush()
        with stdout_guarded():
            print_report(d)
    elif not result.elsewhere:  # one line, even with --quiet: the user asked for one
        sys.stderr.write(f"gobrrr run: {why}\n")
    return int(result.exit_code) or (1 if failed else 0)


def register(group: click.Group) -> None:
    group.add_command(run)
