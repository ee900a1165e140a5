"""torch.compile with a check that the variant really ran compiled.

The trap (docs/reference.md): compiling one Python function per size in a loop reuses one code
object; after dynamo's recompile limit (8) the next variants silently run *eagerly*, and
a benchmark reports eager times as compiled ones (129 ms instead of ~1 ms on the H200).
Three guards here:
1. `torch._dynamo.reset()` before every variant, so no code object accumulates cache
   entries (NB: this also drops any compiled code of the calling process; the lab owns
   its process, and the CLI runs nothing else).
2. `fullgraph=True`: a graph break or a hit recompile limit raises instead of falling
   back to eager for part of the function.
3. dynamo's counters: exactly one captured graph holding the expected number of ops, and
   no new graph while timing (a recompile during timing would mean a guard failed).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["CompileCheck", "compile_fresh", "graphs_so_far"]


@dataclass
class CompileCheck:
    compiled: bool  # one graph with the expected ops, no fallback
    graphs: int  # dynamo's unique graphs after the first call (1 expected)
    ops_captured: int  # torch calls dynamo put in the graph
    kernels: int | None  # kernels inductor generated (None: not reported, e.g. cache hit)
    compile_s: float
    error: str | None = None
    recompiled_while_timing: bool = False

    def status(self) -> str:
        if self.error:
            return f"failed: {self.error}"
        if self.recompiled_while_timing:
            return "recompiled while timing"
        if not self.compiled:
            return f"not one graph ({self.graphs} graphs, {self.ops_captured} ops)"
        k = f", {self.kernels} kernel{'s' if self.kernels != 1 else ''}" if self.kernels else ""
        return f"yes: 1 graph{k}"


def graphs_so_far() -> int:
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def compile_fresh(
    fn: Callable[..., Any], args: tuple[Any, ...], expected_ops: int | None
) -> tuple[Callable[..., Any], CompileCheck]:
    """Compile `fn` from a clean dynamo state, run it once on `args`, and check it.

    expected_ops: torch calls the graph must hold (e.g. k multiplies); None skips that.
    Returns the compiled callable (use it only if `check.compiled`).
    """
    import time

    import torch
    import torch._dynamo
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    metrics: Any = None
    try:  # inductor's kernel counter: present in torch 2.x, private, so optional
        from torch._inductor import metrics as _metrics

        metrics = _metrics
        metrics.reset()
    except ImportError:  # pragma: no cover - depends on the torch build
        pass
    compiled = torch.compile(fn, fullgraph=True)
    t0 = time.perf_counter()
    try:
        compiled(*args)
        if args and isinstance(args[0], torch.Tensor) and args[0].is_cuda:
            torch.cuda.synchronize()
    except Exception as exc:  # noqa: BLE001 - any compile failure is reported, not raised
        msg = str(exc).strip().splitlines()[0][:160] if str(exc).strip() else ""
        return fn, CompileCheck(False, 0, 0, None, time.perf_counter() - t0,
                                error=f"{type(exc).__name__}: {msg}")
    compile_s = time.perf_counter() - t0
    graphs = graphs_so_far()
    ops = int(counters["stats"]["calls_captured"])
    kernels = int(getattr(metrics, "generated_kernel_count", 0) or 0) if metrics else 0
    ok = graphs == 1 and (expected_ops is None or ops == expected_ops)
    return compiled, CompileCheck(ok, graphs, ops, kernels or None, compile_s)
