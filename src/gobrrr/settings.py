"""The global torch settings gobrrr reads, sets and restores: one place for all of them.

Precision. torch >= 2.9 has two APIs for TF32: the legacy booleans
(`torch.backends.cuda.matmul.allow_tf32`, `torch.backends.cudnn.allow_tf32`,
`torch.set_float32_matmul_precision`) and per-backend `fp32_precision` strings
(`torch.backends.cuda.matmul.fp32_precision = "tf32"`, where "none" inherits from the
level above). Writing a legacy flag after the new API was used, even writing back the
value it already had, puts torch into a "mixed" state in which
`torch.get_float32_matmul_precision()` and the legacy getters raise. So where the new API
exists, gobrrr reads, sets and restores *only* the `fp32_precision` strings (which always
read and write cleanly, whichever API the user used), and uses the legacy flags only on
torch < 2.9 where they are the only API.

Other settings restored with them: cuDNN's `benchmark` and `deterministic`, the
reduced-precision-reduction switches, grad mode, `torch._inductor.config` when Inductor is
already imported (never imported just to save it), and dynamo's counters (gobrrr clears
them to read its own compiles; the user's counts come back).

Not restorable: `torch._dynamo.reset()`, which gobrrr's compiled variants need (cache
entries of one variant would count toward the next one's recompile limit), drops every
compiled frame, the user's too; `gobrrr optimize` and `gobrrr lab` say so when they do it.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Settings", "read_flag", "snapshot", "restore", "preserved", "tf32",
           "tf32_enabled", "has_precision_api", "cudnn_benchmark", "inductor_options",
           "ONCE_LOGGING", "once_logging_functions", "ignored_logging_name",
           "once_logging_ignored", "metrics_trip_on_ignored_functions",
           "TF32_ADVICE", "tf32_advice_quiet"]

# The `fp32_precision` owners of torch >= 2.9, by attribute path under torch.backends.
_PRECISION_PATHS = ("", "cuda.matmul", "cudnn", "cudnn.conv", "cudnn.rnn", "mkldnn",
                    "mkldnn.matmul", "mkldnn.conv", "mkldnn.rnn")
# Booleans restored on every torch: (attribute path, flag).
_FLAGS = (("cudnn", "benchmark"), ("cudnn", "deterministic"),
          ("cuda.matmul", "allow_bf16_reduced_precision_reduction"),
          ("cuda.matmul", "allow_fp16_reduced_precision_reduction"))
# The legacy TF32 booleans, read and written only on torch < 2.9.
_LEGACY_TF32 = (("cuda.matmul", "allow_tf32"), ("cudnn", "allow_tf32"))


def _backend(path: str) -> Any:
    import torch

    obj: Any = torch.backends
    for part in filter(None, path.split(".")):
        obj = getattr(obj, part)
    return obj


def read_flag(obj: Any, attr: str) -> Any:
    """A torch.backends attribute, or None where it does not exist or torch refuses to
    read it (the legacy getters raise in the mixed-API state)."""
    try:
        return getattr(obj, attr)
    except (AttributeError, RuntimeError):
        return None


def has_precision_api() -> bool:
    """torch >= 2.9: per-backend `fp32_precision` strings."""
    import torch

    return isinstance(read_flag(torch.backends.cuda.matmul, "fp32_precision"), str)


def _effective_precision(path: str) -> str:
    """The fp32 precision in force at `path` ("none" inherits from the parent level)."""
    parts = path.split(".")
    for i in range(len(parts), -1, -1):
        value = read_flag(_backend(".".join(parts[:i])), "fp32_precision")
        if isinstance(value, str) and value != "none":
            return value
    return "ieee"


def tf32_enabled(kind: str) -> bool:
    """Whether fp32 `kind` ("matmul" or "conv") runs in TF32 on CUDA under the current
    settings (cuDNN convolutions default to TF32; cuBLAS matmuls do not)."""
    if has_precision_api():
        return _effective_precision("cuda.matmul" if kind == "matmul" else
                                    "cudnn.conv") == "tf32"
    import torch

    obj = torch.backends.cuda.matmul if kind == "matmul" else torch.backends.cudnn
    return bool(read_flag(obj, "allow_tf32"))


@dataclass
class Settings:
    """A snapshot of every setting gobrrr may change; `restore` puts it back."""

    precision: dict[str, str] = field(default_factory=dict)  # path -> fp32_precision
    flags: dict[tuple[str, str], Any] = field(default_factory=dict)
    matmul_precision: str | None = None  # legacy API only (torch < 2.9)
    grad_enabled: bool = True
    inductor: dict[str, Any] | None = None
    dynamo_counters: dict[str, dict[str, int]] | None = None


def snapshot(dynamo: bool = True) -> Settings:
    """Every setting above. `dynamo=False`: leave dynamo's counters out, for a switch
    held around compiled calls, whose counters must survive it (optimize reads them)."""
    import torch

    s = Settings(grad_enabled=torch.is_grad_enabled())
    if has_precision_api():
        for path in _PRECISION_PATHS:
            value = read_flag(_backend(path), "fp32_precision")
            if isinstance(value, str):
                s.precision[path] = value
    else:
        for path, attr in _LEGACY_TF32:
            s.flags[(path, attr)] = read_flag(_backend(path), attr)
        s.matmul_precision = torch.get_float32_matmul_precision()
    for path, attr in _FLAGS:
        value = read_flag(_backend(path), attr)
        if value is not None:
            s.flags[(path, attr)] = value
    inductor = sys.modules.get("torch._inductor.config")
    if inductor is not None:
        s.inductor = inductor.get_config_copy()
    dynamo_utils = sys.modules.get("torch._dynamo.utils")
    if dynamo and dynamo_utils is not None:  # the user's recompile and graph-break counts
        s.dynamo_counters = {k: dict(v) for k, v in dynamo_utils.counters.items()}
    return s


def restore(s: Settings) -> None:
    """Write back exactly what `snapshot` read, through the same API it read it with."""
    import torch

    if s.matmul_precision is not None:
        # Legacy API: the precision first, since it also sets cuda.matmul.allow_tf32,
        # which the flags below then restore exactly.
        torch.set_float32_matmul_precision(s.matmul_precision)
    for path, value in s.precision.items():
        _backend(path).fp32_precision = value
    for (path, attr), value in s.flags.items():
        if value is not None:
            setattr(_backend(path), attr, value)
    torch.set_grad_enabled(s.grad_enabled)
    if s.inductor is not None:
        import torch._inductor.config as inductor

        inductor.load_config(s.inductor)
    if s.dynamo_counters is not None:
        from torch._dynamo.utils import counters

        counters.clear()
        for k, v in s.dynamo_counters.items():
            counters[k].update(v)


@contextlib.contextmanager
def preserved() -> Iterator[None]:
    """Every setting above is as it was when the block exits (also on an exception)."""
    s = snapshot()
    try:
        yield
    finally:
        restore(s)


@contextlib.contextmanager
def tf32(enabled: bool = True) -> Iterator[None]:
    """TF32 for CUDA fp32 matmuls and convolutions inside the block (or plain fp32 with
    enabled=False); the user's settings come back on exit, through the API they used.
    Dynamo's counters are left alone: held around compiled calls, the switch must not
    undo what they counted (optimize reads them after)."""
    s = snapshot(dynamo=False)
    try:
        if has_precision_api():
            value = "tf32" if enabled else "ieee"
            _backend("cuda.matmul").fp32_precision = value
            _backend("cudnn.conv").fp32_precision = value
        else:
            import torch

            torch.backends.cuda.matmul.allow_tf32 = enabled
            torch.backends.cudnn.allow_tf32 = enabled
        yield
    finally:
        restore(s)


@contextlib.contextmanager
def cudnn_benchmark(enabled: bool = True) -> Iterator[None]:
    """cuDNN's benchmark mode inside the block: the first call with each input shape times
    the convolution algorithms and keeps the fastest. Restored on exit."""
    import torch

    s = snapshot(dynamo=False)
    try:
        torch.backends.cudnn.benchmark = enabled
        yield
    finally:
        restore(s)


@contextlib.contextmanager
def inductor_options(**options: Any) -> Iterator[None]:
    """`torch._inductor.config` options inside the block (freezing=True, ...): Inductor
    reads them when it compiles, which happens at a compiled function's first call, so
    the block must hold that call. The whole config is restored on exit."""
    import torch._inductor.config as inductor

    s = snapshot(dynamo=False)
    try:
        for name, value in options.items():
            if not hasattr(inductor, name):
                raise AttributeError(f"torch._inductor.config has no option {name!r}")
            setattr(inductor, name, value)
        yield
    finally:
        restore(s)


# transformers puts these on `logging.Logger` (transformers.utils.logging): a call in a
# model's forward ("`loss_type=None` was set in the config but it is unrecognized", in
# every GPT-2 built from a config with labels) is a graph break under torch.compile,
# one frame more on the host every call. They warn once; the eager calls before a
# compile have warned already.
ONCE_LOGGING = ("warning_once", "info_once")


def once_logging_functions() -> list[Any]:
    """The ONCE_LOGGING methods `logging.Logger` has in this process (none before
    transformers is imported)."""
    import logging

    return [f for name in ONCE_LOGGING if (f := getattr(logging.Logger, name, None))]


def ignored_logging_name() -> str | None:
    """The name of dynamo's set of logging functions it skips when tracing:
    `ignore_logging_functions` (newer torch) or `ignore_logger_methods` (its older
    name, torch 2.5-2.10), or None where dynamo has neither."""
    import torch._dynamo.config as dynamo

    for name in ("ignore_logging_functions", "ignore_logger_methods"):
        if isinstance(getattr(dynamo, name, None), set):
            return name
    return None


# Where dynamo logs a failure to write its compilation metrics. Each compile writes its
# config into them; torch 2.11 sorts every set in that config, and functions do not sort
# ("'<' not supported between instances of 'functools._lru_cache_wrapper'"), so while
# the block's functions are in the set each compile logged a 15-line traceback at ERROR
# (about 380 lines for the GPT-2 training step on an H100, session al). The compile is
# unharmed; only that compile's metrics record is lost. torch 2.13 leaves the set out.
_METRICS_LOGGER = "torch._dynamo.metrics_context"


class _UnsortableConfigFilter:
    """Drops only the metrics logger's records whose exception is that sort (or, with one
    function in the set, the JSON encoding that follows it)."""

    def filter(self, record: Any) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        about_functions = isinstance(exc, TypeError) and (
            "not supported between" in str(exc) or "not JSON serializable" in str(exc))
        return not (about_functions
                    and str(record.msg).startswith("Unexpected exception logging"))


def metrics_trip_on_ignored_functions() -> bool:
    """Whether this torch's compile metrics fail to write dynamo's config once the
    ONCE_LOGGING functions are in its ignored set (torch 2.11 does: _METRICS_LOGGER).
    Asks dynamo's own writer (a private function, so False where it is gone)."""
    name = ignored_logging_name()
    functions = once_logging_functions()
    if name is None or not functions:
        return False
    import torch._dynamo.config as dynamo
    import torch._dynamo.utils as dynamo_utils

    write = getattr(dynamo_utils, "_get_dynamo_config_for_logging", None)
    if write is None:
        return False
    ignored: set[Any] = getattr(dynamo, name)
    added = [f for f in functions if f not in ignored]
    ignored.update(added)
    try:
        write()
    except TypeError:
        return True
    except Exception:  # noqa: BLE001 - any other failure is not this one
        return False
    finally:
        ignored.difference_update(added)
    return False


