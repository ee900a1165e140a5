"""`gobrrr optimize hf:NAME --generate N` (issue 21, item 5): generation remedies applied to
copies of the model, verified by teacher-forced logits, timed, ranked.

Candidates (each on its own deep copy; the user's model, its cache and its generation
config are never touched), in the order they are tried (the budget may stop the list):
- `lean loop, compiled + CUDA graph` (CUDA): gobrrr.LeanDecoder(mode="compile"): a greedy
  loop over a static cache without generate's per-step host work, its decode step fused by
  Inductor and replayed as one CUDA graph (generation_lean.py);
- `lean loop + CUDA graph` (CUDA): the same loop with the eager kernels in the graph;
- `static cache`: `generate(cache_implementation="static")`, a preallocated KV cache
  (transformers compiles the decode forward with it on CUDA; on CPU it does not);
- `SDPA attention` (a model on eager attention): `attn_implementation="sdpa"`;
- `prompt lookup` (batch 1): `generate(prompt_lookup_num_tokens=PROMPT_LOOKUP_TOKENS)`,
  drafts copied from the prompt checked by one forward (greedy: the same tokens);
- `bf16 weights`, `bf16 weights + static cache` and `bf16 weights + lean loop, compiled
  + CUDA graph` (a model that is not bf16 already): the bytes a decode step reads halve,
  so the bandwidth bound doubles;
- `int8 weight-only (torchao)`: torchao's Int8WeightOnlyConfig on the linear layers, when
  torchao is installed (an optional extra); a row that says so when it is not. Its
  speed is measured, never assumed (torchao's own table has int8 dynamic quantisation
  11x slower);
- `int4 weight-only (torchao)` (CUDA): Int4WeightOnlyConfig, groups of INT4_GROUP along
  the input dimension, in the tile-packed layout of torch's own int4 GEMM kernel
  (`_weight_int4pack_mm`, bf16 activations: a model in another dtype is cast to bf16
  first); torchao's default int4 layout needs fbgemm's kernels, which a plain torch
  install lacks. A layer whose input dimension is not a multiple of INT4_GROUP stays as
  it is (torchao skips it).
torchao's configs adjust Inductor's settings for the whole process by default
(coordinate-descent tuning in all directions, forced int-mm fusion, the FX graph cache);
gobrrr turns that off (`set_inductor_config=False`): the user's process keeps its own.

Timing, A/B: after one warm-up of the candidate (its time, a compile included, is
`prep_s`), REPEATS rounds each run the baseline once and the candidate once, every
generation synchronised at its end; the speedup is the ratio of the two medians of the
same rounds, so a machine that slows or speeds up between candidates slows both sides.
tokens/s = batch x N over a median.

Verification (the issue's rule): greedy tokens diverge on near-ties under any numeric
change, and random weights make near-ties common, so tokens are not compared. The
reference is the baseline's own greedy sequence and its raw logits at each new token;
each candidate generates along that same sequence (a logits processor forces the
reference token at every step) and its raw logits are compared: the largest absolute
difference over the largest reference logit (`rel_err`) and the share of positions whose
top-1 token agrees. A remedy that keeps the model's dtype, in fp32, passes when top-1
agrees everywhere and rel_err <= FP32_TOL; `exact` only when the logits are equal bit for
bit. In bf16 or fp16 the same rule cannot hold: two implementations of the same
arithmetic that pick other kernels (a compiled forward; another cache layout) differ by
the half type's rounding, and random weights make near-ties common (measured on the H200,
TinyLlama-1.1B bf16: the lean eager loop against generate at batch 8, the same ops, rel_err
2.1e-2 and top-1 97%; a compiled forward against eager at batch 1, 2.8e-2 and 95%), so
such a remedy is judged by the half type's rounding: top-1 at >= PRECISION_TOP1 of the
positions and rel_err <= PRECISION_TOL. A precision change (bf16 weights, int8) is never
called exact and is judged the same way; its agreement is reported either way.
The winner is the fastest candidate that passed and beat the baseline by more than
MIN_SPEEDUP (timing noise); else keep generating as it is.
"""

from __future__ import annotations

import copy
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from gobrrr.errors import UserError
from gobrrr.timing import device_sync

