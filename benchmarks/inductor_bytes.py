"""The bytes Inductor's kernels move, by Inductor's own count, for the benchmarks that
check gobrrr's estimates against it (fusion_bytes_check.py, autocast_compile_bytes.py).

`counting()` patches GraphLowering.count_bytes (what Inductor's `inductor_metrics` log
reports; it runs only while that log is on) to keep, for each graph Inductor compiles, the
read + write bytes of its scheduled nodes by kind: "generated" (its own kernels), "extern"
(GEMMs, convolutions, attention it calls), "nop". Inductor's FX graph and AOTAutograd
caches are off inside it: a cached graph is not scheduled again, and its bytes would go
uncounted (a first version read half a training step's graphs).

A fused node is counted from its parts: Inductor's own count of a fused node takes every
buffer it touches whole (the node's element count is not known there), so GPT-2's
embedding, fused into a layer norm on the CPU, read as the whole 154 MB table for 512
rows. Each part bounds a buffer's bytes by the elements it computes (Inductor's rule), a
buffer counts once at its largest part's, and the buffers used only inside the node are
left out, as in Inductor's own.
"""

from __future__ import annotations

import contextlib
import logging
from collections import Counter
from collections.abc import Iterator
from typing import Any

__all__ = ["counting"]


def _node_bytes(scheduler: Any, n: Any) -> int:
    parts = n.get_nodes()
    if len(parts) == 1:
        return int(n.get_read_write_buffers_sizes())
    names = {b.get_name() for x in parts for b in x.get_outputs()}
    inside = {b for b in names if all(u.node in parts for u in scheduler.name_to_buf[b].users)}
    per_buf: dict[str, int] = {}
    for x in parts:
        for buf, nbytes in x.get_read_write_buffer_accesses(
                include_reads=True, include_writes=True).items():
            if buf not in inside:
                per_buf[buf] = max(per_buf.get(buf, 0), int(nbytes))
    return sum(per_buf.values())


def _node_label(n: Any) -> str:
    """A scheduled node's name and the FX nodes it was lowered from (its origins), for a
    reader comparing one device's kernels with another's."""
    origins: set[str] = set()
    for x in n.get_nodes():
        origins.update(str(getattr(o, "name", o)) for o in getattr(x.node, "origins", ()) or ())
    return f"{n.get_name()}: {', '.join(sorted(origins))[:160]}"


@contextlib.contextmanager
def counting(nodes: list[tuple[str, int, str]] | None = None) -> Iterator[list[Counter[str]]]:
    """Inside: each graph Inductor compiles appends its bytes by node kind to the list;
    `nodes`, where given, gets (kind, bytes, label) of every scheduled node."""
    import torch
    import torch._inductor.graph as inductor_graph
    from torch._inductor.scheduler import ExternKernelSchedulerNode, NopKernelSchedulerNode

    graphs: list[Counter[str]] = []
    original = inductor_graph.GraphLowering.count_bytes

    def count_bytes(self: Any) -> Any:
        kinds: Counter[str] = Counter()
        for n in self.scheduler.nodes:
            kind = ("extern" if isinstance(n, ExternKernelSchedulerNode) else
                    "nop" if isinstance(n, NopKernelSchedulerNode) else "generated")
            nbytes = _node_bytes(self.scheduler, n)
            kinds[kind] += nbytes
            if nodes is not None:
                nodes.append((kind, nbytes, _node_label(n)))
        graphs.append(kinds)
        return original(self)

    caches = (torch._inductor.config.fx_graph_cache,
              torch._functorch.config.enable_autograd_cache)
    inductor_graph.GraphLowering.count_bytes = count_bytes  # type: ignore[method-assign]
    torch._inductor.config.fx_graph_cache = False
    torch._functorch.config.enable_autograd_cache = False
    torch._logging.set_logs(inductor_metrics=True)  # count_bytes runs only when logged
    logging.getLogger("torch._inductor").setLevel(logging.WARNING)
    try:
        yield graphs
    finally:
        inductor_graph.GraphLowering.count_bytes = original  # type: ignore[method-assign]
        (torch._inductor.config.fx_graph_cache,
         torch._functorch.config.enable_autograd_cache) = caches
        torch._logging.set_logs()
