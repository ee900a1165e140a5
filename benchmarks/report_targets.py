"""`gobrrr doctor` targets for the report run (benchmarks/report_gpu.sh): NAME(batch_size)
returns (callable, args). The target loader puts this directory on sys.path while it
imports this file, so the cases of validate.py are importable by name."""

from __future__ import annotations

from typing import Any

# Imported at load time: the target loader puts this directory on sys.path only while it
# imports this file (a lazy import inside the functions failed on the H200 run).
from validate import gpt2_large as _gpt2_large
from validate import resnet50 as _resnet50


def resnet50(batch_size: int = 64) -> tuple[Any, tuple]:
    """torchvision ResNet-50 inference, fp32, 224x224 (validate.py's case)."""
    return _resnet50(batch_size)


def gpt2(batch_size: int = 8) -> tuple[Any, tuple]:
    """GPT-2 small inference, 8 x 512 tokens (validate.py's gpt2_large)."""
    return _gpt2_large(batch_size)
