"""LLM generation read as prefill and decode (gobrrr.generation, issue 21's first part):
the bytes a decode step reads, exact against hand arithmetic on tiny configs (GPT-2:
tied head, learned positions; LLaMA-style: GQA, untied head), the phases found from the
model's own forward calls, bad input in one line."""

import pytest
import torch

from gobrrr.errors import UserError
from gobrrr.generation import cache_bytes_per_position, decode_bytes, profile_generation

transformers = pytest.importorskip("transformers")

F32 = 4


def _gpt2():
    cfg = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=4, vocab_size=100,
                                  n_positions=64, bos_token_id=0, eos_token_id=0)
    torch.manual_seed(0)
    return transformers.GPT2LMHeadModel(cfg).eval()


def _llama():
    cfg = transformers.LlamaConfig(hidden_size=64, intermediate_size=128,
                                   num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=2, vocab_size=100,
                                   max_position_embeddings=64, tie_word_embeddings=False,
                                   bos_token_id=0, eos_token_id=0, pad_token_id=0)
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(cfg).eval()


def _n(model):
    return sum(p.numel() for p in model.parameters())  # each tensor once (tied: once)


def test_gpt2_bytes_tied_head_read_whole_positions_one_row():
    m = _gpt2()
    b = decode_bytes(m)
    # wte (100 x 32) is the head's weight too: read whole; wpe (64 x 32): one row
    assert b.weights_bytes == (_n(m) - 64 * 32) * F32
    assert b.embedding_row_bytes == 32 * F32
    # 2 layers x K and V x 4 heads x 8 dims
    assert b.kv_bytes_per_position == 2 * 2 * 4 * 8 * F32 and b.kv_source == "the config"
    assert b.step_bytes(batch=3, position=10) == b.weights_bytes + 3 * (32 * F32 + 10 * 512)


def test_llama_gqa_untied_embedding_is_one_row_and_the_cache_has_two_kv_heads():
    m = _llama()
    b = decode_bytes(m)
    assert b.weights_bytes == (_n(m) - 100 * 64) * F32  # embed_tokens: one row a token
    assert b.embedding_row_bytes == 64 * F32
    # 2 layers x K and V x 2 KV heads (not 4) x head_dim 16
    assert b.kv_bytes_per_position == 2 * 2 * 2 * 16 * F32


def test_the_cache_the_model_returns_is_counted_and_agrees_with_the_config():
    m = _llama()
    ids = torch.randint(0, 100, (2, 8))
    with torch.inference_mode():
        out = m(input_ids=ids, use_cache=True)
    assert cache_bytes_per_position(out.past_key_values) == (2 * 2 * 2 * 16 * F32, 8)
    b = decode_bytes(m, out.past_key_values)
    assert b.kv_source == "the cache" and b.kv_bytes_per_position == 2 * 2 * 2 * 16 * F32


@pytest.mark.parametrize("build", [_gpt2, _llama])
def test_generate_is_one_prefill_then_a_decode_step_per_new_token(build):
    m = build()
    before = {k: v.clone() for k, v in m.state_dict().items()}
    ids = torch.randint(1, 100, (2, 8))
    prof = profile_generation(m, ids, 6, warmup=0, bandwidth_bytes_per_s=1e10,
                              peak_flops_per_s=1e11, pad_token_id=0)
    assert prof.batch == 2 and prof.prompt_len == 8 and prof.new_tokens == 6
    assert len(prof.decode_s) == 5 and prof.prefill_s > 0
    assert prof.positions == [9, 10, 11, 12, 13]
    assert prof.bytes.kv_source == "the cache"
    # the bound: 2 tokens a step at the mean step bytes over 10 GB/s
    mean_bytes = sum(prof.bytes.step_bytes(2, p) for p in range(9, 14)) / 5
    assert prof.step_bytes == pytest.approx(mean_bytes)
    assert prof.bound_tokens_per_s == pytest.approx(2 * 1e10 / mean_bytes)
    assert prof.mbu == pytest.approx(prof.decode_tokens_per_s / prof.bound_tokens_per_s)
    d = prof.to_dict()
    assert d["decode"]["steps"] == 5 and d["prefill"]["tokens_per_s"] > 0
    # prefill FLOPs: 2 per matmul weight per token (the head included), plus attention's
    # 4 T^2 d per head and layer where torch's flop counter counts the SDPA kernel (it
    # does not count CPU's _scaled_dot_product_flash_attention_for_cpu in torch 2.13)
    lin = sum(mod.weight.numel() for mod in m.modules()
              if type(mod).__name__ in ("Linear", "Conv1D"))
    heads, head_dim = m.config.num_attention_heads, m.config.hidden_size // \
        m.config.num_attention_heads
    attention = 2 * 4 * 2 * heads * 8 * 8 * head_dim  # layers x 4 x B x heads x T^2 x d
    assert prof.prefill_flops in (2 * 2 * 8 * lin, 2 * 2 * 8 * lin + attention)
    assert prof.mfu == pytest.approx(prof.prefill_flops / prof.prefill_s / 1e11)
    # hooks removed, weights untouched
    assert not m._forward_hooks and not m._forward_pre_hooks
    assert all(torch.equal(v, m.state_dict()[k]) for k, v in before.items())


