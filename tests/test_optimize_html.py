"""`gobrrr optimize --html`: the page from an OptimizeResult dict (synthetic, exact)."""

from gobrrr.show.optimize_html import render_optimize


def result(best_status="verified"):
    best = {"name": "compile", "status": best_status, "predicted_speedup": 1.96,
            "measured_speedup": 1.77, "verified": True}
    return {
        "workload": {"name": "<script>alert(1)</script>.py:make", "device": "cuda",
                     "batch_size": 16},
        "regime": "memory", "created": "2026-11-29T19:38:06+00:00", "best": best,
        "snippet": "model = torch.compile(model)  # a < b",
        "remedies": [
            {**best, "regime": "memory", "interval": [1.76, 1.78], "reason": ""},
            {"name": "tf32", "regime": "compute", "status": "not applicable",
             "predicted_speedup": None, "measured_speedup": None, "verified": False,
             "interval": None, "reason": "no fp32 matmul <here>"},
        ],
        "notes": ["eager is deterministic"],
    }


def test_page_has_the_winner_first_and_every_remedy():
    html = render_optimize(result())
    assert html.index("Best verified: compile, 1.77x measured (predicted 1.96x)") \
        < html.index("not applicable")
    assert "1.76-1.78" in html and "tf32" in html


def test_user_strings_are_escaped():
    html = render_optimize(result())
    assert "<script>alert(1)</script>" not in html
    assert "&lt;script&gt;" in html
    assert "no fp32 matmul &lt;here&gt;" in html
    assert "a &lt; b" in html  # the snippet too


def test_no_winner_says_keep_eager():
    d = result()
    d["best"] = {"name": "eager", "status": "baseline", "predicted_speedup": None,
                 "measured_speedup": 1.0, "verified": True}
    assert "No remedy was verified faster than eager" in render_optimize(d)


def test_unverifiable_remedies_are_named_in_the_headline_and_table():
    d = result()
    d["remedies"].append({"name": "compile_reduce_overhead", "regime": "overhead",
                          "status": "unverifiable", "predicted_speedup": 2.0,
                          "measured_speedup": 1.5, "verified": False, "interval": [1.4, 1.6],
                          "reason": "eager differs from itself by 0.07 (relative L2): ..."})
    html = render_optimize(d)
    assert "1 remedy result(s) unverifiable" in html
    row = html[html.index("compile_reduce_overhead"):]
    assert "unverifiable" in row[:400] and "eager differs from itself" in row


