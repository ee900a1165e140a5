"""What every command shares: the device option, progress on stderr, one error style,
and delivering results (files written, then stdout) so that a failed write never loses the
result.

Data (tables, JSON) goes to stdout, progress and notes to stderr. Bad input: one line on
stderr and exit code 2. A workload that raises: the user's own traceback and exit 2.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, NoReturn

import click

from gobrrr import jsontext
from gobrrr.errors import WARNING, UserError, WorkloadError, user_traceback

__all__ = ["DEVICE", "FiniteFloat", "BATCH", "resolve_device", "progress_printer",
           "run_guarded", "finish_progress", "emit_json", "check_writable", "deliver",
           "deliver_report", "show_notes", "model_options", "load_announced", "TARGET_HELP",
           "results_only_on_stdout", "stdout_guarded", "INTERRUPTED_EXIT",
           "relaunch_under_torchrun"]

DEVICE = click.Choice(["auto", "cpu", "cuda"])


class FiniteFloat(click.FloatRange):
    """A FloatRange that refuses nan and inf (nan passes every bound; an infinite time
    budget never ends)."""

    def convert(self, value: Any, param: Any, ctx: Any) -> Any:
        out = super().convert(value, param, ctx)
        if not math.isfinite(out):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return out


# A batch that fits an int32 (torch's sizes are int64, but no batch past 2^31 fits any
# device): 99999999999999999999 was handed to the workload and failed with a C++ dump.
BATCH = click.IntRange(1, 2**31 - 1)

# Shared by doctor's and optimize's --help. \b keeps click from rewrapping the lines.
TARGET_HELP = """TARGET is one of (default examples:mlp):

\b
  FILE.py:NAME       NAME() or NAME(batch_size[, device]) returns (callable, args)
  examples:NAME      built in: mlp, matmul, pointwise, transformer, mlp_train,
                     attention
  hf:NAME            a transformers model from a shipped config, random weights:
                     gpt2, gpt2-medium, gpt2-large, gpt2-xl, bert-base-uncased,
                     bert-large-uncased, tinyllama-1.1b, qwen2.5-0.5b (--seq-len)
  timm:NAME          a timm image classifier, random weights (--image-size),
                     e.g. timm:resnet50, timm:vit_base_patch16_224
  torchvision:NAME   a torchvision classifier, random weights (--image-size),
                     e.g. torchvision:resnet50