def test_a_users_own_decode_loop_is_read_the_same_way():
    m = _llama()

    def loop(model, ids, n):  # greedy, with the cache, as people write it
        out = model(input_ids=ids, use_cache=True)
        cache, tok = out.past_key_values, out.logits[:, -1:].argmax(-1)
        for _ in range(n - 1):
            out = model(input_ids=tok, past_key_values=cache, use_cache=True)
            cache, tok = out.past_key_values, out.logits[:, -1:].argmax(-1)

    prof = profile_generation(m, torch.randint(1, 100, (1, 5)), 4, warmup=0, generate=loop)
    assert len(prof.decode_s) == 3 and prof.positions == [6, 7, 8]


def test_bad_input_is_one_line():
    m = _gpt2()
    ids = torch.randint(1, 100, (1, 4))
    with pytest.raises(UserError, match="at least 2 new tokens"):
        profile_generation(m, ids, 0)
    with pytest.raises(UserError, match="has no generate"):
        profile_generation(torch.nn.Linear(4, 4), ids, 4)


# ---------------------------------------------------------------- doctor --generate


@pytest.mark.usefixtures("cached_cpu_ceilings")
def test_the_generation_report_has_prefill_and_decode_phases_and_the_bound():
    from gobrrr.generation_run import BETWEEN, PROFILED_TOKENS, diagnose_generation
    from gobrrr.schema import validate

    m = _llama()
    ids = torch.randint(1, 100, (2, 8))
    rep = diagnose_generation(m, ids, 12, name="tiny-llama", batch_budget_s=4)
    d = rep.to_dict()
    validate(d, "report")
    g = d["generation"]
    # the batch experiment ran from batch 1 (the first prompt row), both roofs at each
    # point: the cached bandwidth (2e10 B/s) and compute peak (2e11 FLOP/s)
    bs = g["batch_scaling"]
    assert bs["points"][0]["batch"] == 1 and bs["new_tokens"] == 8
    assert all(p["bandwidth_bound_tokens_per_s"] == pytest.approx(
        p["batch"] * 2e10 / p["step_bytes"]) for p in bs["points"])
    assert all(p["limit"] in ("memory", "compute") for p in bs["points"])
    assert g["new_tokens"] == 12 and g["decode"]["steps"] == 11
    assert g["profiled_new_tokens"] == PROFILED_TOKENS
    # where the diagnosis's own time went: every part, the experiments' as they report it
    parts = g["seconds_by_part"]
    assert set(parts) == {"calibrate", "generation", "timing", "profile", "analysis",
                          "batch_scaling", "prompt_scaling", "decode_graph", "report"}
    assert parts["batch_scaling"] >= bs["seconds"]
    assert sum(parts.values()) <= d["diagnose_s"] + parts["report"]
    assert g["decode"]["kv_source"] == "the cache"
    # the decode step's own split: the profiled decode phase's op time against the step
    split = g["decode"]["split"]
    row = {r["name"]: r for r in d["budget"]["per_phase"]}["decode"]
    assert split["busy_s"] == pytest.approx(row["time_s"] / (PROFILED_TOKENS - 1))
    assert split["step_s"] == g["decode"]["median_step_s"]
    assert sum(split["shares"].values()) == pytest.approx(1.0)
    assert split["overhead_s"] >= 0 and "overhead a lower bound" in split["source"]
    # the cached ceilings' bandwidth (conftest): 2e10 B/s
    assert g["decode"]["bound_tokens_per_s"] == pytest.approx(2 * 2e10 / g["decode"][
        "step_bytes"])
    # the profiled generation of PROFILED_TOKENS tokens: one prefill forward, a decode
    # forward per other token, and generate's own ops between them
    calls = {}
    for r in rep.counts.records:
        if r.op == "aten::embedding":
            calls[r.phase] = calls.get(r.phase, 0) + 1
    assert calls == {"prefill": 1, "decode": PROFILED_TOKENS - 1}
    assert {"prefill", "decode"} <= set(d["phases"]) and BETWEEN in d["phases"]
    assert d["workload"]["source"] == "generation"
    assert [s["name"] for s in d["steps"]["shown"]][:2] == ["prefill", "decode 1"]
    # rendered: the terminal's generation lines and the page's section
    from gobrrr.show import html
    from gobrrr.show.terminal import generation_lines

    lines = generation_lines(g)
    assert lines[0].startswith("generation: 12 new tokens after 2 x 8 prompt tokens")
    assert lines[2].startswith("  decode ") and "(MBU)" in lines[2]
    assert lines[3].startswith("  decode step: overhead ")
    assert lines[4].startswith("  decode tokens/s by batch: 1: ")
    assert "Generation: prefill and decode" in html(d)
    # two batches or more: the tokens/s-vs-batch figure with both limits
    pts = [dict(bs["points"][0], batch=b, tokens_per_s=5.0 * b) for b in (1, 2)]
    page = html(d | {"generation": g | {"batch_scaling": bs | {"points": pts}}})
    assert "Decode tokens/s against batch, with the bandwidth limit" in page
    assert page.count("<svg") > html(d | {"generation": g | {"batch_scaling": bs | {
        "points": pts[:1]}}}).count("<svg")