def test_the_conclusion_says_whether_anything_was_measured():
    from gobrrr.remedies.base import RemedyResult
    from gobrrr.remedies.result import KEEP, conclusion

    def row(status, estimated_s=None):
        r = RemedyResult("compile", "overhead", status, "")
        if estimated_s is not None:
            r.checks["plan"] = {"estimated_s": estimated_s}
        return r

    # measured, none won: keep eager
    assert conclusion(None, [row("slower"), row("skipped", 40.0)], 60) == KEEP
    # ... and a skipped candidate predicted above eager is named, not measured (the CPU's
    # GPT-2 training step: its optimizer remedies measured, its compile never reached)
    compiled, small = row("skipped", 83.5), row("skipped", 10.0)
    compiled.predicted_speedup, small.predicted_speedup = 1.15, 1.04
    assert conclusion(None, [row("no significant change"), small, compiled], 60) == (
        KEEP + "; compile, predicted 1.15x, was not measured: ~84 s by its estimate, "
        "--budget-s 144 would reach it")
    # nothing measured (issue 24: one candidate started, abandoned, the run concluded
    # "keep the workload as it is"): said, with the budget that would reach the cheapest
    assert conclusion(None, [row("skipped", 109.0), row("skipped", 45.2), row("failed")],
                      60) == (
        "nothing could be measured within --budget-s 60: no candidate reached a "
        "measurement, so nothing is known to be faster or not; the cheapest candidate "
        "skipped needs ~45 s by its estimate (--budget-s 105 would reach it)")
    assert conclusion(None, [row("failed")], None) == (
        "nothing could be measured: no candidate reached a measurement, so nothing is known "
        "to be faster or not")
    # nothing applied at all: said so, not "nothing could be measured"
    assert conclusion(None, [row("not applicable"), row("advice")], 60) == (
        "no remedy applies to this workload (each row says why): keep it as it is")
    # a best, and a skipped candidate predicted far above it: the budget that reaches it
    # (the H200's GPT-2 training step at --budget-s 60: 3.02x measured, the compiled
    # stack predicted 8.60x, skipped for its ~66 s compile)
    best = RemedyResult("fused_optimizer+bf16_autocast+cuda_graphs", "overhead", "verified",
                        "")
    best.measured_speedup, best.tolerance = 3.02, "rel. L2 <= 5e-2"
    stack = row("skipped", 65.8)
    stack.name, stack.predicted_speedup = "compile_stack", 8.60
    small = row("skipped", 20.0)
    small.predicted_speedup = 4.0  # under 1.5 x 3.02: no hint
    assert conclusion(best, [best, small, stack], 60) == (
        "best verified: fused_optimizer+bf16_autocast+cuda_graphs, 3.02x measured, outputs "
        "verified (rel. L2 <= 5e-2); compile_stack, predicted 8.60x, was skipped: ~66 s by "
        "its estimate, --budget-s 126 would reach it")
    assert conclusion(best, [best, small], 60) == (
        "best verified: fused_optimizer+bf16_autocast+cuda_graphs, 3.02x measured, outputs "
        "verified (rel. L2 <= 5e-2)")
    d = result()
    d["best"] = {"name": "eager", "status": "baseline", "measured_speedup": 1.0}
    d["conclusion"] = conclusion(None, [row("skipped", 45.2)], 60)
    assert "Nothing could be measured within --budget-s 60" in render_optimize(d)


def generation_result():
    base = {"kind": "keeps arithmetic", "seconds": [0.1], "exact": False, "error": None,
            "note": "", "how": ""}
    return {
        "schema": "gobrrr.optimize_generation", "name": "hf:<b>gpt2</b>", "device": "cuda",
        "batch": 1, "prompt_len": 128, "new_tokens": 64, "dtype": "bfloat16",
        "baseline_tokens_per_s": 51.3, "winner": "lean loop, compiled + CUDA graph",
        "conclusion": "lean loop, compiled + CUDA graph: 829.2 tokens/s, 16.16x",
        "candidates": [
            {**base, "name": "lean loop, compiled + CUDA graph", "tokens_per_s": 829.2,
             "speedup": 16.16, "prep_s": 44.9, "rel_err": 0.025, "top1_agreement": 0.92,
             "passed": True, "how": "gobrrr.LeanDecoder(model, mode='compile') # a < b"},
            {**base, "name": "int8 weight-only (torchao)", "tokens_per_s": 40.0,
             "speedup": 0.78, "prep_s": 2.0, "rel_err": 0.5, "top1_agreement": 0.5,
             "passed": False},
            {**base, "name": "static cache", "tokens_per_s": None, "speedup": None,
             "prep_s": None, "rel_err": None, "top1_agreement": None, "passed": None,
             "error": "not run: <no time> left"},
        ],
        "notes": ["verification: teacher-forced raw logits"],
    }


def test_the_generation_page_has_the_conclusion_every_candidate_and_the_code(tmp_path):
    from gobrrr.show.optimize_html import write_optimize

    html = write_optimize(generation_result(), tmp_path / "g.html").read_text()
    assert html.index("829.2 tokens/s, 16.16x") < html.index("int8 weight-only")
    for cell in ("829.2", "16.16x", "44.9 s", "92%", "2.5e-02", "verified",
                 "rejected: logits disagree", "not run: &lt;no time&gt; left"):
        assert f">{cell}</td>" in html, cell
    assert "LeanDecoder(model, mode=&#39;compile&#39;) # a &lt; b" in html  # the winner's code
    assert "hf:&lt;b&gt;gpt2&lt;/b&gt;" in html and "<b>gpt2" not in html
    assert "<svg" in html  # the tokens/s bars: two candidates were measured
    assert html.count("<tr>") == 4
