"""The script source: the user's own script run in place, unchanged (`gobrrr run
train.py`), its steps found from what it calls -> the measured run (run.py).

The script runs in this process as `__main__` (runpy), with its own argv, `sys.path[0]`
and `__file__`. Its steps come from its own calls, nothing added to its code:
- each `step()` of the first optimizer that steps ends a training step (torch's global
  optimizer-step hooks): gradient accumulation and a second optimizer (a GAN's) make no
  extra steps;
- with no optimizer step, each completed forward of the first outermost module ends a
  step (an inference loop): chosen once WARMUP + 2 such forwards ran without producing a
  gradient, or FORWARD_FALLBACK forwards ran without an optimizer step (a loop that
  updates its weights by hand);
- `gobrrr.step()`, called by the script, ends a step by hand and overrides both;
  `with gobrrr.watch():` limits the steps to a region (its first entry restarts the
  warm-up).
Once the source is chosen the global module hooks come off (a hook on every module
call costs microseconds); a forward source keeps one hook, on its module.

The window over those steps, in order:
1. `warmup` steps run as they are (compile, cuDNN autotuning, the first batches);
2. `steps` steps timed unprofiled: T_wall is the window's mean step, with one device
   synchronization at each end (CUDA); each step's host time inside DataLoader
   iterators' `__next__` is its wait for data;
3. one profiler warm-up step, then `profiled` steps under torch.profiler (CPU and CUDA
   activity, recorded shapes): the trace `gobrrr analyze` reads, so the counted ops, their
   FLOPs and bytes and their phases are the trace source's (tracefile/), and the part of
   the wait for data the device sat idle is read from its DataLoader ranges.
Then every hook comes off, the ceilings are read (or measured) and the window becomes
data (script_window.Window): the report is made from it by script_report.py, here
(a trainer's callback: StepWindow; torchrun's rank 0) or in `gobrrr run`'s child process
(`hand_off`), and the script runs on to its end (or stops there: `exit_after`). This
module loads none of the analysis: a script's process that hands its window off never
does. Nothing here changes what the script computes: no dispatch mode runs on its
steps, no hook returns a value, and the calibration that the report needs keeps the
script's RNG (state.preserved_globals).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import runpy
import sys
import tempfile
import time
import traceback
import warnings
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gobrrr.errors import WARNING, UserError, first_line
from gobrrr.hardware import calibrate
from gobrrr.marks import ACTIVE
from gobrrr.remedies.base import workload_facts
from gobrrr.remedies.data import LoaderFacts, loader_facts
from gobrrr.script_window import (
    CALLER_SOURCES,
    IN_PLACE_NOTE,
    STEP_SOURCES,
    Timed,
    Window,
    optimizer_facts,
)
from gobrrr.state import preserved_globals
from gobrrr.timing import device_sync

if TYPE_CHECKING:
    from gobrrr.report import Report

__all__ = ["ScriptOptions", "ScriptResult", "run_script", "script_traceback",
           "StepWindow", "STEP_SOURCES", "CALLER_SOURCES", "FORWARD_FALLBACK",
           "IN_PLACE_NOTE"]

Progress = Callable[[str], None]

# Forwards of the outermost module with gradients but no optimizer step after which
# each forward is taken for a step (far past any gradient accumulation people use).
FORWARD_FALLBACK = 64


@dataclass
class ScriptOptions:
    warmup: int = 3
    steps: int = 20
    profiled: int = 3
    exit_after: bool = False


@dataclass
class ScriptResult:
    """What running the script gave: its exit code, the exception it ended with (its
    own; None: it ended normally or by sys.exit), and the report once its window closed
    (None: the script ended first, `why` says how far it got)."""

    exit_code: int
    report: Report | None = None
    why: str = ""
    error: BaseException | None = None
    script_file: str | None = None  # the file its traceback starts in
    progress: list[str] = field(default_factory=list)
    elsewhere: bool = False  # under torchrun, a rank other than 0: rank 0 has the report
    handed_off: bool = False  # the window went to `hand_off`: the report is made there
    report_failed: bool = False  # the window closed, and gobrrr failed to make the report


class _Watcher:
    """The step boundaries and the window over them (module docstring)."""

    WARMUP, TIMED, PROFILED, DONE = range(4)

    def __init__(self, opts: ScriptOptions, on_done: Callable[[_Watcher], None],
                 say: Progress) -> None:
        self.opts = opts
        self.on_done = on_done
        self.say = say
        self.source: str | None = None  # a key of STEP_SOURCES
        self.lead_optimizer: int | None = None  # id of the optimizer whose steps count
        self.phase = self.WARMUP
        self.count = 0  # boundaries of the chosen source in the current phase
        self.forwards = 0  # forwards of the outer module before the source was chosen
        self.depth = 0  # module forward nesting (the global hooks)
        self.outer: Any = None  # the first outermost module
        self.modules: dict[int, Any] = {}  # the outermost modules seen (facts)
        self.optimizers: dict[int, Any] = {}
        self.opt_steps = 0  # optimizer steps taken (the global hook)
        self.skipped_steps = 0  # GradScaler-skipped steps inside the timed+profiled window
        # each DataLoader's arguments, read when one of its iterators starts: the loader
        # itself may be a temporary (`for x in DataLoader(...)`), and gobrrr keeps no
        # reference to it
        self.loaders: dict[LoaderFacts, None] = {}
        self.watching = 0  # depth of gobrrr.watch() regions
        self.watch_used = False
        self.device = "cpu"
        self.t_last = 0.0
        self.window_t0 = 0.0
        self.window_s = 0.0
        self.series: list[tuple[str, float]] = []
        self.step_s: list[float] = []
        self.loading_s: list[float] = []  # per timed step, inside __next__
        self.loading_now = 0.0
        self.first_batches: list[float] = []  # timed window: an iterator's first batch
        self.fresh: weakref.WeakSet[Any] = weakref.WeakSet()  # iterators not yet read
        self.prof: Any = None
        self.trace_path: Path | None = None
        self.module_hooks: list[Any] = []
        self.hooks: list[Any] = []
        self.patched: list[tuple[Any, str, Any]] = []

    # ------------------------------------------------------------------ hooks

    def install(self) -> None:
        import torch.nn.modules.module as nn_module
        from torch.optim.optimizer import register_optimizer_step_post_hook
        from torch.utils.data import dataloader

        me = self

        def pre(module: Any, _args: Any) -> None:
            me.depth += 1

        def post(module: Any, _args: Any, _out: Any) -> None:
            me.depth -= 1
            if me.depth == 0:
                me.outermost_done(module)

        def opt_post(opt: Any, _args: Any, _kwargs: Any) -> None:
            me.opt_steps += 1
            me.optimizers.setdefault(id(opt), opt)
            me.optimizer_stepped(opt)

        self.module_hooks = [nn_module.register_module_forward_pre_hook(pre),
                             nn_module.register_module_forward_hook(post, always_call=True)]
        self.hooks = [register_optimizer_step_post_hook(opt_post)]
        cls = dataloader._BaseDataLoaderIter
        orig_init, orig_next = cls.__init__, cls.__next__

        def init(it: Any, loader: Any, *a: Any, **kw: Any) -> None:
            orig_init(it, loader, *a, **kw)
            if len(me.loaders) < 8:
                me.loaders.setdefault(loader_facts(loader))
            me.fresh.add(it)

        def next_(it: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return orig_next(it)
            finally:
                dt = time.perf_counter() - t0
                me.loading_now += dt
                if it in me.fresh:
                    me.fresh.discard(it)
                    if me.phase == me.TIMED:
                        me.first_batches.append(dt)

        for name, new in (("__init__", init), ("__next__", next_)):
            self.patched.append((cls, name, cls.__dict__[name]))
            setattr(cls, name, new)
        self._patch_grad_scaler()
        ACTIVE.append(self)

    def _patch_grad_scaler(self) -> None:
        """AMP's GradScaler skips optimizer.step() when the gradients hold inf or NaN (its
        scale is being found, in the first steps mostly): the script still made a step,
        so a skipped one ends a step too, and is counted."""
        from torch.amp import grad_scaler

        gs = grad_scaler.GradScaler
        orig_step = gs.__dict__["step"]
        me = self

        def scaler_step(scaler: Any, optimizer: Any, *a: Any, **kw: Any) -> Any:
            before = me.opt_steps
            try:
                return orig_step(scaler, optimizer, *a, **kw)
            finally:
                if me.opt_steps == before:  # skipped: no optimizer step hook ran
                    if me.phase in (me.TIMED, me.PROFILED):
                        me.skipped_steps += 1
                    me.optimizers.setdefault(id(optimizer), optimizer)
                    me.optimizer_stepped(optimizer)

        self.patched.append((gs, "step", orig_step))
        setattr(gs, "step", scaler_step)  # noqa: B010 (a class attribute, restored after)

    def uninstall(self) -> None:
        for h in [*self.module_hooks, *self.hooks]:
            h.remove()
        self.module_hooks, self.hooks = [], []
        for cls, name, orig in reversed(self.patched):
            setattr(cls, name, orig)
        self.patched = []
        if self in ACTIVE:
            ACTIVE.remove(self)

    # ------------------------------------------------------------------ sources

    def outermost_done(self, module: Any) -> None:
        if len(self.modules) < 16:
            self.modules.setdefault(id(module), module)
        if self.outer is None:
            self.outer = module
        if module is not self.outer or self.source is not None:
            return
        self.forwards += 1
        grads = any(p.grad is not None for p in module.parameters())
        if (not grads and self.forwards >= self.opts.warmup + 2) or \
                self.forwards >= FORWARD_FALLBACK:
            self._choose("forward")

    def optimizer_stepped(self, opt: Any) -> None:
        if self.source in (None, "forward") and self.phase == self.WARMUP:
            self.lead_optimizer = id(opt)
            self._choose("optimizer")
        if self.source == "optimizer" and id(opt) == self.lead_optimizer:
            self.boundary()

    def manual(self) -> None:
        if self.source != "manual":
            if self.phase != self.WARMUP:
                return  # the window is under way on another source
            self._choose("manual")
        self.boundary()

    def enter_watch(self) -> None:
        self.watching += 1
        if not self.watch_used:
            self.watch_used = True
            if self.phase == self.WARMUP:
                self.count = 0  # the warm-up starts inside the region
                self.say("gobrrr.watch(): steps counted inside the region only")

    def exit_watch(self) -> None:
        self.watching = max(0, self.watching - 1)

    def _choose(self, source: str) -> None:
        if self.source == source:
            return
        self.source = source
        self.count = 0
        self.say(f"steps: {STEP_SOURCES[source]}")
        for h in self.module_hooks:  # the search is over: no hook on every module call
            h.remove()
        self.module_hooks = []
        if source == "forward" and self.outer is not None:
            self.module_hooks = [self.outer.register_forward_hook(
                lambda _m, _a, _o: self.boundary())]

    # ------------------------------------------------------------------ the window

    def boundary(self) -> None:
        """One step of the chosen source ended: advance the window."""
        now = time.perf_counter()
        if self.watch_used and not self.watching:
            return
        self.count += 1
        if self.phase == self.WARMUP:
            if self.t_last:
                self.series.append(("warm-up", now - self.t_last))
            self.t_last = now
            if self.count >= self.opts.warmup:
                self._start_timing()
            return
        dt = now - self.t_last
        self.t_last = now
        if self.phase == self.TIMED:
            self.series.append(("timed", dt))
            self.step_s.append(dt)
            self.loading_s.append(self.loading_now)
            self.loading_now = 0.0
            if self.count >= self.opts.steps:
                device_sync(self.device)()
                self.window_s = time.perf_counter() - self.window_t0
                self._start_profiler()
            return
        if self.phase == self.PROFILED:
            self.series.append(("profiled", dt))
            self.prof.step()
            if self.count > self.opts.profiled:  # the profiler's warm-up step, then these
                self.prof.stop()
                self.prof = None
                self.phase = self.DONE
                self.uninstall()
                self.on_done(self)

    def _start_timing(self) -> None:
        self.device = _device_of(self)
        device_sync(self.device)()
        self.phase, self.count = self.TIMED, 0
        self.say(f"timing {self.opts.steps} steps, unprofiled")
        self.window_t0 = self.t_last = time.perf_counter()
        self.loading_now = 0.0

    def _start_profiler(self) -> None:
        from torch.profiler import ProfilerActivity, profile, schedule

        self.phase, self.count = self.PROFILED, 0
        self.say(f"profiling {self.opts.profiled} steps (after one warm-up step)")
        activities = [ProfilerActivity.CPU]
        if self.device == "cuda":
            activities.append(ProfilerActivity.CUDA)
        fd, name = tempfile.mkstemp(suffix=".json", prefix="gobrrr-run-")
        os.close(fd)
        self.trace_path = Path(name)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.prof = profile(
                activities=activities, record_shapes=True,
                schedule=schedule(wait=0, warmup=1, active=self.opts.profiled, repeat=1),
                on_trace_ready=lambda p: p.export_chrome_trace(name))
            self.prof.start()
        self.t_last = time.perf_counter()


def _device_of(w: _Watcher) -> str:
    import torch

    for m in w.modules.values():
        for p in m.parameters():
            return "cuda" if p.device.type == "cuda" else "cpu"
    return "cuda" if torch.cuda.is_available() and torch.cuda.is_initialized() else "cpu"


class _ExitAfter(BaseException):
    """Raised from a hook to stop the script once the report is delivered."""


def _target(script: str | None, module: str | None) -> tuple[str, str, str]:
    """(argv[0], sys.path[0], the file its traceback starts in) as Python gives them."""
    if module is not None:
        try:
            spec = importlib.util.find_spec(module)
        except (ImportError, ValueError) as exc:
            raise UserError(f"no module named {module!r}: {exc}") from exc
        if spec is None or spec.origin is None:
            raise UserError(f"no module named {module!r}")
        if spec.submodule_search_locations is not None:  # a package: its __main__
            main = importlib.util.find_spec(f"{module}.__main__")
            if main is None or main.origin is None:
                raise UserError(f"{module!r} is a package without a __main__ module")
            spec = main
        return str(spec.origin), os.getcwd(), str(spec.origin)
    path = Path(script or "")
    if not path.is_file():
        raise UserError(f"no such script: {script}")
    return str(path), str(path.resolve().parent), str(path.resolve())


def run_script(script: str | None, args: Sequence[str], *, module: str | None = None,
               opts: ScriptOptions | None = None, progress: Progress | None = None,
               deliver: Callable[[Report], None] | None = None,
               hand_off: Callable[[Window], None] | None = None) -> ScriptResult:
    """Run `script` (or `-m module`) as `__main__` with `args`, measure its steps
    (module docstring), and `deliver` the report as soon as its window closes. With
    `hand_off` the report is not made in this process: the closed window (script_window.
    Window: its trace, timing, ceilings and facts) goes to `hand_off`, which owns its
    trace file from then on (`gobrrr run`: a child process makes the report, so this one
    never loads the analysis); under torchrun rank 0 still makes it here (the DDP remedies'
    facts read the live modules). The script's own exception (or exit status) comes back
    in the result, never raised."""
    opts = opts or ScriptOptions()
    say = progress or (lambda _m: None)
    argv0, path0, origin = _target(script, module)
    got: dict[str, Any] = {}
    failed: list[str] = []
    done = _on_done(module or argv0, opts, say, deliver, got, failed, exit_after=True,
                    hand_off=hand_off)
    watcher = _Watcher(opts, done, say)
    saved_argv, saved_path = list(sys.argv), list(sys.path)
    sys.argv = [argv0, *args]
    if sys.path:
        sys.path[0] = path0
    else:
        sys.path.append(path0)
    code = 0
    error_: BaseException | None = None
    watcher.install()
    try:
        if module is None:
            runpy.run_path(argv0, run_name="__main__")
        else:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
    except _ExitAfter:
        code = 0
    except SystemExit as exc:
        code = _exit_code(exc)
    except KeyboardInterrupt as exc:
        code, error_ = 130, exc
    except BaseException as exc:  # the script's own: its traceback, exit 1, as Python
        code, error_ = 1, exc
    finally:
        watcher.uninstall()
        if watcher.prof is not None:  # the script ended inside the profiled steps
            with contextlib.suppress(Exception):
                watcher.prof.stop()
        if watcher.trace_path is not None:
            watcher.trace_path.unlink(missing_ok=True)
        sys.argv = saved_argv
        sys.path[:] = saved_path
    result = ScriptResult(code, got.get("report"), error=error_, script_file=origin,
                          elsewhere=bool(got.get("elsewhere")),
                          handed_off=bool(got.get("handed_off")),
                          report_failed=bool(failed))
    if result.elsewhere:
        result.why = "the merged report is rank 0's"
    elif result.report is None and not result.handed_off:
        result.why = failed[0] if failed else _why_no_report(watcher, opts)
    return result


def _on_done(name: str, opts: ScriptOptions, say: Progress,
             deliver: Callable[[Report], None] | None, got: dict[str, Any],
             failed: list[str], *, exit_after: bool,
             hand_off: Callable[[Window], None] | None = None
             ) -> Callable[[_Watcher], None]:
    """What happens when the window closes: the report made (`_make`), kept in `got` and
    delivered, or the window handed off (`got["handed_off"]`); under torchrun on rank 0
    (`got["elsewhere"]` on the others); gobrrr's failure said and kept in `failed`, never
    the program's."""

    def done(w: _Watcher) -> None:
        try:
            report = _make(w, name, say, hand_off, got)
        except Exception as exc:
            failed.append(f"gobrrr could not make the report: {first_line(exc)}")
            say(f"{WARNING}{failed[-1]} (the script goes on)")
        else:
            if report is not None:
                got["report"] = report
                if deliver is not None:
                    deliver(report)
        if exit_after and opts.exit_after:
            raise _ExitAfter

    return done


