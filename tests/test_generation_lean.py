"""The lean decode loop (generation_lean.py) and the decode CUDA-graph experiment
(generation_graph.py) on tiny configs: greedy tokens and logits as `generate` gives them,
teacher forcing, the model left alone, bad input in one line; CUDA rows on the device."""

import pytest
import torch

transformers = pytest.importorskip("transformers")

from gobrrr.errors import UserError  # noqa: E402
from gobrrr.generation_lean import LeanDecoder, lean_supported  # noqa: E402
from test_generation import _gpt2, _llama  # noqa: E402

KW = {"min_new_tokens": 9, "max_new_tokens": 9, "do_sample": False, "pad_token_id": 0}


def _reference(m, ids):
    with torch.inference_mode():
        out = m.generate(ids, output_logits=True, return_dict_in_generate=True, **KW)
    return out.sequences, torch.stack([t.float() for t in out.logits])


@pytest.mark.parametrize("build", [_gpt2, _llama])
def test_the_eager_loop_gives_generates_greedy_tokens_and_logits(build):
    m = build()
    before = {k: v.clone() for k, v in m.state_dict().items()}
    ids = torch.randint(1, 100, (2, 7))
    seq, logits = _reference(m, ids)
    dec = LeanDecoder(m, batch=2, max_len=16)
    got, none = dec.generate(ids, 9)
    assert none is None and torch.equal(got, seq)  # fp32 greedy: the same tokens
    again, forced = dec.generate(ids, 9, force=seq)  # the decoder is reusable
    assert torch.equal(again, seq) and forced.shape == (9, 2, 100)
    # a static cache attends over its whole masked length: fp32 sums in another order
    assert float((forced - logits).abs().max()) <= 1e-5 * float(logits.abs().max())
    assert all(torch.equal(v, m.state_dict()[k]) for k, v in before.items())


def test_forcing_feeds_the_given_tokens_not_the_argmax():
    m = _llama()
    ids = torch.randint(1, 100, (1, 5))
    seq, _ = _reference(m, ids)
    other = seq.clone()
    other[0, 5:] = (other[0, 5:] + 1) % 100  # another continuation after the prompt
    got, forced = LeanDecoder(m, batch=1, max_len=14).generate(ids, 9, force=other)
    assert torch.equal(got, other)
    # the first new token's logits come from the prompt alone; later ones differ
    _, own = LeanDecoder(m, batch=1, max_len=14).generate(ids, 9, force=seq)
    assert torch.equal(forced[0], own[0]) and not torch.equal(forced[1:], own[1:])


def test_bad_input_is_one_line():
    m = _gpt2()
    with pytest.raises(UserError, match="one of eager, graph, compile"):
        LeanDecoder(m, batch=1, max_len=8, mode="fast")
    if not torch.cuda.is_available():
        with pytest.raises(UserError, match="needs a CUDA model"):
            LeanDecoder(m, batch=1, max_len=8, mode="graph")
    dec = LeanDecoder(m, batch=1, max_len=8)
    with pytest.raises(UserError, match="holds batch 1 up to 8 tokens, not batch 2"):
        dec.generate(torch.ones(2, 4, dtype=torch.long), 2)
    with pytest.raises(UserError, match="not batch 1 with 6 \\+ 4"):
        dec.generate(torch.ones(1, 6, dtype=torch.long), 4)
    assert "takes no position_ids" in lean_supported(torch.nn.Linear(2, 2))
    with pytest.raises(UserError, match="cannot drive this model"):
        LeanDecoder(torch.nn.Linear(2, 2), batch=1, max_len=4)


def test_the_graph_experiment_says_why_it_did_not_run_off_cuda():
    from gobrrr.generation_graph import DecodeGraphResult, decode_graph_experiment

    r = decode_graph_experiment(_gpt2(), torch.ones(1, 4, dtype=torch.long))
    assert r.skipped == "not run: CUDA graphs need a CUDA device"
    assert r.summary() == "decode CUDA-graph experiment: not run: CUDA graphs need a CUDA device"
    # the arithmetic of a result: 2 ms eager, 0.5 ms replayed, 0.25 ms the bound
    done = DecodeGraphResult(16, eager_step_s=2e-3, graph_step_s=5e-4, bound_step_s=2.5e-4)
    assert done.overhead_share == pytest.approx(0.75)
    assert "75% of the eager step is launch and host overhead" in done.summary()
    assert "2.0x the bandwidth bound's" in done.summary()
    assert done.to_dict()["overhead_share"] == pytest.approx(0.75)


@pytest.mark.slow
def test_the_compiled_step_runs_the_attention_backend_asked_for():
    """A compiled step ignores an sdpa_kernel context entered outside it (on the H200 the
    compiled step ran cuDNN's SDPA under an outer [MATH]; here CPU's flash kernel): the
    loop enters it inside the step, where dynamo traces it into the graph."""
    from torch._inductor.utils import run_and_get_code

    torch._dynamo.reset()
    dec = LeanDecoder(_llama(), batch=1, max_len=10, mode="compile", attention="math")
    _, code = run_and_get_code(dec.generate, torch.randint(1, 100, (1, 5)), 3)
    # PyTorch's own choice for this step on the CPU is its flash kernel (checked with
    # attention=None: _scaled_dot_product_flash_attention_for_cpu in the code)
    assert code and not any("flash" in c for c in code)


