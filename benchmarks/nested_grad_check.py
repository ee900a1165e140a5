"""Are a training step's gradients right when its repeated blocks are nested compile
regions? (issue 24, session t; CPU or GPU, one process per line, cold caches best).

    python benchmarks/nested_grad_check.py {toy|gpt2} [--nested] [--device cuda]

On this project's CPU (torch 2.13.0+cpu) the toy (four blocks of LayerNorm -> Linear ->
ReLU with a residual, compiled forward + backward with Inductor) gave the first block's
LayerNorm gradients 0.058 and 0.044 off eager's, where the same compile without the
region matched to 1e-7; LayerNorm alone or Linear alone in the block matched, and so did
`aot_eager`. Session s's H200 probe compared only the first loss, which comes before any
gradient. This measures each parameter's gradient after one forward and backward,
compiled (Inductor, default mode), against eager on an identical copy: per tensor, the
largest |difference| / (largest |eager gradient| of that tensor). Prints one JSON line.
gpt2: GPT2LMHeadModel from its default config but without dropout (random weights),
batch 4 x 128, fp32.
"""

from __future__ import annotations

import argparse
import copy
import json
import time


def _toy(device: str):  # noqa: ANN202 - model and inputs
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.ln = nn.Linear(32, 32), nn.LayerNorm(32)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + torch.relu(self.a(self.ln(x)))

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.blocks = nn.ModuleList(Block() for _ in range(4))
            self.head = nn.Linear(32, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            for b in self.blocks:
                x = b(x)
            return self.head(x)

    torch.manual_seed(0)
    model = Model().to(device)
    x = torch.randn(8, 32, device=device)
    return model, (lambda m: m(x).square().mean()), Block


def _gpt2(device: str):  # noqa: ANN202
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel
    from transformers.models.gpt2.modeling_gpt2 import GPT2Block

    torch.manual_seed(0)
    # no dropout: eager and compiled draw different random masks
    model = GPT2LMHeadModel(GPT2Config(resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
                            ).to(device)
    model.config.use_cache = False
    ids = torch.randint(0, 50257, (4, 128), device=device)
    return model, (lambda m: m(input_ids=ids, labels=ids).loss), GPT2Block


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("what", choices=("toy", "gpt2"))
    p.add_argument("--nested", action="store_true")
    p.add_argument("--device", default="cpu")
    a = p.parse_args()
    import torch

    model, loss_of, block_cls = (_toy if a.what == "toy" else _gpt2)(a.device)
    ref = copy.deepcopy(model)
    loss_of(ref).backward()
    if a.nested:
        # a subclass on this copy's blocks, as gobrrr marks them (remedies/nested.py)
        from gobrrr.remedies.nested import nest_blocks
        marked = nest_blocks([model])
    else:
        marked = ()

    def fb(m: torch.nn.Module) -> torch.Tensor:
        loss = loss_of(m)
        loss.backward()
        return loss.detach()

    t0 = time.perf_counter()
    loss = float(torch.compile(fb)(model))
    compile_s = time.perf_counter() - t0
    worst: list[tuple[float, str]] = []
    missing = []
    for (name, p_c), p_r in zip(model.named_parameters(), ref.parameters(), strict=True):
        if p_c.grad is None or p_r.grad is None:
            if (p_c.grad is None) != (p_r.grad is None):
                missing.append(name)
            continue
        scale = float(p_r.grad.abs().max()) or 1.0
        worst.append((float((p_c.grad - p_r.grad).abs().max()) / scale, name))
    worst.sort(reverse=True)
    print(json.dumps({"what": a.what, "nested": a.nested, "marked": list(marked),
                      "device": a.device, "torch": torch.__version__,
                      "compile_s": round(compile_s, 1), "loss": loss,
                      "eager_loss": float(loss_of(ref)),
                      "worst_rel_grad_err": [[round(e, 6), n] for e, n in worst[:5]],
                      "tensors_over_1pct": sum(1 for e, _ in worst if e > 0.01),
                      "tensors": len(worst), "grad_missing_in_one": missing}), flush=True)


if __name__ == "__main__":
    main()