class StepWindow:
    """`gobrrr run`'s window over steps a caller marks, in the caller's own process: a
    trainer's callback (gobrrr.integrations) calls `start(model)` when training begins,
    `step()` at the end of each optimizer step and `close()` when training ends. The
    optimizer and DataLoader hooks are `gobrrr run`'s (the optimizer's facts, the wait
    for data); the steps are the caller's (`source`, a key of CALLER_SOURCES). The
    report is delivered when the window closes; `report` holds it after."""

    def __init__(self, name: str, source: str, opts: ScriptOptions | None = None, *,
                 progress: Progress | None = None,
                 deliver: Callable[[Report], None] | None = None) -> None:
        if source not in CALLER_SOURCES:
            raise ValueError(f"source must be one of {CALLER_SOURCES}, not {source!r}")
        self.opts = opts or ScriptOptions()
        self._got: dict[str, Any] = {}
        self._failed: list[str] = []
        say = progress or (lambda _m: None)
        # the report is made here, in the trainer's process: `report` is the Report
        self._w = _Watcher(self.opts, _on_done(name, self.opts, say, deliver, self._got,
                                               self._failed, exit_after=False), say)
        self._source = source
        self._started = False

    def start(self, *modules: Any, loaders: Sequence[Any] = ()) -> None:
        """Install the hooks; `modules`: the model(s) trained (their device and facts);
        `loaders`: the DataLoaders the trainer iterates (an iterator made before this
        call was not seen starting: its loader's facts come from here)."""
        if self._started:
            return
        self._started = True
        w = self._w
        w.install()
        w._choose(self._source)  # no search: the caller's steps, not the hooks'
        for m in modules:
            w.modules.setdefault(id(m), m)
        for loader in loaders:
            if len(w.loaders) < 8:
                w.loaders.setdefault(loader_facts(loader))

    def step(self) -> None:
        """One step of the caller's ended."""
        if self._started and self._w.phase != self._w.DONE:
            self._w.boundary()

    @property
    def done(self) -> bool:
        return self._w.phase == self._w.DONE

    @property
    def report(self) -> Report | None:
        return self._got.get("report")

    def close(self) -> Report | None:
        """Every hook off (the profiler stopped if training ended inside it); the report
        if the window closed, else None and `why` says how far it got."""
        w = self._w
        w.uninstall()
        if w.prof is not None:
            with contextlib.suppress(Exception):
                w.prof.stop()
            w.prof = None
        if w.trace_path is not None:
            w.trace_path.unlink(missing_ok=True)
        return self.report

    @property
    def why(self) -> str:
        if self.report is not None:
            return ""
        return self._failed[0] if self._failed else _why_no_report(
            self._w, self.opts, "training ended", "warmup=, steps=, profiled=")


