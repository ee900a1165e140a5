"""Vision models from transformers' configs, random weights (FILE.py:NAME targets): ViT-B/16,
ResNet-50 and ConvNeXt-T as transformers writes them, for benchmarks run on a machine
without torchvision (this project's CPU machine: benchmarks/fusion_bytes_check.py).
Inference under no_grad; `resnet50_train` and `vit_b16_train` are one AdamW training
step each (cross-entropy).
"""

from __future__ import annotations

from typing import Any

import torch


def _infer(model: Any, x: torch.Tensor) -> tuple[Any, tuple]:
    model.eval()

    def forward(x: torch.Tensor) -> Any:
        with torch.no_grad():
            return model(pixel_values=x).logits

    return forward, (x,)


def _train(model: Any, x: torch.Tensor) -> tuple[Any, tuple]:
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    y = torch.randint(0, 1000, (x.shape[0],), device=x.device)

    def step(x: torch.Tensor) -> Any:
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(pixel_values=x).logits, y)
        loss.backward()
        opt.step()
        return loss.detach()

    return step, (x,)


def _images(batch_size: int, device: str) -> torch.Tensor:
    torch.manual_seed(0)
    return torch.randn(batch_size, 3, 224, 224, device=device)


def _model(kind: str, device: str) -> Any:
    """transformers' `{kind}Config` and `{kind}ForImageClassification`, 1000 labels."""
    import transformers

    config = getattr(transformers, f"{kind}Config")(num_labels=1000)
    return getattr(transformers, f"{kind}ForImageClassification")(config).to(device)


def vit_b16(batch_size: int = 4, device: str = "cpu") -> tuple[Any, tuple]:
    return _infer(_model("ViT", device), _images(batch_size, device))


def resnet50(batch_size: int = 8, device: str = "cpu") -> tuple[Any, tuple]:
    return _infer(_model("ResNet", device), _images(batch_size, device))


def resnet50_train(batch_size: int = 8, device: str = "cpu") -> tuple[Any, tuple]:
    return _train(_model("ResNet", device), _images(batch_size, device))


def vit_b16_train(batch_size: int = 4, device: str = "cpu") -> tuple[Any, tuple]:
    return _train(_model("ViT", device), _images(batch_size, device))


def convnext_tiny(batch_size: int = 8, device: str = "cpu") -> tuple[Any, tuple]:
    return _infer(_model("ConvNext", device), _images(batch_size, device))