__all__ = ["GenCandidate", "GenPlan", "GenerationOptimizeResult", "optimize_generation",
           "plans_for", "passes", "bandwidth_bound",
           "teacher_forced_logits", "compare_logits", "REPEATS"]

REPEATS = 3  # timed generations per candidate (after one warm-up)
LARGER = 4  # the larger-batch advice: the baseline at this many times the batch
MIN_SPEEDUP = 1.05  # a winner beats the baseline by more than this (timing noise)
# rel_err allowed where an fp32 model's arithmetic is kept: reductions in another order (a
# static cache's attention reads its whole preallocated length, masked; Inductor's fused
# kernels) stay within 1e-5
FP32_TOL = 1e-4
PRECISION_TOL = 5e-2  # a half type's rounding: ~3 significant digits per logit
PRECISION_TOP1 = 0.9  # positions whose top-1 token must agree under a precision change
PROMPT_LOOKUP_TOKENS = 10  # draft tokens per check (transformers' documented example)
# the first compile's warm-up, before one was seen in this search (measured on the H200,
# bf16: TinyLlama-1.1B 20-35 s, 60 s tuned, GPT-2 small 8-18 s, Qwen2.5-0.5B 25-82 s)
COMPILE_PREP_GUESS_S = {"cuda": 60.0, "cpu": 15.0}

Progress = Callable[[str], None]


@dataclass
class GenCandidate:
    name: str
    kind: str  # "keeps arithmetic" | "precision"
    tokens_per_s: float | None = None
    speedup: float | None = None
    prep_s: float | None = None  # the warm-up generation (a compile included)
    seconds: list[float] = field(default_factory=list)
    rel_err: float | None = None
    top1_agreement: float | None = None
    exact: bool | None = None
    passed: bool | None = None
    error: str | None = None
    note: str = ""
    how: str = ""  # how to apply it to the user's own code


    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class GenerationOptimizeResult:
    name: str
    device: str
    batch: int
    prompt_len: int
    new_tokens: int
    dtype: str
    baseline_tokens_per_s: float
    baseline_seconds: list[float]
    candidates: list[GenCandidate]
    winner: str | None
    conclusion: str
    optimize_s: float
    notes: list[str] = field(default_factory=list)
    larger_batch: dict[str, Any] | None = None  # advice: the baseline at LARGER x batch
    # tokens/s were every decode step to read its bytes at the calibrated bandwidth (the
    # model as loaded); None without a cached calibration (bandwidth_bound)
    bound_tokens_per_s: float | None = None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["candidates"] = [c.to_dict() for c in self.candidates]
        return {"schema": "gobrrr.optimize_generation", **d}


@dataclass(frozen=True)
class GenPlan:
    """One candidate: what is done to the copy and how it generates."""

    name: str
    kind: str  # "keeps arithmetic" | "precision"
    how: str
    cast: Any = None  # a torch dtype the copy is cast to
    generate_kw: dict[str, Any] = field(default_factory=dict)
    lean_mode: str | None = None  # generation_lean.MODES
    attn: str | None = None  # an attn_implementation for the copy
    quant: str | None = None  # QUANT_INT8 or QUANT_INT4
    compiles: bool = False  # its warm-up compiles (the budget's estimate)
    skip: str | None = None  # why it is not run here (a row that says so)


QUANT_INT8, QUANT_INT4 = "int8 weight-only", "int4 weight-only"
INT4_GROUP = 128  # input channels per int4 scale (torchao's default group size)


def _has_torchao() -> bool:
    import importlib.util

    return importlib.util.find_spec("torchao") is not None


