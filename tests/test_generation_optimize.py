"""optimize --generate (generation_optimize.py): the verification rule on tiny configs."""

import importlib.util
import json

import pytest
import torch

transformers = pytest.importorskip("transformers")

from gobrrr.generation_optimize import (  # noqa: E402
    compare_logits,
    optimize_generation,
    plans_for,
    teacher_forced_logits,
)
from test_generation import _gpt2, _llama  # noqa: E402


def test_compare_logits_exact_arithmetic():
    ref = torch.tensor([[[1.0, 4.0, 2.0]], [[0.5, -8.0, 3.0]]])  # 2 positions x 1 x 3
    assert compare_logits(ref, ref.clone()) == (0.0, 1.0, True)
    got = ref.clone()
    got[1, 0, 2] = 3.8  # 0.8 off the largest |logit| 8: rel_err 0.1; top-1 still index 2
    rel, top1, exact = compare_logits(ref, got)
    assert rel == pytest.approx(0.1) and top1 == 1.0 and not exact
    got[0, 0, 0] = 5.0  # position 0's top-1 moves from index 1 to 0: half agree
    assert compare_logits(ref, got)[1] == 0.5


@pytest.mark.parametrize("build", [_gpt2, _llama])
def test_teacher_forcing_follows_the_reference_and_reproduces_the_baselines_logits(build):
    m = build()
    ids = torch.randint(1, 100, (2, 6))
    kw = {"max_new_tokens": 5, "min_new_tokens": 5, "do_sample": False, "pad_token_id": 0}
    with torch.inference_mode():
        out = m.generate(ids, output_logits=True, return_dict_in_generate=True, **kw)
    ref = torch.stack([t.float() for t in out.logits])
    got = teacher_forced_logits(m, ids, out.sequences, 5)
    assert got.shape == (5, 2, 100) and torch.equal(ref, got)  # same model: bit for bit
    # forced along another sequence, the model's logits differ from its own path's
    other = out.sequences.clone()
    other[:, 6] = (other[:, 6] + 1) % 100
    other[:, 6][other[:, 6] == 0] = 1
    moved = teacher_forced_logits(m, ids, other, 5)
    assert torch.equal(moved[0], ref[0]) and not torch.equal(moved[1:], ref[1:])


def test_optimize_generation_verifies_each_candidate_and_leaves_the_model_alone():
    m = _llama()
    before = {k: v.clone() for k, v in m.state_dict().items()}
    config_before = m.generation_config.to_dict()
    ids = torch.randint(1, 100, (1, 8))
    res = optimize_generation(m, ids, 6, name="tiny-llama", budget_s=300)
    names = [c.name for c in res.candidates]
    # on CPU: no CUDA-graph loops; batch 1: prompt lookup; fp32: the bf16 rows
    assert names == ["static cache", "prompt lookup", "bf16 weights",
                     "bf16 weights + static cache", "int8 weight-only (torchao)",
                     "int4 weight-only (torchao)"]
    static, lookup, bf16, _both, int8, int4 = res.candidates
    assert int4.error == "not run: torch's int4 weight-only kernel is CUDA-only"
    assert static.kind == "keeps arithmetic" and static.error is None, static.error
    # fp32 with the cache preallocated: the same arithmetic, top-1 everywhere
    assert static.top1_agreement == 1.0 and static.rel_err <= 1e-4 and static.passed
    # greedy prompt lookup checks its drafts with the same model: the same tokens
    assert lookup.error is None and lookup.top1_agreement == 1.0 and lookup.passed
    assert bf16.kind == "precision" and bf16.exact is False and bf16.rel_err > 0
    if importlib.util.find_spec("torchao") is None:
        assert int8.error == "not run: torchao is not installed (pip install torchao)"
    else:  # quantised: its agreement said, never exact
        assert int8.error is None and int8.exact is False and int8.rel_err > 0
    ran = [c for c in res.candidates if not (c.error or "").startswith("not run")]
    assert res.baseline_tokens_per_s > 0 and all(c.tokens_per_s for c in ran)
    assert all(c.how for c in res.candidates)
    assert res.winner is None or res.winner in names
    assert all(torch.equal(v, m.state_dict()[k]) for k, v in before.items())
    assert m.generation_config.to_dict() == config_before
    assert next(m.parameters()).dtype == torch.float32
    # the larger-batch advice: measured at 4x the batch, never the winner
    big = res.larger_batch
    assert big["batch"] == 4 and big["tokens_per_s"] > 0 and res.winner != "larger batch"
    assert big["per_sequence_tokens_per_s"] == pytest.approx(big["tokens_per_s"] / 4)
    assert big["total_speedup"] == pytest.approx(big["tokens_per_s"]
                                                 / res.baseline_tokens_per_s)
    assert any(n.startswith("a larger batch (advice") for n in res.notes)
    d = json.loads(json.dumps(res.to_dict()))
    assert d["schema"] == "gobrrr.optimize_generation" and len(d["candidates"]) == 6