@pytest.mark.cuda
@pytest.mark.parametrize("mode,batch", [("graph", 2), ("compile", 2), ("compile", 1)])
def test_the_graph_and_compiled_loops_on_cuda(mode, batch):
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    m = _llama().to("cuda")
    ids = torch.randint(1, 100, (batch, 7), device="cuda")
    seq, logits = _reference(m, ids)
    dec = LeanDecoder(m, batch=batch, max_len=16, mode=mode)
    got, _ = dec.generate(ids, 9)
    _, forced = dec.generate(ids, 9, force=seq)
    rel = float((forced - logits.cpu()).abs().max()) / float(logits.abs().max())
    # graph: the eager kernels replayed (a static cache's masked sums: 1e-5); compile:
    # Inductor's fused kernels reorder fp32 sums (1e-4, optimize's FP32_TOL)
    assert rel <= (1e-5 if mode == "graph" else 1e-4), rel
    assert dec.prefill_note is None  # the prefill was captured and replayed
    # batch 1 compiled: the linears' inputs were realized while compiling, not after
    assert all(not x._forward_pre_hooks for x in m.modules())
    if mode == "graph":
        assert torch.equal(got, seq)


@pytest.mark.cuda
def test_the_graph_experiment_on_cuda():
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    from gobrrr.generation_graph import decode_graph_experiment

    m = _llama().to("cuda")
    r = decode_graph_experiment(m, torch.randint(1, 100, (1, 8), device="cuda"),
                                new_tokens=8, bound_step_s=1e-5)
    assert r.error is None and r.skipped is None, r.error
    # a 2-layer model's step is all launches: the graph must take most of it away
    assert r.graph_step_s < r.eager_step_s and r.overhead_share > 0.3, r.to_dict()


def test_warm_up_steps_stay_inside_the_cache_and_attention_can_be_chosen():
    m = _llama()
    dec = LeanDecoder(m, batch=1, max_len=10)
    calls = []
    dec._pos.fill_(8)  # a prefill of 8 tokens: room for 2 more positions
    dec._warm(lambda: calls.append(1))
    assert len(calls) == 2
    ids = torch.randint(1, 100, (1, 6))
    seq, logits = _reference(m, ids)
    _, forced = LeanDecoder(m, batch=1, max_len=15, attention="math").generate(
        ids, 9, force=seq)
    assert float((forced - logits).abs().max()) <= 1e-5 * float(logits.abs().max())
    with pytest.raises(UserError, match="attention must be one of math, flash"):
        LeanDecoder(m, batch=1, max_len=8, attention="fast")


def test_one_row_linear_inputs_pass_the_barrier_only_while_entered(monkeypatch):
    from gobrrr import inductor_realize

    assert inductor_realize.register() is None
    model = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    seen = []
    real = torch.ops.gobrrr.materialize

    class Spy:
        def __call__(self, x):
            seen.append(tuple(x.shape))
            return real(x)

    monkeypatch.setattr(torch.ops.gobrrr, "materialize", Spy())
    one, many = torch.randn(1, 8), torch.randn(3, 8)
    with inductor_realize.realized_linear_inputs(model) as hooked:
        assert hooked == 2
        out = model(one)
        model(many)  # three rows: Inductor keeps a matmul there, no barrier
    assert seen == [(1, 8), (1, 4)]
    assert torch.equal(out, model(one))  # an identity
    assert all(not m._forward_pre_hooks for m in model.modules())
    model(one)
    assert len(seen) == 2  # the hooks are gone


def test_the_barrier_compiles_to_the_same_numbers_with_no_copy():
    from gobrrr import inductor_realize

    assert inductor_realize.register() is None
    lin = torch.nn.Linear(16, 8, bias=False)
    x = torch.randn(1, 16)

    def f(x):
        return lin(torch.nn.functional.silu(x) * 2)

    from torch._inductor.utils import run_and_get_code

    torch._dynamo.reset()
    with inductor_realize.realized_linear_inputs(lin), torch.no_grad():
        got, code = run_and_get_code(torch.compile(f), x)
    torch._dynamo.reset()
    # lowered by gobrrr's lowering (a realized buffer), not called as an op
    assert code and not any("materialize" in c for c in code)
    with torch.no_grad():
        assert torch.allclose(got, f(x), rtol=1e-6, atol=1e-6)


def test_without_the_lowering_no_linear_is_hooked(monkeypatch):
    from gobrrr import inductor_realize

    monkeypatch.setattr(inductor_realize, "_STATE", {"why": "no register_lowering here"})
    lin = torch.nn.Linear(4, 2)
    with inductor_realize.realized_linear_inputs(lin) as hooked:
        assert hooked == 0 and not lin._forward_pre_hooks