@contextlib.contextmanager
def once_logging_ignored() -> Iterator[None]:
    """Inside the block dynamo skips the ONCE_LOGGING calls it traces (no graph break);
    it reads the set when it traces, at a compiled function's first call, so the block
    must hold that call. The functions it added leave the set on exit, and so does the
    filter that keeps the metrics logger's tracebacks about them off the user's stderr
    (_METRICS_LOGGER)."""
    name = ignored_logging_name()
    if name is None:
        yield
        return
    import logging

    import torch._dynamo.config as dynamo

    ignored: set[Any] = getattr(dynamo, name)
    added = [f for f in once_logging_functions() if f not in ignored]
    ignored.update(added)
    quiet = _UnsortableConfigFilter()
    logging.getLogger(_METRICS_LOGGER).addFilter(quiet)
    try:
        yield
    finally:
        ignored.difference_update(added)
        logging.getLogger(_METRICS_LOGGER).removeFilter(quiet)


# Inductor's advice, at a compile's first call on a GPU with TF32 tensor cores while fp32
# matmuls do not use them (torch._inductor.compile_fx._warn_tf32_disabled, once a
# process). The search compiles fp32 candidates on purpose: TF32 is a candidate of its
# own (remedies/precision.py), measured and ranked beside them. Seen on the H100 (session
# al), the warning printed in the middle of the search's progress lines.
TF32_ADVICE = ("TensorFloat32 tensor cores for float32 matrix multiplication available "
               "but not enabled")


@contextlib.contextmanager
def tf32_advice_quiet() -> Iterator[None]:
    """Inside the block Inductor's TF32 advice (TF32_ADVICE) is not shown; every other
    warning is, and the filters are the caller's again on exit."""
    import re
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=re.escape(TF32_ADVICE))
        yield