def plans_for(model: Any, device: str, batch: int) -> list[GenPlan]:
    """The candidates for this model, device and batch, in the order they are tried."""
    import torch

    from gobrrr.generation_lean import lean_supported

    dtype = next(model.parameters()).dtype
    lean_why = lean_supported(model)
    lean = ("gobrrr.LeanDecoder(model, batch=B, max_len=PROMPT+N, mode={m!r})"
            ".generate(input_ids, N)")
    static = {"cache_implementation": "static"}
    out: list[GenPlan] = []
    if device == "cuda":
        out += [GenPlan("lean loop, compiled + CUDA graph", "keeps arithmetic",
                        lean.format(m="compile"), lean_mode="compile", compiles=True,
                        skip=lean_why),
                GenPlan("lean loop + CUDA graph", "keeps arithmetic",
                        lean.format(m="graph"), lean_mode="graph", skip=lean_why)]
    out.append(GenPlan("static cache", "keeps arithmetic",
                       'model.generate(..., cache_implementation="static")',
                       generate_kw=static, compiles=device == "cuda"))
    attn = getattr(model.config, "_attn_implementation", None)
    if attn == "eager":
        out.append(GenPlan("SDPA attention", "keeps arithmetic",
                           'from_pretrained(..., attn_implementation="sdpa")', attn="sdpa"))
    if batch == 1:
        out.append(GenPlan("prompt lookup", "keeps arithmetic",
                           f"model.generate(..., prompt_lookup_num_tokens="
                           f"{PROMPT_LOOKUP_TOKENS})",
                           generate_kw={"prompt_lookup_num_tokens": PROMPT_LOOKUP_TOKENS}))
    if dtype != torch.bfloat16:
        bf = torch.bfloat16
        out += [GenPlan("bf16 weights", "precision", "model.to(torch.bfloat16)", cast=bf),
                GenPlan("bf16 weights + static cache", "precision",
                        'model.to(torch.bfloat16); generate(..., '
                        'cache_implementation="static")', cast=bf, generate_kw=static,
                        compiles=device == "cuda")]
        if device == "cuda":
            out.append(GenPlan("bf16 weights + lean loop, compiled + CUDA graph",
                               "precision", "model.to(torch.bfloat16); "
                               + lean.format(m="compile"), cast=bf, lean_mode="compile",
                               compiles=True, skip=lean_why))
    no_torchao = None if _has_torchao() else "torchao is not installed (pip install torchao)"
    out.append(GenPlan("int8 weight-only (torchao)", "precision",
                       "torchao.quantization.quantize_(model, Int8WeightOnlyConfig())",
                       quant=QUANT_INT8, skip=no_torchao))
    to_bf16 = "" if dtype == torch.bfloat16 else "model.to(torch.bfloat16); "
    out.append(GenPlan("int4 weight-only (torchao)", "precision",
                       f"{to_bf16}torchao.quantization.quantize_(model, Int4WeightOnlyConfig("
                       f"group_size={INT4_GROUP}, int4_packing_format=\"tile_packed_to_4d\"))",
                       cast=None if dtype == torch.bfloat16 else torch.bfloat16,
                       quant=QUANT_INT4,
                       skip=("torch's int4 weight-only kernel is CUDA-only"
                             if device != "cuda" else no_torchao)))
    return out


def _prepared_copy(model: Any, plan: GenPlan) -> Any:
    """A deep copy of the model with the plan's cast, attention and quantisation."""
    cand = copy.deepcopy(model)
    if plan.cast is not None:
        cand = cand.to(plan.cast)
    if plan.attn is not None:
        cand.set_attn_implementation(plan.attn)
    if plan.quant == QUANT_INT8:
        from torchao.quantization import Int8WeightOnlyConfig, quantize_

        quantize_(cand, Int8WeightOnlyConfig(set_inductor_config=False))
    elif plan.quant == QUANT_INT4:
        from torchao.quantization import Int4WeightOnlyConfig, quantize_

        quantize_(cand, Int4WeightOnlyConfig(group_size=INT4_GROUP,
                                             int4_packing_format="tile_packed_to_4d",
                                             set_inductor_config=False))
    return cand


def _runners(cand: Any, plan: GenPlan, input_ids: Any, reference: Any, new_tokens: int
             ) -> tuple[Callable[[], Any], Callable[[], Any]]:
    """(one timed generation, the teacher-forced logits along `reference`)."""
    if plan.lean_mode is not None:
        from gobrrr.generation_lean import LeanDecoder

        dec = LeanDecoder(cand, batch=int(input_ids.shape[0]),
                          max_len=int(input_ids.shape[1]) + new_tokens, mode=plan.lean_mode)
        return (lambda: dec.generate(input_ids, new_tokens),
                lambda: dec.generate(input_ids, new_tokens, force=reference)[1])
    kw = _generate_kwargs(new_tokens, **plan.generate_kw)
    return (lambda: cand.generate(input_ids, **kw),
            lambda: teacher_forced_logits(cand, input_ids, reference, new_tokens,
                                          **plan.generate_kw))


