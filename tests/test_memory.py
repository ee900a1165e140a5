"""`gobrrr memory` (gobrrr/memory.py): one step's memory by category and per module, with
exact numbers on a Linear stack trained with Adam (hand arithmetic below), the user's
state restored, and the command's JSON and bad input."""

import json

import pytest
import torch
from click.testing import CliRunner
from torch import nn

from gobrrr.cli import cli
from gobrrr.memory import measure_memory
from gobrrr.workload import from_callable

F32 = 4


def _adam_step(foreach):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 256))
    opt = torch.optim.Adam(model.parameters(), foreach=foreach)
    x = torch.randn(64, 256)

    def step(x):
        opt.zero_grad()
        model(x).sum().backward()
        opt.step()

    return step, x, model, opt


@pytest.mark.parametrize("foreach", [False, True])
def test_a_linear_stack_with_adam_is_counted_exactly(foreach):
    step, x, model, opt = _adam_step(foreach)
    before = [p.detach().clone() for p in model.parameters()]
    m = measure_memory(from_callable(step, (x,)))
    params = (256 * 512 + 512 + 512 * 256 + 256) * F32  # 1,051,648 B
    assert m.by_category["parameters"] == params
    # the peak is in the optimizer's step: every gradient alive, no activation left
    assert m.by_category["gradients"] == params
    # Adam keeps exp_avg and exp_avg_sq per parameter, and a 4-byte step per parameter
    assert m.by_category["optimizer_state"] == 2 * params + 4 * F32
    assert m.by_category["activations"] == 0
    assert m.peak_bytes == sum(m.by_category.values())
    assert m.by_category["temporaries"] == m.peak_bytes - 4 * params - 16 - \
        m.by_category["buffers"] - m.by_category["other"]
    # after the root's forward: ReLU's output [64, 512] (its backward reads it) and the
    # output [64, 256], each fp32
    root = next(r for r in m.modules if r["type"] == "Sequential")
    assert root["activations_bytes"] == (64 * 512 + 64 * 256) * F32
    first = next(r for r in m.modules if r["module"] == "0")
    assert first["activations_bytes"] == 64 * 512 * F32  # its own output
    # the largest storage one op made: a [512, 256] weight's gradient (and Adam's
    # weight-sized temporaries), 512 x 256 x 4 = 524,288 B
    assert m.largest_allocation_bytes == 512 * 256 * F32 == 524_288
    # nothing of the user's changed: parameters and the optimizer's state as they were
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    assert len(opt.state) == 0


def test_the_memory_snapshot_stays_on_the_host(monkeypatch):
    # a copy of the user's tensors on the device would count in the allocator's
    # max_memory_allocated: on the H200, 0.50 GB of GPT-2 small's 0.57 GB gap
    import gobrrr.memory
    from gobrrr.state import preserved_state

    step, x, model, opt = _adam_step(False)
    asked = []
    real = gobrrr.memory.preserved_state

    def spy(w, **kw):
        asked.append(kw)
        return real(w, **kw)

    monkeypatch.setattr(gobrrr.memory, "preserved_state", spy)
    measure_memory(from_callable(step, (x,)))
    assert asked == [{"snapshot_on": "host"}]
    before = [p.detach().clone() for p in model.parameters()]
    with preserved_state(from_callable(step, (x,)), snapshot_on="host") as check:
        step(x)
    assert check.snapshot_on == "host" and check.warnings == []
    # the parameters (1,051,648 B) and the input x [64, 256] fp32 (65,536 B); no
    # gradient nor optimizer state yet
    assert check.snapshot_bytes == 1_051_648 + 64 * 256 * F32
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    with pytest.raises(ValueError, match="snapshot_on"):
        with preserved_state(from_callable(step, (x,)), snapshot_on="gpu"):
            pass


