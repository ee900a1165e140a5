"""What the trainer callbacks share: the window over the trainer's steps (a
gobrrr.script.StepWindow), the report's files written when it closes, the terminal report
when training ends, and nothing done twice under `gobrrr run` (its own window already
measures the same optimizer steps)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gobrrr.marks import running
from gobrrr.script import ScriptOptions, StepWindow

__all__ = ["CallbackOptions", "Session", "dataloaders_in"]


@dataclass
class CallbackOptions:
    """The callbacks' arguments: `gobrrr run`'s options, as keywords."""

    warmup: int = 3
    steps: int = 20
    profiled: int = 3
    json: str | Path | None = None
    html: str | Path | None = None
    trace: str | Path | None = None
    stop_after: bool = False  # stop training once the report is written
    print_report: bool = True  # the terminal report on stdout when training ends
    quiet: bool = False  # no progress lines on stderr

    def __post_init__(self) -> None:
        for name, least in (("warmup", 0), ("steps", 1), ("profiled", 1)):
            value = getattr(self, name)
            if not isinstance(value, int) or value < least:
                raise ValueError(f"{name} must be an integer >= {least}, not {value!r}")


def dataloaders_in(obj: Any) -> list[Any]:
    """The torch DataLoaders in what a trainer holds: one, or a list, tuple or dict of
    them (Lightning's several loaders); anything else holds none."""
    from torch.utils.data import DataLoader

    if isinstance(obj, DataLoader):
        return [obj]
    values = obj.values() if isinstance(obj, dict) else obj if isinstance(
        obj, (list, tuple)) else ()
    return [v for v in values if isinstance(v, DataLoader)]


def _path(p: str | Path | None) -> Path | None:
    return None if p is None else Path(p)


class Session:
    """One training run's window (module docstring). `begin(model)` at training start,
    `step()` at each optimizer step's end (True: stop training now), `end()` at the end."""

    def __init__(self, source: str, trainer_name: str, opts: CallbackOptions) -> None:
        self.opts = opts
        self.source = source
        self.trainer_name = trainer_name
        self.window: StepWindow | None = None
        self.passive = False

    def say(self, msg: str) -> None:
        if not self.opts.quiet:
            print(f"gobrrr: {msg}", file=sys.stderr, flush=True)

    def begin(self, model: Any, loaders: Any = None) -> None:
        if self.window is not None or self.passive:
            return
        if running() is not None:
            self.passive = True
            self.say(f"under gobrrr run: its window measures the {self.trainer_name}'s "
                     "optimizer steps; this callback stays out of the way")
            return
        o = self.opts
        name = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else self.trainer_name
        self.window = StepWindow(f"{name} ({self.trainer_name})", self.source,
                                 ScriptOptions(o.warmup, o.steps, o.profiled),
                                 progress=self.say, deliver=self._deliver)
        self.window.start(model, loaders=dataloaders_in(loaders))

    def _deliver(self, report: Any) -> None:
        from gobrrr.show.files import write_report_files

        o = self.opts
        write_report_files(report.to_dict(), _path(o.json), _path(o.html), _path(o.trace),
                           self.say)

    def step(self) -> bool:
        """A step ended; True when training should stop (stop_after, report written)."""
        w = self.window
        if w is None:
            return False
        w.step()
        return self.opts.stop_after and w.done

    def end(self) -> Any:
        """Every hook off; the terminal report (or one line saying why there is none).
        Returns the report (None without one)."""
        w = self.window
        if w is None:
            return None
        self.window = None
        report = w.close()
        if report is None:
            print(f"gobrrr: {w.why}", file=sys.stderr, flush=True)
        elif self.opts.print_report:
            from gobrrr.show.terminal import print_report

            sys.stdout.flush()
            print_report(report.to_dict())
        self.report = report
        return report