def test_the_candidates_follow_the_model_device_and_batch(monkeypatch):
    import gobrrr.generation_optimize as go

    eager = _llama()
    eager.config._attn_implementation = "eager"
    names = [p.name for p in plans_for(eager, "cpu", 2)]
    # eager attention: SDPA tried; batch 2: no prompt lookup; CPU: no CUDA graphs
    assert "SDPA attention" in names and "prompt lookup" not in names
    assert not any("CUDA graph" in n for n in names)
    cuda = [p.name for p in plans_for(_llama(), "cuda", 1)]
    assert cuda[:2] == ["lean loop, compiled + CUDA graph", "lean loop + CUDA graph"]
    assert "bf16 weights + lean loop, compiled + CUDA graph" in cuda
    assert "SDPA attention" not in cuda  # the tiny config runs SDPA already
    bf16 = _llama().to(torch.bfloat16)
    assert not any(p.name.startswith("bf16") for p in plans_for(bf16, "cuda", 1))
    int4 = plans_for(bf16, "cuda", 1)[-1]
    assert int4.name == "int4 weight-only (torchao)" and int4.cast is None  # bf16 already
    assert "Int4WeightOnlyConfig(group_size=128" in int4.how
    monkeypatch.setattr(go, "_has_torchao", lambda: False)
    int8, int4 = plans_for(_llama(), "cpu", 1)[-2:]
    assert int8.skip == "torchao is not installed (pip install torchao)"
    assert int4.skip == "torch's int4 weight-only kernel is CUDA-only"
    int4 = plans_for(_llama(), "cuda", 1)[-1]  # fp32: cast to bf16 first, as `how` says
    assert int4.skip == "torchao is not installed (pip install torchao)"
    assert int4.cast == torch.bfloat16 and int4.how.startswith("model.to(torch.bfloat16); ")


@pytest.mark.skipif(importlib.util.find_spec("torchao") is None, reason="needs torchao")
def test_quantising_a_copy_leaves_the_process_inductor_settings_alone():
    # torchao's configs set Inductor options process-wide by default (its
    # recommended_inductor_config_setter): the user's own compiles would change
    import torch._inductor.config as ic

    from gobrrr.generation_optimize import QUANT_INT8, GenPlan, _prepared_copy

    keys = ("coordinate_descent_tuning", "coordinate_descent_check_all_directions",
            "force_fuse_int_mm_with_mul", "fx_graph_cache")
    before = {k: getattr(ic, k) for k in keys}
    m = torch.nn.Sequential(torch.nn.Linear(64, 64))
    _prepared_copy(m, GenPlan("int8", "precision", "", quant=QUANT_INT8))
    assert {k: getattr(ic, k) for k in keys} == before
    assert type(m[0].weight) is torch.nn.Parameter  # the user's model: not quantised


def test_a_budget_too_small_runs_no_candidate_and_says_so():
    m = _gpt2()
    res = optimize_generation(m, torch.randint(1, 100, (1, 4)), 3, name="t", budget_s=1e-3)
    assert all(c.error and c.error.startswith("not run") for c in res.candidates)
    assert res.winner is None and "nothing could be measured" in res.conclusion


def test_the_budget_counts_from_started_s():
    """A build that took the whole budget (started_s 100 s ago, --budget-s 60) leaves
    no time for any candidate, though this call itself has barely begun; the progress
    says how long the build took."""
    import time

    said: list[str] = []
    res = optimize_generation(_gpt2(), torch.randint(1, 100, (1, 4)), 3, name="t",
                              budget_s=60, started_s=time.perf_counter() - 100,
                              progress=said.append)
    assert all(c.error and c.error.startswith("not run") for c in res.candidates)
    assert any("building the model took" in m and "the 0 s left" in m for m in said)