@pytest.mark.slow
@pytest.mark.usefixtures("cached_cpu_ceilings")
def test_doctor_generate_on_gpt2_and_its_bad_input(tmp_path):
    import json
    import os
    import subprocess
    import sys

    def doctor(*args):
        return subprocess.run([sys.executable, "-m", "gobrrr", "doctor", *args, "-q"],
                              capture_output=True, text=True, timeout=600,
                              env=dict(os.environ, NO_COLOR="1"))

    p = doctor("hf:gpt2", "--device", "cpu", "--generate", "3", "--seq-len", "8", "--json",
               "--no-experiments")
    assert p.returncode == 0, p.stderr[-2000:]
    d = json.loads(p.stdout)
    assert "batch_scaling" not in d["generation"]  # --no-experiments
    assert d["generation"]["decode"]["steps"] == 2 and d["generation"]["batch"] == 1
    assert d["workload"]["model"]["class"] == "GPT2LMHeadModel"
    for args, line in [(["hf:gpt2", "--generate", "1"], "1 is not in the range x>=2"),
                       (["examples:mlp", "--generate", "4"], "--generate takes an hf: causal"),
                       (["hf:bert-base-uncased", "--generate", "4"], "not a causal LM"),
                       (["hf:gpt2", "--generate", "4", "--train"], "do not go together")]:
        bad = doctor(*args, "--device", "cpu")
        assert bad.returncode == 2 and line in bad.stderr, (args, bad.stderr[-500:])


@pytest.mark.cuda
def test_generation_on_cuda_reads_kernels_per_phase():
    # the same source on the GPU: decode's kernels carry its phase, the bound is the
    # calibrated bandwidth's (run on the device machine)
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    from gobrrr.generation_run import diagnose_generation

    m = _llama().to("cuda")
    ids = torch.randint(1, 100, (1, 16), device="cuda")
    d = diagnose_generation(m, ids, 16, name="tiny-llama").to_dict()
    g = d["generation"]
    assert g["device"] == "cuda" and g["decode"]["mbu"] is not None
    assert g["decode"]["kv_source"] == "the cache"
    rows = {r["name"]: r for r in d["budget"]["per_phase"]}
    assert rows["decode"]["time_s"] > 0 and rows["prefill"]["time_s"] > 0


def test_the_decode_split_is_the_phase_against_the_step():
    from gobrrr.budget import RowBudget
    from gobrrr.generation_run import decode_split

    # two profiled decode steps of 1 ms of ops each (0.2 compute, 0.8 memory), a 4 ms step
    row = RowBudget("decode", time_s=2e-3, compute_s=0.4e-3, memory_s=1.6e-3)
    s = decode_split(4e-3, row, 2, "cuda")
    assert (s["busy_s"], s["compute_s"], s["memory_s"]) == pytest.approx((1e-3, 0.2e-3, 0.8e-3))
    assert s["overhead_s"] == pytest.approx(3e-3)
    assert s["shares"] == pytest.approx({"compute": 0.05, "memory": 0.2, "overhead": 0.75})
    assert "GPU busy time" in s["source"]
    # ops that took longer than the step (a profiler's host cost on the CPU): scaled to it
    s = decode_split(0.5e-3, row, 2, "cpu")
    assert s["overhead_s"] == pytest.approx(0.0, abs=1e-15)
    assert s["shares"] == pytest.approx({"compute": 0.2, "memory": 0.8, "overhead": 0.0})