Model targets (hf:, timm:, torchvision:) never download: weights are random, inputs are
random token ids or images. They run inference (eval mode, no_grad) unless --train.
"""


def model_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """--seq-len, --image-size, --dtype and --train: for model targets only."""
    options = [
        click.option("--seq-len", type=BATCH, default=None,
                     help="Tokens per sequence of an hf: target (default 128 on CPU, "
                          "512 on CUDA, at most the model's positions)."),
        click.option("--image-size", type=BATCH, default=None,
                     help="Image height and width of a timm: or torchvision: target "
                          "(default: the model's own, else 224)."),
        click.option("--dtype", type=click.Choice(["fp32", "bf16", "fp16"]), default=None,
                     help="Cast a model target's weights and floating inputs (default "
                          "fp32). Autocast is a remedy of optimize, not this."),
        click.option("--train", is_flag=True,
                     help="Model targets: a training step (forward, loss, backward, "
                          "AdamW step) instead of inference."),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def _fail(message: str, code: int = 2) -> NoReturn:
    click.echo(f"gobrrr: error: {message}", err=True)
    sys.exit(code)


def resolve_device(device: str) -> str:
    """'auto' is CUDA when present; an explicit 'cuda' without CUDA is a user error."""
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise UserError("--device cuda: no CUDA device is available here (torch "
                        f"{torch.__version__}, cuda={torch.version.cuda})")
    return device


_ACTIVE_PROGRESS: list[Any] = []


class _LiveProgress:
    """On a terminal: a spinner with the current step and its elapsed time, finished steps
    printed above it, all on stderr. Closed by run_guarded when the command ends."""

    def __init__(self) -> None:
        from rich.console import Console
        from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        self.progress = Progress(SpinnerColumn(), TextColumn("{task.description}"),
                                 TimeElapsedColumn(), console=Console(stderr=True),
                                 transient=True)
        self.task: Any = None
        self.last = ""

    def __call__(self, msg: str) -> None:
        from rich.markup import escape

        if self.task is None:
            self.progress.start()
            self.task = self.progress.add_task(escape(msg))
        else:
            self.progress.console.print(f"[dim]gobrrr: {escape(self.last)}[/dim]",
                                        highlight=False)
            self.progress.update(self.task, description=escape(msg))
        self.last = msg

    def close(self) -> None:
        if self.task is not None:
            self.progress.stop()
            self.task = None


def progress_printer(quiet: bool) -> Callable[[str], None]:
    """Progress on stderr, so stdout stays data (e.g. --json): a live spinner line on a
    terminal, plain lines otherwise (logs, CI, pipes)."""
    if quiet:
        return lambda _msg: None
    if sys.stderr.isatty():
        live = _LiveProgress()
        _ACTIVE_PROGRESS.append(live)
        return live
    from rich.console import Console
    from rich.markup import escape

    console = Console(stderr=True)
    return lambda msg: console.print(f"[dim]gobrrr: {escape(msg)}[/dim]", highlight=False)


# Exit code of a command stopped by Ctrl-C: 128 + SIGINT, the shells' convention (click's
# own "Aborted!" exited 1).
INTERRUPTED_EXIT = 130


def run_guarded(action: Callable[[], Any]) -> Any:
    """Run a command body, mapping our error types to one style of message and exit."""
    try:
        return action()
    except UserError as exc:
        finish_progress()
        _fail(str(exc), exc.exit_code)
    except WorkloadError as exc:
        finish_progress()
        click.echo(user_traceback(exc.original), err=True)
        _fail(str(exc), exc.exit_code)
    except KeyboardInterrupt:
        finish_progress()
        _fail("interrupted (Ctrl-C); the user's state was put back", INTERRUPTED_EXIT)


def relaunch_under_torchrun(nproc: int, target: str | None, command: str) -> NoReturn:
    """`--nproc-per-node N`: this command again under torchrun with N processes, after
    the target is checked here (one error line, not one per rank); exits with its code."""
    from gobrrr.dist.launch import launch
    from gobrrr.targets import check_target

    run_guarded(lambda: check_target(target))
    raise SystemExit(run_guarded(lambda: launch(nproc, command=command)))


def show_notes(notes: Sequence[str], say: Callable[[str], None], quiet: bool) -> None:
    """Notes as progress lines; warnings (failures the run survived) on stderr also with
    -q, which silences progress, never warnings. Without -q a warning was already said
    as progress when it happened, so it is not repeated."""
    from gobrrr.show.terminal import printable

    for note in map(printable, notes):
        if not note.startswith(WARNING):
            say(note)
        elif quiet:
            click.echo(f"gobrrr: {note}", err=True)


def finish_progress() -> None:
    """Stop any live progress line before a command prints its results."""
    while _ACTIVE_PROGRESS:
        _ACTIVE_PROGRESS.pop().close()




# Where a command's result goes inside `results_only_on_stdout`: stdout as it was.
_RESULTS: Any = None


@contextlib.contextmanager
def results_only_on_stdout(on: bool = True) -> Iterator[None]:
    """While on, stdout carries the command's result alone (--json: one document): the
    workload's own output, its Python prints and what C code writes to descriptor 1 (an
    `os.system` echo, NCCL's banner), goes to stderr. 3,848 lines of a workload's prints
    once came before the JSON, which then did not parse. Put back on exit."""
    global _RESULTS
    if not on or _RESULTS is not None:
        yield
        return
    import io

    out = sys.stdout
    try:
        fd = out.fileno()
    except (AttributeError, OSError, ValueError):  # a test runner's capture
        fd = None
    kept = None
    if fd == 1:
        out.flush()
        kept = os.dup(1)
        os.dup2(2, 1)
        _RESULTS = io.TextIOWrapper(os.fdopen(os.dup(kept), "wb"),
                                    encoding=out.encoding or "utf-8", line_buffering=True)
    else:
        _RESULTS = out
    sys.stdout = sys.stderr
    try:
        yield
    finally:
        results, _RESULTS = _RESULTS, None
        sys.stdout = out
        if kept is not None:
            try:
                results.flush()
            except OSError:  # stdout is gone (a closed pipe): delivery said so already
                pass
            os.dup2(kept, 1)
            os.close(kept)


def emit_json(data: Any) -> None:
    finish_progress()
    with stdout_guarded():
        click.echo(jsontext.dumps(data), file=_RESULTS)


@contextlib.contextmanager
def stdout_guarded() -> Iterator[None]:
    """Writing (and flushing) the result to stdout: a stdout that fails (`--json >
    /dev/full`, a closed pipe) is one line and exit 2, not a traceback."""
    try:
        yield
        for stream in (sys.stdout, _RESULTS):
            if stream is not None:
                stream.flush()
    except OSError as exc:
        # nothing more can go there: the interpreter's own flush at exit would fail again
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - lives until the process ends
        raise UserError(f"cannot write the result to stdout: {exc.strerror or exc}") from None


def check_writable(*paths: Path | str | None) -> None:
    """Before any work: each output path must be creatable (its nearest existing folder
    writable) and not a folder. One line, exit 2, instead of a failure after minutes."""
    for raw in paths:
        if raw is None:
            continue
        path = Path(raw)
        if path.is_dir():
            raise UserError(f"cannot write {path}: it is a directory")
        if path.exists():
            if not os.access(path, os.W_OK):
                raise UserError(f"cannot write {path}: permission denied")
            continue
        parent = path.parent
        while not parent.exists() and parent != parent.parent:
            parent = parent.parent
        if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
            raise UserError(f"cannot write {path}: {parent} is not a writable directory")


def shower(as_json: bool, to_dict: Callable[[], Any],
           print_terminal: Callable[[], None]) -> Callable[[], None]:
    """What a command shows on stdout: its result as JSON, or its terminal rendering
    (the live progress line stopped first, so the two never interleave)."""

    def show() -> None:
        if as_json:
            emit_json(to_dict())
        else:
            finish_progress()
            print_terminal()

    return show


def deliver(writes: Sequence[tuple[Path, Callable[[Path], Any]]],
            show: Callable[[], None], say: Callable[[str], None]) -> None:
    """Write each file (creating its folder), then show the result on stdout; a write
    that fails (disk full) still lets stdout have the result, then exits 2 with one line
    naming what could not be written. stdout itself failing (`--json > /dev/full`, a
    closed pipe) is one line too, not a traceback."""
    from gobrrr.show.files import write_files

    failed = write_files(writes, say)
    with stdout_guarded():
        show()
    if failed:
        raise UserError("; ".join(failed) + " (the result is on stdout)")


def deliver_report(d: dict[str, Any], *, as_json: bool, say: Callable[[str], None],
                   html_path: Path | None = None, trace_path: Path | None = None) -> None:
    """A report dict (doctor, analyze, show) to its outputs: the Perfetto trace first (a
    report without per-call rows, schema 1.0, cannot be traced, and says so before
    anything else is written), the HTML page, then stdout (JSON or the terminal)."""
    from gobrrr.show import save_html, save_trace
    from gobrrr.show.terminal import print_report

    writes: list[tuple[Path, Callable[[Path], Any]]] = []
    if trace_path is not None:
        writes.append((trace_path, lambda p: save_trace(d, p)))
    if html_path is not None:
        writes.append((html_path, lambda p: save_html(d, p)))
    deliver(writes, shower(as_json, lambda: d, lambda: print_report(d)), say)


def load_announced(target: str | None, device: str, batch_size: int | None, options: Any,
                   say: Callable[[str], None]) -> Any:
    """The target's Workload, announced on the progress line (a model: what was built)."""
    from gobrrr.targets import load_target

    w = load_target(target, device, batch_size, options)
    say(f"workload {w.name} (batch {w.batch_size}) on {w.device}"
        + (f": {w.description}" if w.details else ""))
    return w
