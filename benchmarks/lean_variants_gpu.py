"""Where the lean decode step's time goes (issue 21: 40% of the bandwidth bound at batch
1): TinyLlama-1.1B (and --models) in bf16, batch 1, the lean loop (generation_lean.py;
since session c its compile has coordinate-descent tuning and its prefill is captured)
in variants: `graph` (eager kernels in a CUDA graph), `compile` (Inductor), `compile+math`
(the math SDPA backend, which Inductor fuses, instead of one cuDNN kernel per layer).
`VARIANT@SETTING` adds Inductor settings (SETTINGS), split-K batch-1 linears
(`@splitS`, `@splitSdown`) or realized batch-1 linear inputs (`@realize`,
`@realizedown`, `@copydown`; since session o the loop realizes them itself on CUDA).
Per variant: tokens/s (median of 3 generations of --new tokens), the
decode step (T(N) - T(1)) / (N - 1) against the bound's step, and one profiled generation
of 16 tokens: CUDA kernels per decode step and their summed time per step.

  python benchmarks/lean_variants_gpu.py --out F.json [--models tinyllama-1.1b]
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time

import torch

from gobrrr import generation_lean
from gobrrr.generation import decode_bytes
from gobrrr.generation_lean import LeanDecoder
from gobrrr.hardware import calibrate

# `VARIANT@SETTING`: the compiled step under other Inductor settings than the loop's own
SETTINGS = {
    "nocdt": {"coordinate_descent_tuning": False},  # cuBLAS GEMVs instead of reductions
    "alldir": {"coordinate_descent_tuning": True,
               "coordinate_descent_check_all_directions": True},
    "combo": {"coordinate_descent_tuning": True, "combo_kernels": True},
    # looped reductions that coordinate descent may size (a 2048-wide GEMV row is one
    # persistent block by default)
    # Inductor freezing: the weights become constants, and its freezing patterns
    # concatenate the weights of matmuls that share an input (gate/up: one GEMV)
    "freeze": {"coordinate_descent_tuning": True, "freezing": True},
    # coordinate descent looks two steps away from each start (default one)
    "radius2": {"coordinate_descent_tuning": True, "coordinate_descent_search_radius": 2},
    "nopersist": {"coordinate_descent_tuning": True, "triton.persistent_reductions": False},
}

# `VARIANT@splitS[down]`: the batch-1 linears (the down projections only, or all but
# the LM head) written split-K by hand: the K inputs in S slices, a float32 reduction
# per (output, slice), then a sum over the slices (gemv_forms_gpu.py measures the forms)
_LINEAR_FORWARD = torch.nn.Linear.forward


def split_linears(s: int, down_only: bool) -> None:
    def forward(self, x):  # type: ignore[no-untyped-def]
        n, k = self.weight.shape
        one_row = x.numel() == k
        wanted = (k > n) if down_only else (n < 32000)
        if not (one_row and wanted and k % s == 0 and self.bias is None):
            return _LINEAR_FORWARD(self, x)
        part = (x.float().view(1, 1, s, k // s)
                * self.weight.float().view(1, n, s, k // s)).sum(-1)
        return part.sum(-1).to(x.dtype).view(*x.shape[:-1], n)

    torch.nn.Linear.forward = forward if s > 1 else _LINEAR_FORWARD


# `VARIANT@realize[down]`: the batch-1 linears' input (the down projections' only, or
# every one but the LM head's) made a buffer of its own before the GEMV, through an
# identity op whose Inductor lowering realizes its input: Inductor otherwise inlines the
# producer (SiLU(gate) x up) into each of the GEMV's output rows, recomputed 2048 times
# (seen in session o's output code). `@copydown`: the same op without the lowering (an
# extern copy kernel instead).
@torch.library.custom_op("gobrrrbench::materialize", mutates_args=())
def materialize(x: torch.Tensor) -> torch.Tensor:
    return x.clone()


@materialize.register_fake
def _(x):  # type: ignore[no-untyped-def]
    return torch.empty_like(x)


@torch.library.custom_op("gobrrrbench::copy", mutates_args=())
def copy_op(x: torch.Tensor) -> torch.Tensor:
    return x.clone()


@copy_op.register_fake
def _(x):  # type: ignore[no-untyped-def]
    return torch.empty_like(x)


def _lower_materialize(x):  # type: ignore[no-untyped-def]
    x.realize()
    return x


def realize_linears(how: str | None) -> None:
    from torch._inductor.lowering import lowerings, register_lowering

    if torch.ops.gobrrrbench.materialize.default not in lowerings:
        register_lowering(torch.ops.gobrrrbench.materialize.default,
                          type_promotion_kind=None)(_lower_materialize)
    op = copy_op if how == "copydown" else materialize

    def forward(self, x):  # type: ignore[no-untyped-def]
        n, k = self.weight.shape
        wanted = (k > n) if how in ("realizedown", "copydown") else (n < 32000)
        if x.numel() == k and wanted:
            x = op(x)
        return _LINEAR_FORWARD(self, x)

    torch.nn.Linear.forward = forward if how else _LINEAR_FORWARD


sys.path.insert(0, "benchmarks")
from generate_table import build  # noqa: E402


def med(run, n=3):
    out = []
    for _ in range(n):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        run()
        torch.cuda.synchronize()
        out.append(time.perf_counter() - t0)
    return statistics.median(out)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--models", default="tinyllama-1.1b")
    p.add_argument("--variants", default="graph,compile,compile+math")
    p.add_argument("--new", type=int, default=64)
    p.add_argument("--prompt", type=int, default=128)
    a = p.parse_args()
    bw = calibrate("cuda").bandwidth_bytes_per_s
    rows = []
    for name in a.models.split(","):
        model = build(name, "cuda", torch.bfloat16)
        ids = torch.randint(1, model.config.vocab_size, (1, a.prompt), device="cuda")
        db = decode_bytes(model)
        bound_step = db.mean_step_bytes(1, a.prompt, a.new) / bw
        for variant in a.variants.split(","):
            base, _, setting = variant.partition("@")
            mode, _, attention = base.partition("+")
            generation_lean.INDUCTOR_CONFIG = {"coordinate_descent_tuning": True,
                                               **SETTINGS.get(setting, {})}
            split = re.fullmatch(r"split(\d+)(down)?", setting)
            split_linears(int(split.group(1)) if split else 1, bool(split and split.group(2)))
            if setting in ("realizedown", "realize", "copydown"):
                realize_linears(setting)
            torch._dynamo.reset()
            r = {"workload": name, "variant": variant, "bound_step_s": bound_step}
            try:
                t0 = time.perf_counter()
                dec = LeanDecoder(model, batch=1, max_len=a.prompt + a.new, mode=mode,
                                  attention=attention or None)
                dec.generate(ids, a.new)
                torch.cuda.synchronize()
                r["prep_s"] = time.perf_counter() - t0
                t_all = med(lambda d=dec, i=ids: d.generate(i, a.new))
                t_one = med(lambda d=dec, i=ids: d.generate(i, 1))
                r["tokens_per_s"] = a.new / t_all
                r["prefill_s"] = t_one
                r["step_s"] = (t_all - t_one) / (a.new - 1)
                r["step_of_bound"] = bound_step / r["step_s"]
                r["tokens_of_bound"] = r["tokens_per_s"] * bound_step
                r["prefill_note"] = dec.prefill_note
                from torch.profiler import ProfilerActivity, profile

                with profile(activities=[ProfilerActivity.CUDA]) as prof:
                    dec.generate(ids, 16)
                    torch.cuda.synchronize()
                ev = [e for e in prof.events() if e.device_type.name == "CUDA"]
                # the prefill is eager: its kernels are the ones before the first replay;
                # count per step over the whole run less one prefill's (measured alone)
                with profile(activities=[ProfilerActivity.CUDA]) as prof1:
                    dec.generate(ids, 1)
                    torch.cuda.synchronize()
                ev1 = [e for e in prof1.events() if e.device_type.name == "CUDA"]
                r["kernels_per_step"] = (len(ev) - len(ev1)) / 15
                r["kernel_s_per_step"] = (sum(e.device_time for e in ev)
                                          - sum(e.device_time for e in ev1)) / 15 / 1e6
                top: dict[str, float] = {}
                calls: dict[str, int] = {}
                for e in ev:
                    top[e.name[:80]] = top.get(e.name[:80], 0.0) + e.device_time
                    calls[e.name[:80]] = calls.get(e.name[:80], 0) + 1
                r["top_kernels_us"] = dict(sorted(top.items(), key=lambda kv: -kv[1])[:12])
                # launches of each in the profiled run (one prefill, 15 steps): which
                # kernel is once a step (the LM head), which once a layer
                r["top_kernels_calls"] = {k: calls[k] for k in r["top_kernels_us"]}
            except Exception as exc:
                r["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
            print({k: (round(v, 6) if isinstance(v, float) else v) for k, v in r.items()
                   if k != "top_kernels_us"}, flush=True)
            rows.append(r)
            dec = None
            json.dump(rows, open(a.out, "w"), indent=1)
        model = None
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
