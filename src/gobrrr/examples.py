"""Built-in workloads: one per regime, for `gobrrr doctor examples:NAME` and the tests.

Each is a factory `(batch_size, device) -> (callable, args)` with random weights and
inputs (never zeros: matmuls run faster on predictable data). Sizes differ by device so
each stays in its regime on a 2-core CPU and on a datacenter GPU alike.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gobrrr.errors import UserError

__all__ = ["Example", "EXAMPLES", "get", "seeded_mlp", "mse_step"]


@dataclass(frozen=True)
class Example:
    name: str
    description: str
    expected_regime: str  # what first principles say; the tests check the tool agrees
    factory: Callable[..., tuple[Callable[..., Any], tuple[Any, ...]]]
    batch_cpu: int
    batch_cuda: int

    def default_batch(self, device: str) -> int:
        return self.batch_cuda if device == "cuda" else self.batch_cpu


def _gen(device: str) -> Any:
    import torch

    return torch.Generator(device=device).manual_seed(0)


def seeded_mlp(width: int, depth: int, device: Any, act: Any = None) -> Any:
    """`depth` x (Linear(width, width), act: GELU by default) on `device`, weights from
    seed 0 (the same on every rank of a distributed example), the user's RNG restored."""
    import torch
    from torch import nn

    torch_state = torch.random.get_rng_state()
    torch.manual_seed(0)  # weights reproducible; the user's RNG restored just below
    layers: list[nn.Module] = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), (act or nn.GELU)()]
    model = nn.Sequential(*layers).to(device)
    torch.random.set_rng_state(torch_state)
    return model


def mlp(batch_size: int = 1, device: str = "cpu") -> tuple[Callable[..., Any], tuple]:
    """4 x [Linear(D, D), GELU (ReLU on CPU)], inference, D = 512 on CUDA, 64 on CPU. At batch 1
    each op is a few hundred kFLOP, far less than the time to dispatch it, so overhead
    dominates (docs/reference.md: flat ~60 us on an H200 up to batch ~64). On a CPU the 512-wide
    weights (4 MB) would make weight reads the bottleneck instead; 64 wide (16 kB)
    keeps the example about overhead there too."""
    import torch
    from torch import nn

    width = 512 if device == "cuda" else 64
    # ReLU on CPU: PyTorch's CPU GELU (erf) costs ~6 us even on 64 elements, a fixed cost
    # inside the op that would blur the example; on CUDA both cost one tiny kernel.
    model = seeded_mlp(width, 4, device, nn.GELU if device == "cuda" else nn.ReLU)
    x = torch.randn(batch_size, width, device=device, generator=_gen(device))

    def forward(x: Any) -> Any:
        with torch.no_grad():
            return model(x)

    return forward, (x,)


def matmul(batch_size: int = 1024, device: str = "cpu") -> tuple[Callable[..., Any], tuple]:
    """[batch, K] @ [K, N] with K = N = 4096 on CUDA (bf16, tensor cores) and 1024 on CPU
    (fp32). Intensity at batch = K = N: 2*n^3 FLOPs over 3*n^2 elements moved, n/3 FLOP
    per element: far above every ridge point, so compute-bound."""
    import torch

    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    k = 4096 if device == "cuda" else 1024
    a = torch.randn(batch_size, k, device=device, dtype=dtype, generator=_gen(device))
    b = torch.randn(k, k, device=device, dtype=dtype, generator=_gen(device))
    return torch.mm, (a, b)


def pointwise(batch_size: int = 1, device: str = "cpu") -> tuple[Callable[..., Any], tuple]:
    """A chain of 4 unfused cheap pointwise ops (multiply, add) over a large tensor, 2^26
    fp32 (256 MiB) per batch on CPU and CUDA: 1 FLOP per 8 bytes moved, far below every
    ridge point: memory-bound. Each op moves 512 MiB (read + write); 2 tensors, 512 MiB in
    all. On a CPU the tensor must outgrow the last-level cache the process actually gets,
    or the ops time the cache: at 64 MiB they ran at 130-313% of the DRAM bandwidth on a
    VM whose sysfs reports a 300 MiB L3 (its guests share it); at 256 MiB they run at
    the rate of tensors of 1 GiB and more, from DRAM.
    The chain writes into a preallocated buffer: on a CPU a fresh tensor per op would be
    page-faulted in by the OS, and the time would go to that, not to bandwidth.
    (cos/sin would not do on a CPU either: their ~20 instructions per element make them
    compute-bound there, while on a GPU they cost what a multiply costs.)"""
    import torch

    n = batch_size * 2**26
    x = torch.randn(n, device=device, generator=_gen(device))
    out = torch.empty_like(x)

    def chain(x: Any, out: Any) -> Any:
        torch.mul(x, 1.5, out=out)
        return out.add_(0.5).mul_(0.9).add_(0.1)

    return chain, (x, out)