def passes(kind: str, dtype_name: str, rel_err: float, top1: float, exact: bool) -> bool:
    """The verification rule (module docstring)."""
    if exact:
        return True
    if kind == "keeps arithmetic" and dtype_name == "float32":
        return top1 == 1.0 and rel_err <= FP32_TOL
    return top1 >= PRECISION_TOP1 and rel_err <= PRECISION_TOL


def _generate_kwargs(new_tokens: int, **extra: Any) -> dict[str, Any]:
    return {"max_new_tokens": new_tokens, "min_new_tokens": new_tokens, "do_sample": False,
            "pad_token_id": 0, **extra}


class _ForceTokens:
    """A logits processor that makes `reference[:, t]` the only choice at step t: the
    candidate generates along the reference sequence (teacher forcing)."""

    def __init__(self, reference: Any, prompt_len: int) -> None:
        self.reference, self.prompt_len = reference, prompt_len

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        import torch

        pos = input_ids.shape[1]
        token = self.reference[:, pos].to(scores.device)
        forced = torch.full_like(scores, float("-inf"))
        forced.scatter_(1, token[:, None], 0.0)
        return forced


def teacher_forced_logits(model: Any, input_ids: Any, reference: Any, new_tokens: int,
                          **generate_kwargs: Any) -> Any:
    """The raw logits (new_tokens x batch x vocab, float32) `model.generate` gives at each
    new token while forced along `reference` (prompt + new_tokens tokens)."""
    import torch
    from transformers import LogitsProcessorList

    with torch.inference_mode():
        out = model.generate(
            input_ids, logits_processor=LogitsProcessorList(
                [_ForceTokens(reference, input_ids.shape[1])]),
            output_logits=True, return_dict_in_generate=True,
            **_generate_kwargs(new_tokens, **generate_kwargs))
    if not torch.equal(out.sequences.cpu(), reference.cpu()):
        raise RuntimeError("the forced generation left the reference sequence")
    return torch.stack([t.float().cpu() for t in out.logits])


def compare_logits(ref: Any, got: Any) -> tuple[float, float, bool]:
    """(rel_err, top-1 agreement, exact) of two logits tensors of one shape."""
    import torch

    scale = float(ref.abs().max()) or 1.0
    rel = float((ref - got).abs().max()) / scale
    top1 = float((ref.argmax(-1) == got.argmax(-1)).float().mean())
    return rel, top1, bool(torch.equal(ref, got))


def _seconds(run: Callable[[], Any], sync: Callable[[], None]) -> float:
    import torch

    with torch.inference_mode():
        sync()
        t0 = time.perf_counter()
        run()
        sync()
        return time.perf_counter() - t0


def _ab(base: Callable[[], Any], cand: Callable[[], Any], sync: Callable[[], None],
        repeats: int) -> tuple[float, list[float], list[float]]:
    """(the candidate's warm-up seconds, the baseline's and the candidate's seconds of
    `repeats` alternating rounds)."""
    prep = _seconds(cand, sync)
    base_s, cand_s = [], []
    for _ in range(repeats):
        base_s.append(_seconds(base, sync))
        cand_s.append(_seconds(cand, sync))
    return prep, base_s, cand_s


def _free(device: str) -> None:
    import gc

    gc.collect()
    if device == "cuda":
        import torch

        torch.cuda.empty_cache()