# ---------------------------------------------------------------- the batch experiment


def _fake_measure(tokens_per_s, oom_at=None, prefill_flops=10**9, counted=None):
    """profile_generation's stand-in: decode at each batch at the given tokens/s;
    `counted` gets (batch, count_flops, warmup) of each call."""
    from gobrrr.generation import DecodeBytes, GenerationProfile

    def measure(model, ids, new_tokens, *, bandwidth_bytes_per_s, peak_flops_per_s, **kw):
        b = int(ids.shape[0])
        if counted is not None:
            counted.append((b, kw.get("count_flops", True), kw.get("warmup", 1)))
        if oom_at is not None and b >= oom_at:
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
        step = b / tokens_per_s[b]
        prof = GenerationProfile(b, int(ids.shape[1]), 0.01, [step] * (new_tokens - 1),
                                 [ids.shape[1] + k for k in range(1, new_tokens)],
                                 DecodeBytes(10**9, 0, 10**3, "the config"),
                                 bandwidth_bytes_per_s, "cpu")
        prof.prefill_flops, prof.peak_flops_per_s = prefill_flops * b, peak_flops_per_s
        return prof
    return measure


def test_the_decode_batch_experiment_stops_where_tokens_per_s_stops_rising():
    from gobrrr.generation_batch import decode_batch_scaling

    ids = torch.zeros(1, 10, dtype=torch.long)
    counted = []
    bs = decode_batch_scaling(None, ids, bandwidth_bytes_per_s=1e11, peak_flops_per_s=1e12,
                              measure=_fake_measure({1: 10, 2: 19, 4: 36, 8: 38},
                                                    counted=counted))
    assert [p.batch for p in bs.points] == [1, 2, 4, 8]
    # prefill's FLOPs per token are counted once, at the first batch, and kept for all;
    # every point warmed up once: unwarmed, a new batch's decode steps ran slow on the
    # H200 (batch 2 read 0.56-0.79x batch 1's tokens/s on four 1B-class rows)
    assert counted == [(1, True, 1), (2, False, 1), (4, False, 1), (8, False, 1)]
    assert [p.compute_bound_tokens_per_s for p in bs.points] == [pytest.approx(1e4)] * 4
    assert bs.stopped == "tokens/s rose 1.06x from batch 4 to 8: stopped rising"
    assert bs.best.batch == 8
    p1 = bs.points[0]
    # the roofs: 1e11 B/s over W + B x p x K bytes (p: 11..17, mean 14), and 1e12 FLOP/s
    # over prefill's 1e9 FLOPs per 10 prompt tokens = 1e8 per token
    assert p1.bandwidth_bound_tokens_per_s == pytest.approx(1e11 / (1e9 + 14e3))
    assert p1.compute_bound_tokens_per_s == pytest.approx(1e4)
    assert p1.limit == "memory"
    assert bs.to_dict()["points"][0]["limit"] == "memory"
    assert bs.summary() == ("decode batch scaling: batch 1 10.0 tokens/s -> batch 8 38.0 "
                            "tokens/s (3.8x); tokens/s rose 1.06x from batch 4 to 8: "
                            "stopped rising")


def test_the_decode_batch_experiment_stops_at_out_of_memory_and_on_its_budget():
    from gobrrr.generation_batch import decode_batch_scaling

    ids = torch.zeros(1, 10, dtype=torch.long)
    rising = {b: 10.0 * b for b in (1, 2, 4, 8, 16)}
    bs = decode_batch_scaling(None, ids, bandwidth_bytes_per_s=None, peak_flops_per_s=None,
                              measure=_fake_measure(rising, oom_at=4))
    assert [p.batch for p in bs.points] == [1, 2] and bs.stopped == "out of memory at batch 4"
    assert bs.points[0].limit is None  # no ceilings: no roofs
    # each point takes 1 s on this clock; with 2.5 s of budget the third would not fit
    ticks = iter(range(100))
    bs = decode_batch_scaling(None, ids, bandwidth_bytes_per_s=None, peak_flops_per_s=None,
                              budget_s=2.5, measure=_fake_measure(rising),
                              clock=lambda: float(next(ticks)))
    assert [p.batch for p in bs.points] == [1]
    assert bs.stopped == "the time budget (2 s) would be spent at batch 2"
    none = decode_batch_scaling(None, ids, bandwidth_bytes_per_s=None, peak_flops_per_s=None,
                                measure=_fake_measure(rising, oom_at=1))
    assert none.points == [] and none.best is None
    assert none.summary() == "decode batch scaling: no batch ran (out of memory at batch 1)"
    with pytest.raises(ValueError):  # any other failure is the workload's, raised
        decode_batch_scaling(None, ids, bandwidth_bytes_per_s=None, peak_flops_per_s=None,
                             measure=lambda *a, **k: (_ for _ in ()).throw(ValueError("x")))


