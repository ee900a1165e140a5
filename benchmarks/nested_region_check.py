"""How to mark a model's repeated blocks as a nested compile region without touching the
user's class (issue 24, session s; CPU or GPU): torch.compile of a whole training step
(forward, backward, AdamW) over 8 equal blocks, from a cold Inductor cache (the caller
sets TORCHINDUCTOR_CACHE_DIR), its first call's seconds and loss against eager.

    python benchmarks/nested_region_check.py {none|instance|subclass|class}

none: no region; instance: each block's `forward` attribute set to the region bound to it
(the user's class untouched); subclass: each block's __class__ set to a subclass whose
forward is the region (the user's class untouched); class: the class's own forward
replaced (what session s's GPU probe did, which changes the user's class). Prints one
JSON line.
"""

from __future__ import annotations

import copy
import json
import sys
import time
import types

import torch
from torch import nn


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b, self.ln = nn.Linear(64, 64), nn.Linear(64, 64), nn.LayerNorm(64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.b(torch.relu(self.a(self.ln(x))))


class Model(nn.Module):
    def __init__(self, n: int = 8) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block() for _ in range(n))
        self.head = nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def main() -> None:
    how = sys.argv[1]
    torch.manual_seed(0)
    model = Model()
    x = torch.randn(32, 64)
    with torch.no_grad():
        eager = float(copy.deepcopy(model)(x).square().mean())
    original = Block.forward
    region = torch.compiler.nested_compile_region(Block.forward)
    if how == "instance":
        for block in model.blocks:
            block.forward = types.MethodType(region, block)
    elif how == "subclass":
        sub = type("Block", (Block,), {"forward": region, "__module__": __name__})
        for block in model.blocks:
            block.__class__ = sub
    elif how == "class":
        Block.forward = region
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def step(t: torch.Tensor) -> torch.Tensor:
        opt.zero_grad(set_to_none=True)
        loss = model(t).square().mean()
        loss.backward()
        opt.step()
        return loss.detach()

    t0 = time.perf_counter()
    loss = float(torch.compile(step)(x))
    from torch._dynamo.utils import counters
    print(json.dumps({"how": how, "first_call_s": round(time.perf_counter() - t0, 1),
                      "loss": loss, "eager_loss": eager, "matches": abs(loss - eager) < 1e-5,
                      "calls_captured": counters["stats"]["calls_captured"],
                      "user_class_untouched": Block.forward is original,
                      "torch": torch.__version__}))


if __name__ == "__main__":
    main()
