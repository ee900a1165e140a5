"""The fused and foreach optimizer snippets are written for the user's own optimizer
(issue 22, item 7: a winning snippet once turned an AdamW with two parameter groups and
weight decay into `torch.optim.Adam(model.parameters(), fused=True)`)."""

import torch
from torch import nn

from gobrrr.remedies.base import Context
from gobrrr.remedies.catalog import by_name
from gobrrr.remedies.optim import optimizer_snippet


def _groups():
    m = nn.Sequential(nn.Linear(4, 4), nn.LayerNorm(4))
    decay = [p for p in m.parameters() if p.ndim == 2]
    rest = [p for p in m.parameters() if p.ndim < 2]
    return decay, rest


def test_two_groups_with_their_own_arguments_and_the_constructors():
    decay, rest = _groups()
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": rest, "weight_decay": 0.0, "lr": 1e-3}],
                            lr=3e-4, betas=(0.9, 0.95))
    # the scheduler rewrites each group's lr: the snippet keeps the one it started from
    torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 0.5)
    assert optimizer_snippet(opt, "fused") == (
        "# your optimizer as built (2 parameter groups), with fused=True\n"
        "opt = torch.optim.AdamW([\n"
        '    {"params": ..., "weight_decay": 0.1},  # group 0: 1 tensor\n'
        '    {"params": ..., "weight_decay": 0.0, "lr": 0.001},  # group 1: 3 tensors\n'
        "], lr=0.0003, betas=(0.9, 0.95), fused=True)")


def test_the_snippet_builds_the_same_optimizer_with_the_flag():
    decay, rest = _groups()
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": rest, "weight_decay": 0.0}], lr=3e-4, eps=1e-6)
    code = optimizer_snippet(opt, "foreach").replace("...", "decay", 1).replace("...", "rest")
    ns = {"torch": torch, "decay": decay, "rest": rest}
    exec(code, ns)
    new = ns["opt"]
    assert type(new) is torch.optim.AdamW
    for old_g, new_g in zip(opt.param_groups, new.param_groups, strict=True):
        assert {k: v for k, v in new_g.items() if k not in ("params", "foreach")} == \
            {k: v for k, v in old_g.items() if k not in ("params", "foreach")}
        assert new_g["foreach"] is True


def test_one_group_gives_the_arguments_that_differ_from_the_class_defaults():
    params = list(nn.Linear(4, 4).parameters())
    opt = torch.optim.SGD(params, lr=0.1, momentum=0.9)
    assert optimizer_snippet(opt, "foreach") == (
        "# your optimizer as built (2 tensors), with foreach=True\n"
        "opt = torch.optim.SGD(..., lr=0.1, momentum=0.9, foreach=True)")


def test_the_spec_writes_it_from_the_context_and_falls_back_to_the_generic_one():
    spec = by_name()["fused_optimizer"]
    opt = torch.optim.Adam(nn.Linear(4, 4).parameters(), lr=1e-3, weight_decay=0.01)
    assert spec.snippet_in(Context("cpu", optimizers=[opt])) == (
        "# your optimizer as built (2 tensors), with fused=True\n"
        "opt = torch.optim.Adam(..., weight_decay=0.01, fused=True)")
    assert spec.snippet_in(Context("cpu")) == spec.snippet


def test_bf16_is_not_offered_on_a_cpu_whose_bf16_matmul_is_no_faster():
    # issue 24: a bf16 cast offered on a CPU whose bf16 matmul ran at 0.4 GFLOP/s
    # measured 0.66x; the measured peaks decide (calibration), not the format
    from types import SimpleNamespace

    from gobrrr.counting import OpRecord

    mm = OpRecord(index=0, op="aten::mm", module="Global", phase="forward",
                  op_class="matmul", dtype="fp32", flops=10, bytes=10,
                  tensor_core_unit="fp32", has_formula=True)
    specs = by_name()

    def applies(name, peaks, device="cpu"):
        ctx = Context(device, records=[mm], ceilings=SimpleNamespace(peak_flops_per_s=peaks),
                      module_types={"Linear"}, independent_copy=True)
        return specs[name].applies(ctx)

    slow = {"fp32": 2e11, "bf16": 4e8}
    for name in ("bf16_autocast", "bf16_cast"):
        assert applies(name, slow) == ("this CPU's measured bf16 matmul rate (400 MFLOP/s) "
                                       "is no faster than fp32's (200 GFLOP/s)")
        assert applies(name, {"fp32": 2e11, "bf16": 4e11}) is None
        assert applies(name, slow, device="cuda") is None  # a GPU's bf16: tensor cores


def test_a_stack_whose_parts_name_the_module_and_the_call_says_what_the_names_are():
    """A cast's snippet names `model` and `x`, a compile's `step`: joined, the snippet
    says once what each is; a snippet with one kind of name says nothing more."""
    from gobrrr.remedies.base import RemedyResult
    from gobrrr.remedies.result import NAMES, snippet_for

    def best(snippet: str) -> RemedyResult:
        return RemedyResult("a+b", "memory", "verified", "", measured_speedup=2.0,
                            tolerance="t", snippet=snippet)

    stacked = snippet_for(best("model = model.to(torch.bfloat16)\nstep = torch.compile(step)"))
    assert stacked.splitlines()[1] == NAMES
    assert NAMES not in snippet_for(best("model = model.to(torch.bfloat16)"))
    assert NAMES not in snippet_for(best("step = torch.compile(step)\nopt = torch.optim.AdamW("
                                         "params, fused=True)"))