def test_a_callable_that_calls_generate_is_diagnosed_as_a_generation():
    # gobrrr.diagnose(lambda: model.generate(...)): found from the call, not said
    from gobrrr import diagnose

    m = _gpt2()
    ids = torch.randint(1, 100, (2, 8))
    before = {k: v.clone() for k, v in m.state_dict().items()}
    r = diagnose(lambda: m.generate(ids, max_new_tokens=5, do_sample=False, pad_token_id=0,
                                    num_beams=1), experiments=False)
    g = r.generation
    assert g is not None and g["new_tokens"] == 5 and g["batch"] == 2
    assert g["prompt_len"] == 8 and g["decode"]["steps"] == 4
    assert r.notes[0].startswith("the callable calls GPT2LMHeadModel.generate: diagnosed "
                                 "as greedy generation of exactly 5 new tokens after its "
                                 "2 x 8 prompt; its other arguments were not used: "
                                 "num_beams")
    assert "generate" not in m.__dict__  # the wrapper is gone
    assert all(torch.equal(v, m.state_dict()[k]) for k, v in before.items())
    # a callable that reaches the model but only calls its forward goes the ordinary way
    plain = diagnose(lambda: m(ids).logits, experiments=False, time_budget_s=0.2)
    assert plain.generation is None


def test_the_prompt_length_experiment_doubles_until_prefill_stops_rising():
    from types import SimpleNamespace

    from gobrrr.generation_prompt import max_positions, prefill_length_scaling

    # prefill time: 10 ms flat up to 32 tokens, then 0.5 ms a token (compute bound):
    # 8: 800, 16: 1,600, 32: 3,200, 64: 32 ms -> 2,000 tokens/s, 0.63x: stopped at 64
    seen = []

    def measure(model, ids, n, *, peak_flops_per_s, **kw):
        seen.append((tuple(ids.shape), n, kw))
        t = ids.shape[1]
        s = 0.01 if t <= 32 else 0.0005 * t
        return SimpleNamespace(batch=ids.shape[0], prompt_len=t, prefill_s=s,
                               prefill_flops=1000 * t, mfu=1000 * t / s / peak_flops_per_s)

    clock = iter(range(100)).__next__
    model = SimpleNamespace(config=SimpleNamespace(max_position_embeddings=1024))
    r = prefill_length_scaling(model, torch.ones(1, 8, dtype=torch.long),
                               peak_flops_per_s=1e6, measure=measure,
                               clock=lambda: float(clock()), pad_token_id=0)
    assert [p.prompt_len for p in r.points] == [8, 16, 32, 64]
    assert [round(p.tokens_per_s) for p in r.points] == [800, 1600, 3200, 2000]
    assert r.points[-1].mfu == pytest.approx(64_000 / 0.032 / 1e6)
    assert "stopped rising" in r.stopped and seen[0] == ((1, 8), 2, {"pad_token_id": 0})
    assert max_positions(model) == 1024
    # the model's positions end it: a 64-position model runs 8, 16, 32 (62 is the most)
    small = SimpleNamespace(config=SimpleNamespace(n_positions=64))
    clock = iter(range(100)).__next__
    r = prefill_length_scaling(small, torch.ones(1, 8, dtype=torch.long),
                               peak_flops_per_s=1e6, measure=measure,
                               clock=lambda: float(clock()))
    assert [p.prompt_len for p in r.points] == [8, 16, 32]
    assert r.stopped == "no longer prompt fits the model's positions"


def test_the_prompt_length_experiment_runs_on_a_real_model():
    from gobrrr.generation_prompt import prefill_length_scaling

    m = _gpt2()  # 64 positions: prompts of 4, 8, 16, 32 at most
    r = prefill_length_scaling(m, torch.randint(1, 100, (2, 4)), peak_flops_per_s=1e11,
                               budget_s=60, pad_token_id=0)
    assert r.points and r.points[0].prompt_len == 4 and r.points[0].tokens_per_s > 0
    lengths = [p.prompt_len for p in r.points]
    assert lengths == [4 * 2**i for i in range(len(lengths))]
    assert all(p.prompt_len + 2 <= 64 for p in r.points)
    assert r.points[0].flops and r.points[0].mfu is not None
