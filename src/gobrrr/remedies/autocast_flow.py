"""What bf16 autocast would change in a counted fp32 call: which ops would run in bf16,
and the casts it would add.

Autocast sets each op's dtype from lists (torch.amp, CUDA): matmuls, convolutions and
attention run in the low precision, each fp32 input cast first (one cast kernel per
input; a parameter's cast is kept for the rest of the call, autocast's weight cache);
a list of ops runs in fp32 (norms, softmax, losses, sums, exp/log/pow...), each bf16
input cast up; batch norm reads a bf16 input beside its fp32 weights and statistics and
writes the input's dtype; every other op runs in the widest dtype of its inputs. So a
pointwise op between two matmuls runs in bf16 only where nothing fp32 joins it (a
residual stream kept in fp32, a norm's output), and an fp32 norm between two matmuls
costs two casts.

Simulated over the counted ops in call order, from the storages each read and wrote
(counting.OpRecord.fp32_reads, writes): the dtype each storage would hold. The backward
and optimizer ops are simulated by the same rules, which is approximate: autograd's own
casts of a cast parameter's gradient back to fp32 are not counted, and a model whose
code changes path under autocast (nn.MultiheadAttention leaves its fused fast path) runs
ops the fp32 count does not hold.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["AutocastFlow", "autocast_flow", "LOW_PRECISION_CLASSES", "FP32_OPS"]

# Op classes (counting.py) autocast runs in the low precision.
LOW_PRECISION_CLASSES = frozenset({"matmul", "conv", "attention"})

# Recorded aten names of the ops CUDA autocast runs in fp32 ("Ops that can autocast to
# float32", torch.amp docs), as a dispatch mode under autograd sees them (layer_norm is
# recorded as native_layer_norm, softmax as _softmax, cross_entropy as _log_softmax and
# nll_loss_forward).
FP32_OPS = frozenset({
    "native_layer_norm", "layer_norm", "native_group_norm", "group_norm", "_softmax",
    "softmax", "_log_softmax", "log_softmax", "nll_loss_forward", "nll_loss",
    "nll_loss2d_forward", "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss",
    "binary_cross_entropy_with_logits", "kl_div", "sum", "cumsum", "cumprod", "prod",
    "exp", "expm1", "log", "log2", "log10", "log1p", "pow", "reciprocal", "rsqrt",
    "norm", "linalg_vector_norm", "softplus", "acos", "asin", "cosh", "sinh", "tan",
    "erfinv", "logsumexp", "cdist", "dist", "renorm",
})


@dataclass(frozen=True)
class AutocastFlow:
    cast_bytes: tuple[int, ...]  # bytes each added cast moves (read + written)
    low: frozenset[int]  # record indices of the matmul-class ops that would run in bf16
    halved: frozenset[int]  # other fp32 ops whose every float input would be bf16

    @property
    def casts(self) -> int:
        return len(self.cast_bytes)


def autocast_flow(records: Sequence[Any], param_storages: Iterable[int] = ()
                  ) -> AutocastFlow:
    """The flow of dtypes through `records` (counting.OpRecord of an fp32 call) under
    bf16 autocast (module docstring); `param_storages`: the parameters', whose cast
    autocast keeps for the call."""
    params = frozenset(param_storages)
    held: dict[int, str] = {}  # storage -> "bf16" or "fp32" under autocast
    cast_params: set[int] = set()
    cast_bytes: list[int] = []
    low: set[int] = set()
    halved: set[int] = set()
    for r in records:
        ins = {s: held.get(s, "fp32") for s, _ in r.fp32_reads}
        name = r.op.rpartition("::")[2]
        if r.op_class in LOW_PRECISION_CLASSES and r.dtype == "fp32":
            for s, nbytes in r.fp32_reads:
                if ins[s] != "fp32" or s in cast_params:
                    continue
                if s in params:
                    cast_params.add(s)
                cast_bytes.append(nbytes + nbytes // 2)  # fp32 read, bf16 written
            out = "bf16"
            low.add(r.index)
        elif name in FP32_OPS:
            # bf16 read (half the fp32 bytes), fp32 written
            cast_bytes.extend(nbytes // 2 + nbytes for s, nbytes in r.fp32_reads
                              if ins[s] == "bf16")
            out = "fp32"
        elif r.op_class == "norm" and r.fp32_reads:
            # batch norm takes a bf16 input with fp32 weights and statistics, and writes
            # the input's dtype
            out = ins[r.fp32_reads[0][0]]
            if out == "bf16":
                halved.add(r.index)
        else:
            out = "bf16" if ins and all(d == "bf16" for d in ins.values()) else "fp32"
            if out == "bf16" and r.dtype == "fp32":
                halved.add(r.index)
        read = {s for s, _ in r.fp32_reads}
        for s, _ in r.writes:
            if s not in read:  # written in place: the storage keeps its dtype
                held[s] = out
    return AutocastFlow(tuple(cast_bytes), frozenset(low), frozenset(halved))