def _exit_code(exc: SystemExit) -> int:
    """sys.exit's argument as Python's own exit status: None 0, an int itself, anything
    else printed on stderr and 1."""
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    print(exc.code, file=sys.stderr)
    return 1


def _why_no_report(w: _Watcher, opts: ScriptOptions, ended: str = "the script ended",
                   knobs: str = "--warmup, --steps, --profiled") -> str:
    need = opts.warmup + opts.steps + opts.profiled + 1
    seen = {w.WARMUP: w.count, w.TIMED: opts.warmup + w.count,
            w.PROFILED: opts.warmup + opts.steps + w.count, w.DONE: need}[w.phase]
    how = (STEP_SOURCES[w.source] if w.source else
           "no optimizer step, no module forward and no gobrrr.step() seen")
    return (f"{ended} after {seen} step(s) ({how}); the window needs {need} "
            f"({opts.warmup} warm-up, {opts.steps} timed, 1 + {opts.profiled} profiled: "
            f"{knobs}): no report")


def script_traceback(result: ScriptResult) -> str:
    """The script's exception as Python prints it, from the script's own first frame
    (runpy's and gobrrr's frames above it left out)."""
    exc = result.error
    if exc is None:
        return ""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename != result.script_file:
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb or exc.__traceback__))


def _timed(w: _Watcher, rank: int) -> Timed:
    assert w.source is not None
    return Timed(rank, w.source, w.device, w.opts.warmup, w.opts.profiled, list(w.step_s),
                 w.window_s, list(w.loading_s), list(w.first_batches), list(w.series),
                 list(w.loaders), w.skipped_steps)


