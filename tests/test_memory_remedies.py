"""gobrrr memory --remedies (memory_remedies.py, remedies/checkpoint.py): remedies that
trade time for memory, on copies, verified and measured. Small models only: each test
runs in seconds on one CPU core."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

from gobrrr.memory_remedies import memory_remedies, select  # noqa: E402
from gobrrr.remedies.checkpoint import (  # noqa: E402
    CHECKPOINTED,
    blocks_reason,
    find_blocks,
    pointwise_policy,
)
from gobrrr.workload import Workload  # noqa: E402

B, T, C, LAYERS, VOCAB = 4, 64, 32, 2, 64


def _tiny_gpt2(warm: bool = True) -> tuple[object, object, object, object]:
    """A 2-layer GPT-2 (transformers' own GPT2LMHeadModel, dropout on) and its training
    step with AdamW: (step, ids, model, optimizer)."""
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=LAYERS, n_embd=C, n_head=2, n_positions=T,
                                  vocab_size=VOCAB)
    model = transformers.GPT2LMHeadModel(cfg).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = torch.randint(0, VOCAB, (B, T), generator=torch.Generator().manual_seed(1))

    def step(x: object) -> object:
        opt.zero_grad(set_to_none=True)
        loss = model(input_ids=x, labels=x).loss
        loss.backward()
        opt.step()
        return loss.detach()

    if warm:
        step(ids)  # the optimizer's state exists, as in a loop
    return step, ids, model, opt


def test_find_blocks_gpt2_exactly_its_two_blocks() -> None:
    _, _, model, _ = _tiny_gpt2(warm=False)  # read only: no step needed
    groups = find_blocks([model])
    assert [(g.container, g.block_type, g.names) for g, _ in groups] == [
        ("transformer.h", "GPT2Block", ("transformer.h.0", "transformer.h.1"))]
    assert groups[0][1] == list(model.transformer.h)


class _Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.down = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4))  # inside a block

    def forward(self, x: object) -> object:
        return self.lin(x) + self.down(x)


def test_find_blocks_stages_not_leaves_not_insides() -> None:
    # ResNet's shape: stages (Sequential) of blocks that hold a Sequential of their own;
    # the blocks' `down` is inside a block, and a Sequential of Linear/ReLU holds leaves
    model = nn.Sequential(nn.Sequential(_Block(), _Block(), _Block()),
                          nn.Sequential(_Block(), _Block()),
                          nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 4)))
    groups = [(g.container, g.block_type, len(g.names)) for g, _ in find_blocks([model])]
    assert groups == [("0", "_Block", 3), ("1", "_Block", 2)]
    assert blocks_reason([model], trains=False) is not None  # no backward: nothing saved


def test_selective_policy_saves_matmuls_recomputes_pointwise() -> None:
    from torch.utils.checkpoint import CheckpointPolicy as P

    policy = pointwise_policy()
    aten = torch.ops.aten
    got = {op: policy(None, op) for op in (
        aten.mm.default, aten.addmm.default, aten.bmm.default, aten.mul.Tensor,
        aten.tanh.default, aten.native_layer_norm.default, aten.view.default,
        aten.bernoulli_.float, aten.empty_like.default, aten.div_.Scalar)}
    assert got == {aten.mm.default: P.MUST_SAVE, aten.addmm.default: P.MUST_SAVE,
                   aten.bmm.default: P.MUST_SAVE, aten.mul.Tensor: P.PREFER_RECOMPUTE,
                   aten.tanh.default: P.PREFER_RECOMPUTE,
                   aten.native_layer_norm.default: P.PREFER_SAVE,
                   aten.view.default: P.PREFER_RECOMPUTE,
                   aten.bernoulli_.float: P.PREFER_RECOMPUTE,
                   aten.empty_like.default: P.PREFER_RECOMPUTE,
                   aten.div_.Scalar: P.PREFER_RECOMPUTE}


def test_checkpointing_gpt2_on_a_copy_verified_saves_activations() -> None:
    step, ids, model, opt = _tiny_gpt2()
    params = [p.detach().clone() for p in model.parameters()]
    state = [v.clone() for s in opt.state.values() for v in s.values()]
    got = memory_remedies(Workload("tiny-gpt2", step, (ids,), {}, "cpu", B),
                          only=["checkpoint_blocks,checkpoint_blocks_selective"],
                          ab_budget_s=0.05)
    full, sel = got.results
    assert (full.name, sel.name) == ("checkpoint_blocks", "checkpoint_blocks_selective")
    for r in (full, sel):
        assert r.status == "verified", r.reason
        assert r.applied and r.verified
        assert set(r.verification) == {"outputs", "updates", "grads"}
        # recompute is the same ops on the same data, dropout's masks included (the RNG
        # state is preserved): the step is reproduced exactly here on CPU
        assert all(c["max_error"] == 0.0 for c in r.verification.values()), r.verification
        assert r.peak_source == "MemTracker"
        assert r.step_s_before and r.step_s_after and r.time_cost and r.ab_rounds
        assert r.time_cost == pytest.approx(r.step_s_after / r.step_s_before)
    assert full.notes == ["2 blocks checkpointed (full): transformer.h: 2 x GPT2Block"]
    # The plain step keeps, per block, at least the MLP's two 4C-wide tensors (c_fc's
    # output for GELU's backward, GELU's output for c_proj's): 2 x 4 x B*T*C x 4 bytes
    # = 32 B*T*C = 262,144 B. Checkpointed, during the backward at most one block's
    # activations are alive again (its recompute), so at least the other LAYERS - 1
    # blocks' are saved at the peak.
    assert full.bytes_saved >= 32 * B * T * C * (LAYERS - 1)
    assert (full.by_category_after["activations"]
            < full.by_category_before["activations"] - 32 * B * T * C * (LAYERS - 1))
    # selective keeps matmul, attention and norm outputs: saves less, but saves
    assert 0 < sel.bytes_saved < full.bytes_saved
    # the user's model and optimizer: untouched, never wrapped, never stepped
    for block in model.transformer.h:
        assert "forward" not in vars(block)
        assert not hasattr(block.forward, CHECKPOINTED)
    assert all(torch.equal(a, b) for a, b in zip(params, model.parameters(), strict=True))
    assert all(torch.equal(a, b) for a, b in zip(
        state, [v for s in opt.state.values() for v in s.values()], strict=True))


def test_no_repeated_blocks_is_not_applicable_with_its_reason() -> None:
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(4, 8)

    def step(x: object) -> object:
        opt.zero_grad()
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        return loss.detach()

    got = memory_remedies(Workload("mlp", step, (x,), {}, "cpu", 4),
                          only=["checkpoint_blocks", "checkpoint_blocks_selective",
                                "bf16_weights", "expandable_segments"])
    why = {r.name: (r.status, r.reason) for r in got.results}
    assert why["checkpoint_blocks"] == ("not applicable", (
        "no repeated blocks: no nn.ModuleList or nn.Sequential holds two or more modules "
        "of one class with submodules of their own"))
    assert why["checkpoint_blocks_selective"] == why["checkpoint_blocks"]
    assert why["bf16_weights"][0] == "not applicable"
    assert "trains" in why["bf16_weights"][1]
    assert why["expandable_segments"] == ("not applicable",
                                          "a setting of the CUDA caching allocator")
    assert not any(r.applied for r in got.results)


def test_select_refuses_an_unknown_name() -> None:
    from gobrrr.errors import UserError

    assert [r.name for r in select(["checkpoint_blocks"])] == ["checkpoint_blocks"]
    with pytest.raises(UserError, match="unknown memory remedy checkpoint_all"):
        select(["checkpoint_all"])


def test_terminal_renders_the_rows() -> None:
    from gobrrr.show.terminal import console, print_memory_remedies

    row = {"name": "checkpoint_blocks", "status": "verified", "reason": "peak -20%",
           "peak_bytes_before": 4_697_720, "peak_bytes_after": 3_749_496,
           "bytes_saved": 948_224, "step_s_before": 0.01, "step_s_after": 0.013,
           "time_cost": 1.3, "peak_source": "MemTracker", "notes": ["2 blocks"]}
    out = console()
    with out.capture() as cap:
        print_memory_remedies(out, [row, {"name": "x", "status": "not applicable",
                                          "reason": "why not", "notes": []}], [])
    text = cap.get()
    assert "checkpoint_blocks" in text and "1.30x" in text and "948 kB" in text
    assert "x: why not" in text