def optimize_generation(model: Any, input_ids: Any, new_tokens: int, *, name: str,
                        budget_s: float = 120.0, progress: Progress | None = None,
                        started_s: float | None = None) -> GenerationOptimizeResult:
    """The generation remedies, verified, timed and ranked (module docstring).
    started_s: when the budget began (a time.perf_counter() value: the CLI passes its
    command's start, so the model's build counts); None: this call."""
    import torch

    say = progress or (lambda _m: None)
    if not hasattr(model, "generate"):
        raise UserError(f"{name}: the model has no generate(): not a causal LM")
    if not isinstance(new_tokens, int) or new_tokens < 2:
        raise UserError(f"generate at least 2 new tokens, not {new_tokens!r}")
    t_start = time.perf_counter() if started_s is None else started_s
    deadline = t_start + budget_s
    setup_s = time.perf_counter() - t_start
    if setup_s > 0.5:
        say(f"importing and building the model took {setup_s:.1f} s of --budget-s "
            f"{budget_s:g}: the search has the {max(0.0, budget_s - setup_s):.0f} s left")
    device = input_ids.device.type
    sync = device_sync(device)
    dtype = next(model.parameters()).dtype
    dtype_name = str(dtype).removeprefix("torch.")
    batch, prompt = int(input_ids.shape[0]), int(input_ids.shape[1])
    tokens = batch * new_tokens
    notes: list[str] = []

    say(f"baseline: {new_tokens} tokens, a warm-up then its reference logits")
    kw = _generate_kwargs(new_tokens)

    def baseline() -> Any:
        return model.generate(input_ids, **kw)

    base_secs = [_seconds(baseline, sync)]  # the warm-up: the estimate of a run's cost
    with torch.inference_mode():
        out = model.generate(input_ids, output_logits=True, return_dict_in_generate=True,
                             **kw)
    reference = out.sequences
    ref_logits = torch.stack([t.float().cpu() for t in out.logits])
    del out

    cands: list[GenCandidate] = []
    all_base: list[float] = []  # the baseline's seconds in every candidate's rounds
    compile_prep_s = COMPILE_PREP_GUESS_S.get(device, 15.0)
    for plan in plans_for(model, device, batch):
        c = GenCandidate(plan.name, plan.kind, how=plan.how)
        cands.append(c)
        if plan.skip:
            c.error = f"not run: {plan.skip}"
            continue
        spent = time.perf_counter() - t_start
        # a candidate's warm-up (a compile's seconds where it compiles), REPEATS rounds
        # of two generations, its forced one
        estimate = ((2 * REPEATS + 2) * statistics.median(base_secs)
                    + (compile_prep_s if plan.compiles else 0.0))
        if time.perf_counter() + estimate > deadline:
            c.error = (f"not run: the budget (--budget-s {budget_s:g}) had "
                       f"{max(0.0, budget_s - spent):.0f} s left, it needs ~{estimate:.0f} s")
            continue
        say(f"{plan.name}: a copy of the model, timed, then its logits along the reference")
        cand: Any = None
        run: Any = None
        forced: Any = None
        try:
            cand = _prepared_copy(model, plan)
            run, forced = _runners(cand, plan, input_ids, reference, new_tokens)
            c.prep_s, round_base, c.seconds = _ab(baseline, run, sync, REPEATS)
            if plan.compiles:
                compile_prep_s = c.prep_s  # this search's own compile, for the next
            all_base += round_base
            c.tokens_per_s = tokens / statistics.median(c.seconds)
            c.speedup = statistics.median(round_base) / statistics.median(c.seconds)
            got = forced()
            c.rel_err, c.top1_agreement, c.exact = compare_logits(ref_logits, got)
            if plan.kind != "keeps arithmetic":
                c.exact = False  # never called exact, whatever the logits say
            c.passed = passes(plan.kind, dtype_name, c.rel_err, c.top1_agreement, c.exact)
            if device == "cpu" and plan.generate_kw.get("cache_implementation"):
                c.note = "on CPU transformers does not compile the static-cache forward"
        except Exception as exc:  # a remedy that fails is a row that says why
            c.error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
        finally:
            run = forced = cand = None  # the copy's memory goes before the next
            _free(device)
    base_secs = all_base or base_secs
    base_tps = tokens / statistics.median(base_secs)
    ok = [c for c in cands if c.passed and c.speedup and c.speedup > MIN_SPEEDUP]
    best = max(ok, key=lambda c: c.speedup or 0.0) if ok else None
    if best is not None:
        conclusion = (f"{best.name}: {best.tokens_per_s:,.1f} tokens/s, {best.speedup:.2f}x "
                      f"the baseline's {base_tps:,.1f} (verified: top-1 "
                      f"{best.top1_agreement:.0%}, rel_err {best.rel_err:.1e}); apply: "
                      f"{best.how}")
    elif any(c.tokens_per_s for c in cands):
        conclusion = (f"keep generating as it is: no verified candidate beat "
                      f"{base_tps:,.1f} tokens/s by more than {MIN_SPEEDUP:.2f}x")
    else:
        conclusion = "nothing could be measured within the budget: raise --budget-s"
    larger = _larger_batch(baseline_at=lambda ids: model.generate(ids, **kw),
                           input_ids=input_ids, new_tokens=new_tokens, base_tps=base_tps,
                           sync=sync, deadline=deadline, say=say)
    if larger is not None:
        notes.append(larger["summary"])
    notes.append("verification: teacher-forced raw logits along the baseline's greedy "
                 "sequence (rel_err = max |difference| / max |reference logit|, and the "
                 "share of positions whose top-1 token agrees), not the sampled tokens")
    bound, bound_note = bandwidth_bound(model, device, batch, prompt, new_tokens)
    if bound is not None:
        got = best.tokens_per_s if best is not None and best.tokens_per_s else base_tps
        bound_note = (f"{'the winner' if best is not None else 'the baseline'}'s "
                      f"{got:,.1f} tokens/s is {got / bound:.1%} of the bandwidth bound, "
                      f"{bound:,.0f} tokens/s ({bound_note})")
    notes.append(bound_note)
    return GenerationOptimizeResult(
        name, device, batch, prompt, new_tokens, dtype_name, base_tps, base_secs, cands,
        best.name if best else None, conclusion, time.perf_counter() - t_start, notes,
        larger, bound)