def _ranks() -> tuple[int, int]:
    """(rank, world size) of the script's own process group; (0, 1) without one."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _window(w: _Watcher, name: str, say: Progress, started_s: float) -> Window:
    """The closed window as data (script_window.Window): the ceilings calibrated here
    (this process's device and thread count; the script's RNG is its own), the facts
    read from the script's objects."""
    assert w.trace_path is not None
    t = _timed(w, 0)
    with preserved_globals():
        ceil = calibrate(w.device, progress=say)
    facts = workload_facts(list(w.modules.values()), [])
    facts["optimizers"] = [optimizer_facts(o) for o in w.optimizers.values()]
    facts["loaders"] = t.loaders
    return Window(name, t, w.trace_path, ceil, facts, started_s)


def _make(w: _Watcher, name: str, say: Progress,
          hand_off: Callable[[Window], None] | None, got: dict[str, Any]) -> Report | None:
    """The report of the closed window (script_report.py), made here; None where it is
    made elsewhere: handed off (`got["handed_off"]`), or under torchrun on a rank other
    than 0 (`got["elsewhere"]`, `_report_ranks`)."""
    t0 = time.perf_counter()
    assert w.trace_path is not None and w.source is not None
    rank, world = _ranks()
    if world > 1:
        return _report_ranks(w, name, say, rank, world, got, t0)
    window = _window(w, name, say, t0)
    if hand_off is not None:
        hand_off(window)
        w.trace_path = None  # the trace is the report's process's now
        got["handed_off"] = True
        return None
    from gobrrr.script_report import report_of  # the analysis: only where made here

    return report_of(window, say)


