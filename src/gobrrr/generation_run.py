"""The generation source (`gobrrr doctor hf:NAME --generate N`): a causal LM's greedy
generation of N new tokens -> the measured run (run.py) and its Report, with the
generation's own figures beside the budget.

1. `generation.profile_generation`: warm-up, then N tokens with each forward timed:
   prefill time and tokens/s, prefill FLOPs and MFU, each decode step, decode tokens/s,
   the bytes a decode step reads, the bandwidth bound and MBU (the report's
   `generation`).
2. A shorter generation of K = min(N, PROFILED_TOKENS) tokens, profiled (torch.profiler,
   recorded shapes), each forward inside a `record_function("prefill")` or
   `("decode")` range: read by the trace source (tracefile/), its ops carry the
   phase they ran in, so the budget has a prefill row and a decode row; generate's own
   ops outside the model's forwards (logits processing, stopping checks) are the
   BETWEEN phase. Counting one
   prefill and a few decode steps, not every op of every step, keeps a long generation
   quick.
3. T_wall: the median of REPEATS unprofiled K-token generations (synchronized at their
   ends), so the budget splits the very call it profiled; the report's `generation`
   says how the N-token figures share out between prefill and decode.
4. With experiments, the decode batch experiment (generation_batch.py): tokens/s at
   batch 1, 2, 4, ... against both roofs, in `generation.batch_scaling`; and the
   prompt-length experiment (generation_prompt.py): prefill's tokens/s and MFU at 1, 2,
   4, ... times the prompt, in `generation.prompt_scaling`; and on CUDA the decode step's
   CUDA-graph experiment (generation_graph.py), in `generation.decode_graph`.
The model is unchanged afterwards (hooks removed; inference mode throughout).
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from gobrrr.diagnosis import report_for
from gobrrr.generation import GenerationProfile, profile_generation
from gobrrr.generation_batch import decode_batch_scaling
from gobrrr.generation_graph import decode_graph_experiment
from gobrrr.generation_prompt import prefill_length_scaling
from gobrrr.hardware import calibrate
from gobrrr.phases import DECODE, FORWARD, PREFILL
from gobrrr.remedies.base import workload_facts
from gobrrr.report import Report
from gobrrr.run import Step
from gobrrr.timing import device_sync, from_samples
from gobrrr.tracefile.analysis import PROFILED_WALL_NOTE, analyse_trace
from gobrrr.tracefile.read import read_header

__all__ = ["diagnose_generation", "decode_split", "PROFILED_TOKENS", "REPEATS", "BETWEEN"]

Progress = Callable[[str], None]

# generate's own ops, outside any forward of the model (the trace source's default
# phase, forward, would say they are the model's)
BETWEEN = "between forwards"
# The profiled generation: one prefill and one decode step (every decode step runs the
# same ops). Every op call is a row of the report (a TinyLlama forward is ~1,700 op calls):
# 4 tokens made a 4.9 MB report on the H200, 8 tokens 4.7 MB on this CPU.
PROFILED_TOKENS = 2
REPEATS = 5  # unprofiled K-token generations whose median is T_wall
BATCH_BUDGET_S = 12.0  # the decode batch experiment's time, at most (diagnosis within 20 s)
PROMPT_BUDGET_S = 6.0  # the prompt-length experiment's time, at most


@contextmanager
def _part(seconds: dict[str, float], name: str) -> Iterator[None]:
    """The host seconds of one part of the diagnosis, kept under `name` (the report's
    `generation.seconds_by_part`: where the diagnosis's own time went)."""
    t0 = time.perf_counter()
    try:
        yield
    finally:
        seconds[name] = time.perf_counter() - t0


def _generate(model: Any, ids: Any, n: int) -> Callable[[], Any]:
    kw = {"max_new_tokens": n, "min_new_tokens": n, "do_sample": False,
          "pad_token_id": 0}
    return lambda: model.generate(ids, **kw)


def _phase_ranges(model: Any) -> list[Any]:
    """Forward hooks that put each forward in a record_function range named after its
    phase (prefill: several new positions per sequence; decode: one)."""
    from torch.profiler import record_function

    from gobrrr.generation import new_positions

    open_: list[Any] = []

    def pre(_m: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        n = new_positions(args, kwargs)
        rf = record_function(DECODE if n == 1 else PREFILL)
        rf.__enter__()
        open_.append(rf)

    def post(_m: Any, _a: Any, _k: Any, _out: Any) -> None:
        if open_:
            open_.pop().__exit__(None, None, None)

    return [model.register_forward_pre_hook(pre, with_kwargs=True),
            model.register_forward_hook(post, with_kwargs=True, always_call=True)]


def _profiled_trace(model: Any, run: Callable[[], Any], device: str) -> Path:
    import torch
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU]
    if device == "cuda":
        activities.append(ProfilerActivity.CUDA)
    fd, name = tempfile.mkstemp(suffix=".json", prefix="gobrrr-generate-")
    os.close(fd)
    hooks = _phase_ranges(model)
    try:
        with torch.inference_mode(), profile(activities=activities,
                                             record_shapes=True) as prof:
            run()
            device_sync(device)()
        prof.export_chrome_trace(name)
    finally:
        for h in hooks:
            h.remove()
    return Path(name)


def diagnose_generation(model: Any, input_ids: Any, new_tokens: int, *, name: str,
                        details: dict[str, Any] | None = None, description: str = "",
                        progress: Progress | None = None, experiments: bool = True,
                        batch_budget_s: float = BATCH_BUDGET_S,
                        prompt_budget_s: float = PROMPT_BUDGET_S) -> Report:
    """The Report of a greedy generation of `new_tokens` tokens (module docstring);
    `experiments`: the decode batch experiment too (generation_batch.py)."""
    import torch

    say = progress or (lambda _m: None)
    t0 = time.perf_counter()
    parts: dict[str, float] = {}
    device = input_ids.device.type
    with _part(parts, "calibrate"):
        ceil = calibrate(device, progress=say)
    dtype = next(model.parameters()).dtype
    peak = ceil.peak_flops_per_s.get("bf16" if dtype == torch.bfloat16 else "fp32")
    say(f"generating {new_tokens} tokens, each forward timed (after a warm-up)")
    with _part(parts, "generation"):
        prof = profile_generation(model, input_ids, new_tokens, warmup=1,
                                  bandwidth_bytes_per_s=ceil.bandwidth_bytes_per_s,
                                  peak_flops_per_s=peak, pad_token_id=0)
    k = min(new_tokens, PROFILED_TOKENS)
    run = _generate(model, input_ids, k)
    say(f"timing {REPEATS} generations of {k} tokens, unprofiled")
    sync = device_sync(device)
    samples = []
    with _part(parts, "timing"), torch.inference_mode():
        for _ in range(REPEATS):
            sync()
            s0 = time.perf_counter()
            run()
            sync()
            samples.append(time.perf_counter() - s0)
    say(f"profiling one generation of {k} tokens")
    with _part(parts, "profile"):
        path = _profiled_trace(model, run, device)
    try:
        with _part(parts, "analysis"):
            a = analyse_trace(read_header(path), ceil, say, one_step=True)
    finally:
        path.unlink(missing_ok=True)
    for r in a.run.counts.records:
        if r.phase == FORWARD:
            r.phase = BETWEEN
    timing = from_samples(samples)
    gen = prof.to_dict() | {"share_prefill": _share_prefill(prof),
                            "profiled_new_tokens": k}
    scaling = None
    if experiments:
        say("the batch experiment: decode at batch 1, 2, 4, ... until tokens/s stops "
            "rising")
        with _part(parts, "batch_scaling"):
            scaling = decode_batch_scaling(
                model, input_ids, new_tokens=min(new_tokens, 8),
                bandwidth_bytes_per_s=ceil.bandwidth_bytes_per_s, peak_flops_per_s=peak,
                budget_s=batch_budget_s, progress=say, pad_token_id=0)
        gen["batch_scaling"] = scaling.to_dict()
        say("the prompt-length experiment: prefill at 1, 2, 4, ... times the prompt")
        with _part(parts, "prompt_scaling"):
            prompt = prefill_length_scaling(model, input_ids, peak_flops_per_s=peak,
                                            budget_s=prompt_budget_s, progress=say,
                                            pad_token_id=0)
        gen["prompt_scaling"] = prompt.to_dict()
        bound_step = (prof.step_bytes / ceil.bandwidth_bytes_per_s
                      if ceil.bandwidth_bytes_per_s else None)
        with _part(parts, "decode_graph"):
            graph = decode_graph_experiment(model, input_ids,
                                            new_tokens=min(new_tokens, 8),
                                            bound_step_s=bound_step, progress=say)
        gen["decode_graph"] = graph.to_dict()
    notes = [f"generation: greedy, {new_tokens} new tokens after a {prof.prompt_len}-token "
             f"prompt, batch {prof.batch}: {prof.summary()}",
             f"the budget is one generation of {k} tokens (1 prefill + {k - 1} decode "
             f"steps), profiled once with each forward in a prefill or decode range; "
             f"T_wall is the median of {REPEATS} unprofiled ones",
             *[n for n in a.run.notes if n != PROFILED_WALL_NOTE
               and not n.startswith(("steps: ", "ceilings: given"))],
             *prof.notes, *([scaling.summary()] if scaling else []),
             *([prompt.summary(), graph.summary()] if experiments else [])]
    workload = {"name": name, "description": description or f"{name}: generation",
                "device": device, "batch_size": prof.batch, "source": "generation",
                **({"model": details} if details else {})}
    measured = replace(a.run, source="generation", workload=workload, timing=timing,
                       wall_s=timing.median_s,
                       steps=[Step("prefill", prof.prefill_s),
                              *[Step(f"decode {i + 1}", s) for i, s in
                                enumerate(prof.decode_s)]],
                       notes=notes)
    with _part(parts, "report"):
        report = report_for(measured, ceil, facts=workload_facts([model], []),
                            started_s=t0)
    row = next((r for r in report.budget.per_phase if r.name == DECODE), None)
    if row is not None and k > 1:
        gen["decode"] = gen["decode"] | {
            "split": decode_split(prof.decode_step_s, row, k - 1, device)}
    report.generation = gen | {"seconds_by_part": parts}
    return report


def decode_split(step_s: float, row: Any, steps: int, device: str) -> dict[str, Any]:
    """A decode step's own compute / memory / overhead (issue 21, item 2): the profiled
    decode steps' op time (`row`, the budget's decode phase over `steps` steps) split as
    the budget splits it, and the rest of the timed step (`step_s`, the median of the
    N-token generation) is overhead: host work between the model's forwards, launches,
    syncs, and the phase's ops the budget itself reads as overhead. Approximate: the
    step is timed in one generation and profiled in another; on the CPU an op's time is
    its host time under the profiler, so overhead is a lower bound there."""
    busy = row.time_s / steps
    scale = min(1.0, step_s / busy) if busy > 0 else 0.0  # busy cannot exceed the step
    compute, memory = row.compute_s / steps * scale, row.memory_s / steps * scale
    # overhead: the rest of the step (host work, launches, syncs, and the phase's own
    # ops the budget reads as overhead, such as views)
    parts = {"compute_s": compute, "memory_s": memory,
             "overhead_s": max(0.0, step_s - compute - memory)}
    return {"step_s": step_s, "busy_s": busy, **parts,
            "shares": {k.removesuffix("_s"): v / step_s if step_s > 0 else 0.0
                       for k, v in parts.items()},
            "source": (f"the decode phase of the profiled generation ({steps} step"
                       f"{'s' * (steps != 1)}) against the timed step; "
                       + ("GPU busy time" if device == "cuda" else
                          "op time under the profiler: overhead a lower bound"))}


def _share_prefill(prof: GenerationProfile) -> float:
    """Prefill's share of the N-token generation's forward-to-forward time."""
    total = prof.prefill_s + sum(prof.decode_s)
    return prof.prefill_s / total if total > 0 else 0.0
