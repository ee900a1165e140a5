"""Targets for reading issue 24's compile prediction misses (FILE.py:NAME, GPU machine):
the model already in bf16 (and channels_last for the conv net), under inference_mode,
eager (`*_eager`) or compiled as optimize's winning stack compiles it (`*_compiled`:
torch.compile of the step, default mode so the profiler sees each kernel's launch with
its arguments, Inductor freezing on). Doctor each: where the compiled call's time goes
against the eager one's, op class by op class.
"""

from __future__ import annotations

from typing import Any


def _built(target: str, batch: int, seq: int | None, channels_last: bool,
           compiled: bool, device: str = "cuda") -> tuple[Any, tuple]:
    """The target in bf16 (channels_last for a conv net) as a step under inference_mode;
    `compiled`: the model's call compiled (default mode, Inductor freezing on) inside
    the inference_mode (dynamo traced the mode's entry inside the compiled step badly on
    CPU), as optimize's winning stack runs it."""
    import torch

    from gobrrr.models import ModelOptions
    from gobrrr.targets import load_target

    w = load_target(target, device, batch, ModelOptions(seq_len=seq, dtype="bf16"))
    args = w.args
    if channels_last:
        for c in w.fn.__closure__ or ():
            if isinstance(c.cell_contents, torch.nn.Module):
                c.cell_contents.to(memory_format=torch.channels_last)
        args = tuple(a.contiguous(memory_format=torch.channels_last)
                     if isinstance(a, torch.Tensor) and a.dim() == 4 else a for a in args)
    fn = w.fn
    if compiled:
        import torch._inductor.config as cfg

        cfg.freezing = True
        fn = torch.compile(fn)

    def step(*a: Any) -> Any:
        with torch.inference_mode():
            return fn(*a, **w.kwargs)

    return step, args


def resnet50_b256_eager() -> tuple[Any, tuple]:
    return _built("torchvision:resnet50", 256, None, True, False)


def resnet50_b256_compiled() -> tuple[Any, tuple]:
    return _built("torchvision:resnet50", 256, None, True, True)


def gpt2_8x512_eager() -> tuple[Any, tuple]:
    return _built("hf:gpt2", 8, 512, False, False)


def gpt2_8x512_compiled() -> tuple[Any, tuple]:
    return _built("hf:gpt2", 8, 512, False, True)