def bandwidth_bound(model: Any, device: str, batch: int, prompt_len: int,
                    new_tokens: int) -> tuple[float | None, str]:
    """(The tokens/s of a generation whose decode steps each read their bytes at the
    bandwidth `gobrrr calibrate` cached for this device, how it was made); (None, why
    not) without a cached calibration: measuring one here would spend the budget."""
    from gobrrr.generation import decode_bytes
    from gobrrr.hardware import cached_for, fingerprint

    ceil = cached_for(device, fingerprint(device)["name"])
    if ceil is None:
        return None, ("no bandwidth bound: no calibration of this device is cached "
                      "(gobrrr calibrate makes one)")
    try:
        step_bytes = decode_bytes(model).mean_step_bytes(batch, prompt_len, new_tokens)
    except UserError as exc:
        return None, f"no bandwidth bound: {exc}"
    bw = ceil.bandwidth_bytes_per_s
    return batch * bw / step_bytes, (
        f"each decode step's {step_bytes / 1e6:,.1f} MB on average, the model as loaded, "
        f"at the calibrated {bw / 1e12:.2f} TB/s; the tokens/s include the prefill")


def _larger_batch(*, baseline_at: Callable[[Any], Any], input_ids: Any, new_tokens: int,
                  base_tps: float, sync: Callable[[], None], deadline: float,
                  say: Progress) -> dict[str, Any] | None:
    """The issue's larger-batch advice, measured: the baseline generation at LARGER x the
    batch (its rows repeated), one warm-up and REPEATS timed, tokens/s in total and per
    sequence beside this batch's. Not a candidate: it changes the workload (more
    sequences at once, each waiting for the slowest), so it is never the winner. None
    when the budget cannot hold it; an out-of-memory says so."""
    batch = int(input_ids.shape[0])
    big = input_ids.repeat(LARGER, 1)
    one = batch / base_tps * new_tokens  # this batch's generation, seconds
    if time.perf_counter() + (REPEATS + 1) * one * LARGER > deadline:
        return None
    say(f"advice: the baseline at batch {LARGER * batch}")
    out: dict[str, Any] = {"batch": LARGER * batch}
    try:
        _seconds(lambda: baseline_at(big), sync)
        secs = [_seconds(lambda: baseline_at(big), sync) for _ in range(REPEATS)]
    except Exception as exc:  # out of memory is an answer here
        out["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
        out["summary"] = f"batch {LARGER * batch}: did not run ({out['error']})"
        return out
    tps = LARGER * batch * new_tokens / statistics.median(secs)
    out |= {"tokens_per_s": tps, "per_sequence_tokens_per_s": tps / (LARGER * batch),
            "total_speedup": tps / base_tps,
            "per_sequence_change": (tps / (LARGER * batch)) / (base_tps / batch)}
    out["summary"] = (
        f"a larger batch (advice, the workload changed): batch {LARGER * batch} "
        f"generates {tps:,.1f} tokens/s in total ({out['total_speedup']:.2f}x batch "
        f"{batch}'s), {out['per_sequence_tokens_per_s']:,.1f} per sequence "
        f"({out['per_sequence_change']:.2f}x)")
    return out