@pytest.mark.parametrize("use_cache", [False, True])
def test_a_tiny_llamas_logits_and_kv_cache_are_counted_exactly(use_cache):
    # TinyLlama on the H200 (bf16, 2048 tokens): 139,460,608 B per sample at the peak =
    # logits 2048 x 32000 x 2 + the final hidden state 2048 x 2048 x 2; gobrrr builds hf:
    # models with use_cache=False, so no KV cache is in the step; when there is one,
    # MemTracker counts it. Here 2 layers, hidden 64, 4 heads (head_dim 16), 2 key/value
    # heads, vocabulary 1000, batch 2 x 32 tokens, fp32.
    transformers = pytest.importorskip("transformers")
    from gobrrr.models import _hf_logits, _inference_step

    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(hidden_size=64, intermediate_size=128,
                                   num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=2, vocab_size=1000,
                                   max_position_embeddings=64, use_cache=use_cache,
                                   tie_word_embeddings=False)
    model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa")
    ids = torch.randint(0, 1000, (2, 32))
    m = measure_memory(from_callable(_inference_step(model.eval(), _hf_logits), (ids,)))
    logits = 2 * 32 * 1000 * F32  # 256,000 B
    hidden = 2 * 32 * 64 * F32  # the final norm's output, 16,384 B
    kv = 2 * 2 * 2 * 2 * 32 * 16 * F32  # layers x (k, v) x batch x kv heads x 32 x 16 x 4
    assert m.by_category["activations"] == logits + hidden + (kv if use_cache else 0)
    assert m.by_category["activations"] == (305_152 if use_cache else 272_384)
    assert m.largest_allocation_bytes == logits  # lm_head's matmul, [64, 1000]
    assert m.largest_allocation["shape"] == [64, 1000]


def test_gobrrrs_hf_language_models_have_no_kv_cache():
    pytest.importorskip("transformers")
    from gobrrr.models import ModelOptions, _hf_setup

    config = _hf_setup("tinyllama-1.1b", "cpu", ModelOptions(2048, None, "bf16", False),
                       use_cache=False)[2]
    assert config.use_cache is False


