"""Phases and op counts: the one vocabulary every source tags its ops, kernels and
intervals with, and the rules that count a call's ops.

A measured run (gobrrr.run) is a sequence of steps; inside a step each op carries the
phase it ran in. The budget, the report and both renderers roll time up per phase as
they do per op and per module, so a step that mixes regimes (a training step: forward,
backward, optimizer; a generation: prefill, then decode) is read apart, never averaged
into one verdict.

The vocabulary:
- FORWARD, BACKWARD, OPTIMIZER: a training step's parts. Live counting (counting.py)
  reads them from autograd (an op inside the engine's graph task is backward) and from
  torch's global optimizer-step hooks; a trace (tracefile/steps.py) from autograd's
  `evaluate_function` ranges and the `Optimizer.step#...` ranges the optimizer records.
- COMPILED: ops of a compiled graph, read from the profiled run of the compiled code
  (compiled.py), where autograd's split is not visible.
- DATA_LOADING: the ops inside a DataLoader iterator's `__next__` (collate, pinning),
  which torch marks with an `enumerate(DataLoader)#...` range in every trace.
- PREFILL, DECODE: phases a source knows from what a step is (a generation's forward over
  many new positions, then over one), or that a trace's `record_function("prefill")` /
  `("decode")` ranges name.
- COMMUNICATION: collectives (torch.distributed's dispatcher ops, NCCL kernels): never
  compute or memory.
- any other string: the name of the user's `torch.profiler.record_function` range the
  op ran inside, as the user named it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["FORWARD", "BACKWARD", "OPTIMIZER", "COMPILED", "DATA_LOADING", "PREFILL",
           "DECODE", "COMMUNICATION", "KNOWN", "COLLECTIVE_NAMESPACES", "is_collective",
           "launches_collective", "AUTOGRAD_RANGE", "OPTIMIZER_RANGE", "OPTIMIZER_STEP_RANGE",
           "DATA_LOADER_RANGE",
           "range_label", "OTHER_HOST", "GENERATION_RANGES",
           "dispatched_ops", "working_ops", "is_inference",
           "is_training"]

FORWARD = "forward"
BACKWARD = "backward"
OPTIMIZER = "optimizer"
COMPILED = "compiled"
DATA_LOADING = "data loading"
PREFILL = "prefill"
DECODE = "decode"
COMMUNICATION = "communication"
KNOWN = (FORWARD, BACKWARD, OPTIMIZER, COMPILED, DATA_LOADING, PREFILL, DECODE,
         COMMUNICATION)

# Namespaces of the ops that launch collectives (torch.distributed's dispatcher ops, as
# counting.py names them): their work is communication, never compute or memory.
COLLECTIVE_NAMESPACES = ("c10d::", "_c10d_functional::", "c10d_functional::")


def is_collective(op: str) -> bool:
    return op.startswith(COLLECTIVE_NAMESPACES)


def launches_collective(name: str) -> bool:
    """CPU ops that launch or wait for a collective (not compute): the collective ops and
    NCCL's `record_param_comms` (which carries the collective's metadata)."""
    return name == "record_param_comms" or is_collective(name)


# The ranges a trace marks the backward pass, the optimizer step and the wait for the
# next batch with (torch/utils/data/dataloader.py: _BaseDataLoaderIter._profile_name).
AUTOGRAD_RANGE = "autograd::engine::evaluate_function"
OPTIMIZER_RANGE = "Optimizer."
OPTIMIZER_STEP_RANGE = "Optimizer.step#"  # the step itself (not zero_grad)
DATA_LOADER_RANGE = "enumerate(DataLoader)#"

# The report's `phases` (step_phases.py) name the rest of a step this way: host time in
# no phase's ops (Python, dispatch, launches, waiting), never an op's phase.
OTHER_HOST = "other host time"


# A user's `record_function("prefill")` / `("decode")` ranges (any case) name a
# generation's phases (issue 21).
GENERATION_RANGES = {PREFILL: PREFILL, DECODE: DECODE}


def range_label(name: str, module: str, phase: str) -> tuple[str, str]:
    """The (module, phase) of what runs inside a profiler range named `name`, given
    those outside it: autograd's engine marks the backward pass, an optimizer's
    `Optimizer.step#Adam.step` (or `Optimizer.zero_grad#...`) its step, a DataLoader
    iterator's `__next__` the data loading, a range named prefill or decode that phase
    of a generation, and any other range names the module inside it and keeps the
    phase."""
    if (gen := GENERATION_RANGES.get(name.strip().lower())) is not None:
        return name, gen
    if name.startswith(AUTOGRAD_RANGE):
        return BACKWARD, BACKWARD
    if name.startswith(DATA_LOADER_RANGE):
        return "DataLoader", DATA_LOADING
    if name.startswith(OPTIMIZER_RANGE):
        cls = name.split("#", 1)[1].split(".")[0] if "#" in name else "optimizer"
        return f"optimizer.{cls}", OPTIMIZER
    return name, phase


def dispatched_ops(records: Iterable[Any]) -> int:
    """The ops a call dispatches, views included: each costs one trip through the
    dispatcher, which is what torch.compile and CUDA graphs remove (gains.host_time).
    The data loader's ops (collate) are not among them: neither remedy reaches them."""
    return sum(1 for r in records if r.phase != DATA_LOADING)


def working_ops(records: Iterable[Any]) -> int:
    """The ops that do work, views and the data loader's excluded: on CUDA each launches
    at least one kernel, and a compiler lowers about one graph node per such op (the
    compile-time estimate, remedies/plan.py; the launch-bound reading of the verdict)."""
    return sum(1 for r in records if r.op_class != "view" and r.phase != DATA_LOADING)


def is_training(records: Iterable[Any]) -> bool:
    """A call that runs a backward: a training step (an optimizer step may follow)."""
    return any(r.phase == BACKWARD for r in records)


def is_inference(records: Iterable[Any]) -> bool:
    """A call that runs no backward and no optimizer step: outputs are all it makes.
    Only FORWARD counts (beside the data loader's ops): a compiled workload's records
    (COMPILED) cannot tell."""
    phases = {r.phase for r in records}
    return FORWARD in phases and phases <= {FORWARD, DATA_LOADING}