# How long a rank waits for the others at the window's end under torchrun (every rank's
# window closes at the same optimizer step of a data-parallel job)
RANKS_TIMEOUT_S = 300.0


def _report_ranks(w: _Watcher, name: str, say: Progress, rank: int, world: int,
                  got: dict[str, Any], t0: float) -> Report | None:
    """Under torchrun (`torchrun ... -m gobrrr run train.py`): every rank's window closes
    at the same step; each sends its trace and timing to rank 0 over a gloo group of
    gobrrr's own (the script's group may be NCCL), and rank 0 makes the merged report
    (script_report.report_ranks). The other ranks go on with their script and make no
    report (`got["elsewhere"]`)."""
    from datetime import timedelta

    import torch.distributed as dist

    assert w.trace_path is not None
    say("rank 0: gathering every rank's trace and timing" if rank == 0 else
        f"rank {rank}: sending its trace and timing to rank 0")
    group = dist.new_group(backend="gloo", timeout=timedelta(seconds=RANKS_TIMEOUT_S))
    mine = (_timed(w, rank), w.trace_path.read_bytes())
    w.trace_path.unlink(missing_ok=True)
    gathered: list[Any] = [None] * world if rank == 0 else []
    try:
        dist.gather_object(mine, gathered if rank == 0 else None, dst=0, group=group)
    finally:
        dist.destroy_process_group(group)
    if rank != 0:
        got["elsewhere"] = True
        return None
    from gobrrr.script_report import report_ranks  # the analysis: only on rank 0

    return report_ranks(_window(w, name, say, t0), gathered, list(w.modules.values()),
                        world, say)