def test_gobrrr_memory_json_and_bad_input():
    r = CliRunner().invoke(cli, ["memory", "examples:mlp_train", "--json", "-q"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["schema"] == "gobrrr.memory" and d["device"] == "cpu"
    for key in ("peak_bytes", "parameters_bytes", "gradients_bytes",
                "optimizer_state_bytes", "activations_bytes", "temporaries_bytes"):
        assert isinstance(d[key], int) and d[key] >= 0, key
    assert d["parameters_bytes"] == d["gradients_bytes"] > 0
    assert d["optimizer_state_bytes"] == 2 * d["parameters_bytes"] + 8 * 4  # 8 steps
    r = CliRunner().invoke(cli, ["memory", "examples:no_such", "-q"])
    assert r.exit_code == 2 and "Traceback" not in r.output


# ---------------------------------------------------------------- the batch that fits


def _profile(peak, per_cat=None):
    from gobrrr.memory import CATEGORIES, MemoryProfile

    cats = {k: 0 for k in CATEGORIES.values()} | (per_cat or {})
    cats["temporaries"] += peak - sum(cats.values())
    return MemoryProfile("cpu", peak, cats)


def _scalable(batch):
    from gobrrr.workload import Workload

    def factory(b):
        return (lambda x: x), (torch.zeros(b, 4),)

    return Workload("t", lambda x: x, (torch.zeros(batch, 4),), {}, "cpu", batch, factory)


def test_the_batch_that_fits_from_two_peaks():
    from gobrrr.memory_fit import HEADROOM, fit_batch

    # peak(b) = 1 GB fixed (parameters, optimizer state) + 10 MB per sample
    def measure(w):
        return _profile(10**9 + 10**7 * w.batch_size,
                        {"parameters": 4 * 10**8, "activations": 10**7 * w.batch_size})

    fit = fit_batch(_scalable(8), measure=measure,
                    capacity=lambda device, base: (8 * 10**9, "given"), check=False)
    assert fit.batches == [8, 16] and fit.peaks_bytes == [1.08e9, 1.16e9]
    assert fit.fixed_bytes == pytest.approx(1e9) and fit.per_sample_bytes == pytest.approx(1e7)
    assert fit.per_sample_by_category["activations"] == pytest.approx(1e7)
    assert fit.per_sample_by_category["parameters"] == 0
    # floor((0.95 x 8 GB - 1 GB) / 10 MB) = 660
    assert fit.predicted_max_batch == int((HEADROOM * 8e9 - 1e9) // 1e7) == 660
    assert fit.checked is None


def test_the_predicted_batch_is_checked_and_the_next_size_up_fails():
    from gobrrr.errors import WorkloadError
    from gobrrr.memory_fit import fit_batch

    limit = 10**9 + 10**7 * 660  # the most this fake device holds

    def measure(w):
        peak = 10**9 + 10**7 * w.batch_size
        if peak > limit:  # as the workload's run raises it: wrapped, its cause the OOM
            try:
                raise RuntimeError("CUDA out of memory. Tried to allocate 20.00 MiB")
            except RuntimeError as exc:
                raise WorkloadError("the measured call", exc) from exc
        return _profile(peak)

    fit = fit_batch(_scalable(8), measure=measure,
                    capacity=lambda device, base: (int(limit / 0.95), "given"), check=True)
    assert fit.predicted_max_batch == 660
    assert fit.checked["predicted"] == {"batch": 660, "ran": True, "peak_bytes": limit}
    up = fit.checked["next_up"]
    assert up["batch"] == 726 and up["ran"] is False and up["oom"] is True


def test_on_cuda_the_largest_tensor_counts_twice_at_the_edge():
    # TinyLlama inference, bf16, 2048 tokens, on the H200 (session 2026-12-02g): peaks
    # 2,339,558,400 and 2,479,019,008 B at batches 1 and 2; the largest allocation the
    # bf16 logits, 2048 x 32000 x 2 = 131,072,000 B per sample; capacity
    # 149,381,316,608 B. The line alone gave 1001 (within 0.95), whose second call ran
    # out of memory; batches up to 547 ran.
    from gobrrr.memory_fit import HEADROOM_CUDA, REUSE_NOTE, fit_batch

    def measure(w):
        p = _profile(2_200_097_792 + 139_460_608 * w.batch_size)
        p.largest_allocation_bytes = 131_072_000 * w.batch_size
        return p

    w = _scalable(1)
    w.device = "cuda"
    fit = fit_batch(w, measure=measure, check=False,
                    capacity=lambda device, base: (149_381_316_608, "given"))
    assert fit.largest_allocations_bytes == [131_072_000, 262_144_000]
    assert fit.largest_per_sample_bytes == 131_072_000 and fit.largest_fixed_bytes == 0
    assert fit.headroom == HEADROOM_CUDA == 0.98
    # floor((0.98 x 149,381,316,608 - 2,200,097,792) / (139,460,608 + 131,072,000))
    # = floor(144,193,592,484 / 270,532,608) = floor(532.999) = 532
    assert fit.predicted_max_batch == 532
    # the line alone: floor(144,193,592,484 / 139,460,608) = floor(1033.9) = 1033
    assert fit.line_max_batch == 1033
    assert REUSE_NOTE in fit.notes
    # a largest tensor that does not grow (a weight's gradient): counted once, fixed
    def flat(w):
        p = _profile(10**9 + 10**7 * w.batch_size)
        p.largest_allocation_bytes = 205 * 10**6
        return p

    fit = fit_batch(w, measure=flat, check=False,
                    capacity=lambda device, base: (8 * 10**9, "given"))
    assert fit.largest_per_sample_bytes == 0 and fit.largest_fixed_bytes == 2.05e8
    # floor((0.98 x 8 GB - 1 GB - 0.205 GB) / 10 MB) = floor(663.5) = 663
    assert fit.predicted_max_batch == 663


def test_a_peak_that_does_not_grow_predicts_no_batch_and_no_batch_is_one_line():
    from gobrrr.errors import UserError
    from gobrrr.memory_fit import fit_batch
    from gobrrr.workload import from_callable

    fit = fit_batch(_scalable(4), measure=lambda w: _profile(10**6),
                    capacity=lambda d, b: (10**9, "given"), check=False)
    assert fit.predicted_max_batch is None
    assert any("did not grow with the batch" in n for n in fit.notes)
    with pytest.raises(UserError, match="no batch size known"):
        fit_batch(from_callable(lambda: torch.zeros(3), ()), measure=lambda w: _profile(1))


def test_gobrrr_memory_fit_on_a_real_training_step():
    r = CliRunner().invoke(cli, ["memory", "examples:mlp_train", "--fit", "--json", "-q"])
    assert r.exit_code == 0, r.output
    fit = json.loads(r.stdout)["fit"]
    assert fit["batches"] == [32, 64] and fit["peaks_bytes"][1] > fit["peaks_bytes"][0]
    # the examples' MLP: its activations grow with the batch, its weights do not
    assert fit["per_sample_bytes"] > 0 and fit["fixed_bytes"] > 0
    assert fit["predicted_max_batch"] > 64 and fit["checked"] is None  # CPU: not run


def test_a_predicted_batch_that_runs_out_of_memory_is_bisected_to_the_largest_that_runs():
    # The H200's case: the line through two batches over-predicts (fragmentation at large
    # tensors). The fake device holds batch 500 and no more; 660 is predicted.
    from gobrrr.errors import WorkloadError
    from gobrrr.memory_fit import BISECT_RUNS, fit_batch

    tried = []

    def measure(w):
        tried.append(w.batch_size)
        if w.batch_size > 500:
            try:
                raise RuntimeError("CUDA out of memory. Tried to allocate 15.82 GiB")
            except RuntimeError as exc:
                raise WorkloadError("the measured call", exc) from exc
        return _profile(10**9 + 10**7 * w.batch_size)

    fit = fit_batch(_scalable(8), measure=measure,
                    capacity=lambda device, base: (8 * 10**9, "given"), check=True)
    assert fit.predicted_max_batch == 660 and fit.checked["predicted"]["oom"] is True
    got = fit.checked["largest_ran"]
    # bisection of [16, 660): 338 ran, 499 ran, 579, 539, 519, 509 did not: 6 runs
    assert tried[4:] == [338, 499, 579, 539, 519, 509] and got["runs"] == BISECT_RUNS
    assert got["batch"] == 499 and got["between"] == [499, 509]
    assert got["peak_bytes"] == 10**9 + 10**7 * 499


def test_memory_left_allocated_by_a_failed_run_stops_the_bisection(monkeypatch):
    # The H200's case: after 165 and 182 ran out of memory, 55 did too. Memory still
    # allocated after the failed runs makes the bisection's answer a lower bound only.
    from gobrrr import memory_fit
    from gobrrr.errors import WorkloadError

    held = {"bytes": 0}

    def measure(w):
        if w.batch_size > 500:
            held["bytes"] += 2**30  # each failed run leaves 1 GiB behind
            try:
                raise RuntimeError("CUDA out of memory. Tried to allocate 15.82 GiB")
            except RuntimeError as exc:
                raise WorkloadError("the measured call", exc) from exc
        return _profile(10**9 + 10**7 * w.batch_size)

    monkeypatch.setattr(memory_fit, "allocated_bytes", lambda device: held["bytes"])
    fit = memory_fit.fit_batch(_scalable(8), measure=measure,
                               capacity=lambda device, base: (8 * 10**9, "given"), check=True)
    got = fit.checked["largest_ran"]
    assert got["runs"] == 0 and got["held_bytes"] == 2 * 2**30  # 660 and 726 failed
    assert "2.0 GiB were still allocated" in got["stopped"] and got["batch"] == 16


def test_a_child_process_checks_each_batch_and_gives_its_peak():
    # child_probe runs `gobrrr memory TARGET --batch-size B` in a fresh process (whose
    # exit frees what an out-of-memory run held); its peak is the in-process one.
    from gobrrr.memory import measure_memory
    from gobrrr.memory_fit import HEADROOM, ChildFailed, child_probe, fit_batch
    from gobrrr.targets import load_target

    w = load_target("examples:mlp_train", "cpu", None, None)
    probe = child_probe("examples:mlp_train", "cpu", [])
    fit = fit_batch(w, check=True, probe=probe,
                    capacity=lambda device, base: (int(3 * base.peak_bytes / HEADROOM), "given"))
    got = fit.checked["predicted"]
    assert got["ran"] is True and got["batch"] == fit.predicted_max_batch > 2 * w.batch_size
    direct = measure_memory(load_target("examples:mlp_train", "cpu", got["batch"], None))
    assert got["peak_bytes"] == direct.peak_bytes
    with pytest.raises(ChildFailed, match="examples:no_such|no_such"):
        child_probe("examples:no_such", "cpu", [])(4)


@pytest.mark.serial
def test_the_doctor_report_carries_the_steps_memory():
    # the live diagnosis measures what `gobrrr memory` does (report 1.10's `memory`),
    # the same figures; and the user's optimizer comes back without state
    from gobrrr.api import diagnose_workload
    from gobrrr.schema import validate

    step, x, model, opt = _adam_step(True)
    # the memory section is skipped when two calls exceed a measurement's budget: beside
    # a CPU hog and a second test worker this ~5 ms step took 0.2 s a call, so the budget
    # is 10x that
    r = diagnose_workload(from_callable(step, (x,)), time_budget_s=4.0)
    params = (256 * 512 + 512 + 512 * 256 + 256) * F32
    d = r.to_dict()
    assert "memory" in d, (d["notes"], d.get("warnings"))
    m = d["memory"]
    assert m["parameters_bytes"] == m["gradients_bytes"] == params
    assert m["optimizer_state_bytes"] == 2 * params + 4 * F32
    validate(json.loads(r.to_json()), "report")
    assert len(opt.state) == 0
    # without experiments, no memory section
    assert "memory" not in diagnose_workload(from_callable(step, (x,)), experiments=False,
                                             time_budget_s=0.3).to_dict()