def test_bad_input_is_one_line():
    from gobrrr.errors import UserError

    with pytest.raises(UserError, match="at least 2"):
        optimize_generation(_gpt2(), torch.randint(1, 100, (1, 4)), 1, name="t")
    with pytest.raises(UserError, match="no generate"):
        optimize_generation(torch.nn.Linear(2, 2), torch.zeros(1, 2), 4, name="t")


def test_the_command_line_gives_json_and_html_and_refuses_what_does_not_apply(tmp_path):
    from click.testing import CliRunner

    from gobrrr.cli import cli

    page = tmp_path / "g.html"
    r = CliRunner().invoke(cli, ["optimize", "hf:gpt2", "--generate", "3", "--seq-len", "8",
                                 "--budget-s", "1", "--json", "-q", "--html", str(page)])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["schema"] == "gobrrr.optimize_generation" and d["new_tokens"] == 3
    assert d["prompt_len"] == 8 and d["winner"] is None and d["baseline_tokens_per_s"] > 0
    html = page.read_text()
    assert "gobrrr optimize --generate: hf:gpt2" in html
    assert html.count("<tr>") == 1 + len(d["candidates"])  # the header, then each one
    for args, needle in ((["hf:gpt2", "--generate", "3", "--only", "tf32"], "--only"),
                         (["examples:mlp", "--generate", "3"], "hf: causal LM"),
                         (["hf:gpt2", "--generate", "1"], "1")):
        r = CliRunner().invoke(cli, ["optimize", *args, "-q"])
        assert r.exit_code == 2 and needle in r.output and "Traceback" not in r.output, \
            r.output


def test_the_verification_rule_by_kind_and_dtype():
    from gobrrr.generation_optimize import passes

    # fp32, the dtype kept: top-1 everywhere and within 1e-4 of the largest logit
    assert passes("keeps arithmetic", "float32", 5e-5, 1.0, False)
    assert not passes("keeps arithmetic", "float32", 5e-5, 0.98, False)
    assert not passes("keeps arithmetic", "float32", 2e-4, 1.0, False)
    # bf16 kept: its rounding (the H200's compiled TinyLlama: 2.8e-2, top-1 95%) passes
    assert passes("keeps arithmetic", "bfloat16", 2.8e-2, 0.953, False)
    assert not passes("keeps arithmetic", "bfloat16", 6e-2, 0.99, False)
    # a precision change: the same bar; int8 at top-1 75% fails (measured on the H200)
    assert passes("precision", "float32", 4e-2, 0.92, False)
    assert not passes("precision", "bfloat16", 8.3e-2, 0.75, False)
    assert passes("keeps arithmetic", "bfloat16", 1.0, 0.0, True)  # bit-equal


def test_the_mean_step_bytes_of_a_generation_exact():
    from gobrrr.generation import DecodeBytes

    # steps attend to 9, 10, 11 positions: 1000 + 2 x (10 + p x 4) = 1092, 1100, 1108
    assert DecodeBytes(1000, 10, 4, "x").mean_step_bytes(2, 8, 4) == 1100.0


def test_the_result_says_how_far_from_the_bandwidth_bound(monkeypatch):
    from types import SimpleNamespace

    from gobrrr import hardware
    from gobrrr.generation import decode_bytes

    m, ids = _gpt2(), torch.randint(1, 100, (1, 4))
    monkeypatch.setattr(hardware, "cached_for", lambda device, name: None)
    res = optimize_generation(m, ids, 3, name="t", budget_s=1e-3)
    assert res.bound_tokens_per_s is None
    assert "no bandwidth bound: no calibration of this device is cached" in res.notes[-1]

    monkeypatch.setattr(hardware, "cached_for",
                        lambda device, name: SimpleNamespace(bandwidth_bytes_per_s=2e10))
    res = optimize_generation(m, ids, 3, name="t", budget_s=1e-3)
    step = decode_bytes(m).mean_step_bytes(1, 4, 3)
    assert res.bound_tokens_per_s == pytest.approx(2e10 / step)
    share = res.baseline_tokens_per_s / res.bound_tokens_per_s
    assert res.notes[-1].startswith(f"the baseline's {res.baseline_tokens_per_s:,.1f} "
                                    f"tokens/s is {share:.1%} of the bandwidth bound")
    assert res.to_dict()["bound_tokens_per_s"] == res.bound_tokens_per_s
