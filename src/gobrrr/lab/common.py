"""What every lab experiment shares: the run context, the result base, the essay's
reference numbers with their source, and a few pure helpers.

Every timing goes through `gobrrr.timing.measure` (never under the profiler), every
ceiling through `gobrrr.hardware.calibrate`, every FLOP/byte through `gobrrr.counting`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from gobrrr.timing import measure

if TYPE_CHECKING:
    import torch

    from gobrrr.hardware import Ceilings
    from gobrrr.timing import Timing

__all__ = [
    "ESSAY_SOURCE",
    "EssayRef",
    "LabContext",
    "LabResult",
    "geometric",
]

# Where the essay numbers shown beside ours come from.
ESSAY_SOURCE = (
    "Horace He, 'Making Deep Learning Go Brrrr From First Principles' (2022), "
    "https://horace.io/brrr_intro.html; numbers on an A100"
)

Progress = Callable[[str], None]


@dataclass(frozen=True)
class EssayRef:
    """One number from the essay, shown next to the measurement of the same thing."""

    what: str
    essay: str  # the essay's value, as the essay states it (A100 unless said)
    source: str = "essay"


@dataclass(kw_only=True)
class LabResult:
    """Fields every experiment result has; experiments add their own numbers."""

    name: str
    title: str
    device: str
    conclusion: str  # one line, built from the numbers below, never canned
    agrees_with_essay: bool | None  # None: the essay makes no claim for this device/size
    essay: list[EssayRef] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    elapsed_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["essay_source"] = ESSAY_SOURCE
        return d

    def table(self) -> tuple[list[str], list[list[str]]]:
        """(column names, rows of formatted cells) of the measurements."""
        raise NotImplementedError


@dataclass
class LabContext:
    """One lab run: device, size regime, this machine's ceilings, progress sink."""

    device: str  # "cpu" | "cuda"
    quick: bool
    ceilings: Ceilings
    progress: Progress = lambda _msg: None  # noqa: E731

    @property
    def is_cuda(self) -> bool:
        return self.device == "cuda"

    @property
    def budget_s(self) -> float:
        # Per timed point. A GPU kernel of ~0.5 ms gets hundreds of samples in 0.15 s;
        # CPU points are ms to tens of ms and noisier, so they get more time.
        if self.is_cuda:
            return 0.1 if self.quick else 0.15
        return 0.15 if self.quick else 0.4

    def pointwise_elements(self) -> int:
        """Tensor size for the pointwise experiments (repeat, fusion, activations)."""
        if self.is_cuda:
            # 2^28 fp32 = 1 GiB: far beyond the 50-60 MB L2, so DRAM is what is timed.
            return 2**26 if self.quick else 2**28
        # 2^22 fp32 = 16 MiB: below glibc's 32 MiB mmap threshold. Larger CPU outputs are
        # mmapped and page-faulted on every call, which then costs more than the math.
        return 2**22

    def randn(self, *shape: int, dtype: torch.dtype | None = None, seed: int = 0) -> torch.Tensor:
        """Random data from our own generator: never zeros (matmuls and some pointwise
        kernels run faster on predictable data), and the user's RNG state is untouched."""
        import torch

        gen = torch.Generator(device=self.device).manual_seed(seed)
        x = torch.randn(*shape, device=self.device, generator=gen)
        return x if dtype is None else x.to(dtype)

    def time(self, fn: Callable[[], Any], **kwargs: Any) -> Timing:

        kwargs.setdefault("budget_s", self.budget_s)
        return measure(fn, device=self.device, **kwargs)

    def free(self) -> None:
        """Give cached GPU memory back between experiments (1 GiB tensors add up)."""
        if self.is_cuda:
            import torch

            torch.cuda.empty_cache()


def geometric(lo: int, hi: int, factor: int = 2) -> list[int]:
    """lo, lo*factor, ... up to hi inclusive."""
    out = []
    v = lo
    while v <= hi:
        out.append(v)
        v *= factor
    return out
