"""Issue 24's training row: is gobrrr's way of compiling the step slower than the hand's?

Both searches end on the same stack (bf16 autocast + fused AdamW + reduce-overhead) for
the GPT-2 training step at 8 x 256, yet gobrrr measured 3.91x, 4.30x and 4.44x
(sessions ai, aj, ag; H100) where the hand search measured 4.64x and 4.55x. The two
compile different things:
- `module`: the hand's way (optimize_models.py): `torch.compile(model, mode=...)`, the
  step's backward and optimizer step left eager, autocast around the whole call;
- `step`: gobrrr's (remedies/compiled.py): the whole step compiled, autocast inside
  it, the GPT2Blocks marked as nested compile regions (remedies/nested.py).
Each variant runs in its own process (dynamo's caches of one would guard the other's
frames), timed against that process's eager step with gobrrr's interleaved A/B timer,
as both searches time theirs; the variants alternate, twice each, so that a process's
luck shows as spread and a systematic gap as a difference of both pairs.

    python3 benchmarks/train_compile_variants.py [ROUNDS]      # on CUDA; JSON lines out
    python3 benchmarks/train_compile_variants.py one VARIANT[_contended] [SOAK_S]
_contended: another process runs eager steps on the GPU while the variant compiles and
makes its first calls (Triton's autotuning among them), as beside the search's parent.
SOAK_S: seconds of eager steps first (the GPU warm and the process old, as a search's
candidate is measured after its earlier ones).
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from typing import Any

CASE = ("hf:gpt2", 8, 256)
VARIANTS = ("module", "step")


def _load() -> None:
    """Eager training steps in a loop until killed: another process on the GPU, as the
    search's parent measuring its candidates while the child compiles."""
    from gobrrr.models import ModelOptions
    from gobrrr.targets import load_target

    target, batch, seq = CASE
    w = load_target(target, "cuda", batch, ModelOptions(seq_len=seq, train=True))
    w()
    print("ready", flush=True)
    while True:
        w()


def _one(variant: str, soak_s: float = 0.0) -> dict[str, Any]:
    contended = variant.endswith("_contended")
    variant = variant.removesuffix("_contended")
    import torch

    from gobrrr.models import ModelOptions
    from gobrrr.remedies import nested
    from gobrrr.remedies.verify import ab_time
    from gobrrr.targets import load_target

    target, batch, seq = CASE
    base = load_target(target, "cuda", batch, ModelOptions(seq_len=seq, train=True))
    w = load_target(target, "cuda", batch, ModelOptions(seq_len=seq, train=True))
    cells = {type(c.cell_contents): c for c in w.fn.__closure__ or ()
             if isinstance(c.cell_contents, (torch.nn.Module, torch.optim.Optimizer))}
    model_cell = next(c for k, c in cells.items() if issubclass(k, torch.nn.Module))
    opt = next(c for k, c in cells.items() if issubclass(k, torch.optim.Optimizer))
    for group in opt.cell_contents.param_groups:
        group["fused"], group["foreach"] = True, False
    model = model_cell.cell_contents
    marked: tuple[str, ...] = ()
    if variant == "module":
        model_cell.cell_contents = torch.compile(model, mode="reduce-overhead")

        def call() -> Any:
            with torch.autocast("cuda", dtype=torch.bfloat16):
                return w()
    else:
        marked = nested.nest_blocks([model])

        def autocast_step() -> Any:
            with torch.autocast("cuda", dtype=torch.bfloat16):
                return w.fn(*w.args, **w.kwargs)

        call = torch.compile(autocast_step, mode="reduce-overhead")
    base()
    t_soak = time.perf_counter()
    while time.perf_counter() - t_soak < soak_s:  # the GPU and the host busy first, as
        base()                                    # after a search's earlier candidates
    torch.cuda.synchronize()
    load = None
    if contended:  # the compile and its first calls beside another process's steps
        load = subprocess.Popen([sys.executable, __file__, "load"], stdout=subprocess.PIPE,
                                text=True)
        assert load.stdout is not None and load.stdout.readline().strip() == "ready"
    t0 = time.perf_counter()
    for _ in range(3):  # compile on the first call, capture after (as both searches)
        call()
    torch.cuda.synchronize()
    prep_s = time.perf_counter() - t0
    if load is not None:
        load.kill()
        load.wait()
    ab = ab_time(base, call, device="cuda", budget_s=3.0)
    return {"variant": variant, "nested": list(marked), "prep_s": round(prep_s, 2),
            "speedup": ab.speedup, "interval": list(ab.interval),
            "eager_ms": ab.eager_s * 1e3, "candidate_ms": ab.candidate_s * 1e3,
            "rounds": ab.rounds, "soak_s": soak_s, "contended": contended,
            "torch": torch.__version__, "gpu": torch.cuda.get_device_name(0)}


def main(argv: list[str]) -> int:
    if argv == ["load"]:
        _load()
    if len(argv) in (2, 3) and argv[0] == "one":
        print(json.dumps(_one(argv[1], float(argv[2]) if len(argv) == 3 else 0.0)),
              flush=True)
        return 0
    rounds = int(argv[0]) if argv else 2
    for r in range(rounds):
        for v in (VARIANTS if r % 2 == 0 else VARIANTS[::-1]):
            t0 = time.perf_counter()
            p = subprocess.run([sys.executable, __file__, "one", v], capture_output=True,
                               text=True)
            line = p.stdout.strip().splitlines()[-1] if p.stdout.strip() else ""
            with contextlib.suppress(ValueError):
                row = json.loads(line)
                row["round"], row["seconds"] = r, round(time.perf_counter() - t0, 1)
                print(json.dumps(row), flush=True)
                continue
            print(json.dumps({"variant": v, "round": r, "rc": p.returncode,
                              "error": p.stderr.strip().splitlines()[-3:]}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
