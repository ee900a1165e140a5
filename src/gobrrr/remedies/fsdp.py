"""The FSDP2 remedies of a torchrun job: `reshard_after_forward=False`, explicit
prefetching, and a larger per-GPU batch (advice). RemedySpecs like every other (ddp.py
says how they predict and apply); a candidate is a fresh build from the factory (FSDP2
modules cannot be deep-copied) whose settings are changed in place.

With T, X, G as in comm.py and P the unsharded parameter bytes:
- reshard_after_forward=False: the backward's all-gather goes; with exposure
  proportional to bytes (two all-gathers of the parameters P, one reduce-scatter of G),
  X x P / (2P + G).
- explicit prefetching: no budget term (measured only).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from gobrrr.gains import Gain
from gobrrr.remedies.base import PREP_FLAG, STAGE_MUTATE, Candidate, Context, RemedySpec
from gobrrr.remedies.comm import applies_to, comm_gain, predict_batch, transfer_s, waiting_note
from gobrrr.units import fmt_num, fmt_s

__all__ = ["SPECS", "predict_reshard", "find_fsdp", "apply_fsdp"]


def predict_reshard(ctx: Context) -> Gain:
    """X x P / (2P + G): the backward's all-gather (module docstring)."""
    f = ctx.comm
    if f is None or f.kind != "fsdp" or f.param_bytes + f.total_grad_bytes <= 0:
        return Gain.none("no FSDP2 parameters")
    p, g = f.param_bytes, f.total_grad_bytes
    exposed = transfer_s(ctx)
    saved = exposed * p / (2 * p + g)
    basis = (f"the backward's all-gather of {fmt_num(p, 'B')} goes: its share of the "
             f"exposed {fmt_s(exposed)}{waiting_note(ctx)} by bytes, P/(2P+G) = "
             f"{p / (2 * p + g):.2f}; "
             "keeps the unsharded parameters from forward to backward (memory)")
    return comm_gain(ctx, saved, "communication", basis)


def find_fsdp(modules: Sequence[Any]) -> list[Any]:
    """Every FSDP2 module (fully_shard) under the reachable modules, in module order."""
    try:
        from torch.distributed.fsdp import FSDPModule
    except ImportError:  # torch < 2.6
        return []
    seen: set[int] = set()
    out = []
    for top in modules:
        for m in top.modules():
            if isinstance(m, FSDPModule) and id(m) not in seen:
                seen.add(id(m))
                out.append(m)
    return out


def apply_fsdp(modules: Sequence[Any], settings: Mapping[str, Any]) -> list[str]:
    """Change the FSDP2 settings of a fresh build in place; what was done, in words."""
    units = find_fsdp(modules)
    if not units:
        raise RuntimeError("no FSDP2 (fully_shard) module in this build")
    done = []
    if "reshard_after_forward" in settings:
        for u in units:
            u.set_reshard_after_forward(settings["reshard_after_forward"], recurse=False)
        done.append(f"reshard_after_forward={settings['reshard_after_forward']} on "
                    f"{len(units)} unit(s)")
    if settings.get("prefetch"):
        # the root (units[0], called first) gathers its own parameters; the blocks below
        # it prefetch one ahead in forward and one behind in backward
        blocks = units[1:]
        for i, b in enumerate(blocks):
            if i + 1 < len(blocks):
                b.set_modules_to_forward_prefetch([blocks[i + 1]])
            if i > 0:
                b.set_modules_to_backward_prefetch([blocks[i - 1]])
        done.append(f"prefetch one unit ahead over {len(blocks)} block(s)")
    return done


def _apply(settings: Mapping[str, Any]) -> Callable[[Candidate, Context], Candidate]:
    def apply(cand: Candidate, _ctx: Context) -> Candidate:
        cand.notes = [*cand.notes, *apply_fsdp(cand.modules, settings)]
        return cand

    return apply


def _spec(name: str, group: str, settings: dict[str, Any],
          predict: Callable[[Context], Gain], snippet: str, how: str, *,
          advice_only: bool = False) -> RemedySpec:
    return RemedySpec(name, "fsdp", "communication", STAGE_MUTATE, group,
                      applies_to("fsdp"), predict, _apply(settings), snippet, title=name,
                      how=how, advice_only=advice_only, prep=PREP_FLAG, settings=settings)


SPECS: list[RemedySpec] = [
    _spec("reshard_after_forward_false", "reshard", {"reshard_after_forward": False},
          predict_reshard,
          "fully_shard(block, reshard_after_forward=False)  # or "
          "model.set_reshard_after_forward(False): no all-gather in the backward, "
          "parameters kept unsharded between forward and backward",
          "fully_shard(block, reshard_after_forward=False)"),
    _spec("explicit_prefetch", "prefetch", {"prefetch": 1},
          lambda _ctx: Gain.none("no budget term: the next block's all-gather is issued "
                                 "earlier; measured only"),
          "blocks = [m for m in model.modules() if isinstance(m, FSDPModule)]\n"
          "for i, b in enumerate(blocks):\n"
          "    b.set_modules_to_forward_prefetch(blocks[i + 1:i + 2])\n"
          "    b.set_modules_to_backward_prefetch(blocks[max(0, i - 1):i][::-1])",
          "set_modules_to_forward_prefetch / set_modules_to_backward_prefetch one block "
          "ahead"),
    _spec("larger_batch_fsdp", "batch", {}, predict_batch,
          "# double the per-GPU batch if memory and convergence allow: the collectives "
          "stay, the math doubles", "double the per-GPU batch", advice_only=True),
]
