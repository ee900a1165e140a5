"""Targets of the optimize-models benchmark that no model name covers (FILE.py:NAME).

`mlp_16k`: 4 x (Linear(512, 512), ReLU) at batch 16384 in fp32, inference under no_grad,
as the optimize issue measured it. A factory: gobrrr scales its batch for the batch
experiment.
"""

from __future__ import annotations

from typing import Any


def mlp_16k(batch_size: int = 16384, device: str = "cuda") -> tuple[Any, tuple]:
    import torch
    from torch import nn

    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for _ in range(4):
        layers += [nn.Linear(512, 512), nn.ReLU()]
    model = nn.Sequential(*layers).to(device).eval()
    x = torch.randn(batch_size, 512, device=device)

    def forward(x: Any) -> Any:
        with torch.no_grad():
            return model(x)

    return forward, (x,)