def _block(d: int, heads: int, ffn: int) -> Any:
    """A pre-norm transformer block written out (nn.TransformerEncoderLayer's inference
    fast path would run it as one fused op with no FLOP count)."""
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.fc1, self.fc2 = nn.Linear(d, ffn), nn.Linear(ffn, d)

        def forward(self, x: Any) -> Any:
            b, t, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, heads, d // heads).unbind(2)
            att = torch.nn.functional.scaled_dot_product_attention(
                q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
            x = x + self.proj(att.transpose(1, 2).reshape(b, t, d))
            return x + self.fc2(torch.nn.functional.gelu(self.fc1(self.ln2(x))))

    return Block()


def transformer(batch_size: int = 8, device: str = "cpu") -> tuple[Callable[..., Any], tuple]:
    """One pre-norm transformer block (d=256, 4 heads, FFN 1024, seq 128), inference:
    a mix of matmuls, attention, layer norms and pointwise ops."""
    import torch

    torch_state = torch.random.get_rng_state()
    torch.manual_seed(0)
    block = _block(256, 4, 1024).to(device).eval()
    torch.random.set_rng_state(torch_state)
    x = torch.randn(batch_size, 128, 256, device=device, generator=_gen(device))

    def forward(x: Any) -> Any:
        with torch.no_grad():
            return block(x)

    return forward, (x,)


def attention(batch_size: int = 8, device: str = "cpu") -> tuple[Callable[..., Any], tuple]:
    """Attention written out, inference: softmax(q k^T * d^-0.5) v over [batch, heads,
    seq, 64]: bf16 with 12 heads x 4096 tokens on CUDA (the issue's case: GPT-2 small's
    heads at a long context), fp32 with 4 heads x 512 tokens on CPU. The [seq, seq] score
    matrix is written by the first matmul and read and written again by the scale and the
    softmax: memory-bound by the roofline. On an H200 the softmax (fp32 max, exp, sum per
    bf16 element) ran at 27% of DRAM bandwidth with its SMs 77% busy: bound by instruction
    throughput (hardware.py's element-wise calibration, budget.classify). The remedy is
    F.scaled_dot_product_attention (flash: the scores never reach memory)."""
    import torch

    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    heads, seq, dim = (12, 4096, 64) if device == "cuda" else (4, 512, 64)
    q, k, v = (torch.randn(batch_size, heads, seq, dim, device=device, dtype=dtype,
                           generator=_gen(device)) for _ in range(3))
    scale = dim ** -0.5

    def forward(q: Any, k: Any, v: Any) -> Any:
        with torch.no_grad():
            att = torch.softmax((q @ k.transpose(-2, -1)) * scale, dim=-1)
            return att @ v

    return forward, (q, k, v)


def mlp_train(batch_size: int = 32, device: str = "cpu") -> tuple[Callable[..., Any], tuple]:
    """One training step of the 4-layer MLP: forward, MSE loss, backward, Adam step.
    Adam (foreach on CUDA) launches many small kernels per step."""
    import torch

    model = seeded_mlp(512, 4, device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.randn(batch_size, 512, device=device, generator=_gen(device))
    y = torch.randn(batch_size, 512, device=device, generator=_gen(device))

    return mse_step(model, opt), (x, y)


def mse_step(model: Any, opt: Any, before: Callable[[], Any] | None = None
             ) -> Callable[..., Any]:
    """The examples' training step: zero the gradients, MSE loss, backward, optimizer
    step; `before()` runs first (a straggler's extra work)."""
    import torch

    def step(x: Any, y: Any) -> Any:
        if before is not None:
            before()
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        return loss.detach()

    return step


EXAMPLES: dict[str, Example] = {
    e.name: e
    for e in (
        Example("mlp", "4-layer MLP (512 wide) inference at batch 1", "overhead", mlp, 1, 1),
        Example("matmul", "one large matmul (fp32 CPU, bf16 CUDA)", "compute",
                matmul, 1024, 8192),
        Example("pointwise", "4 unfused multiply/add ops over a large tensor", "memory",
                pointwise, 1, 4),
        Example("transformer", "transformer encoder block (d=256, seq 128)", "mixed",
                transformer, 8, 8),
        Example("mlp_train", "4-layer MLP training step with Adam", "overhead",
                mlp_train, 32, 32),
        Example("attention", "hand-written softmax(q k^T) v (bf16 12 x 4096 x 64 CUDA)",
                "compute", attention, 2, 8),
    )
}


def get(name: str) -> Example:
    """A built-in single-process example (targets.example also knows the distributed
    ones)."""
    if name not in EXAMPLES:
        raise UserError(f"unknown example {name!r}; choose from {', '.join(EXAMPLES)}")
    return EXAMPLES[name]
