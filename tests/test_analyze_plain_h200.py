"""`gobrrr analyze` of traces recorded the simplest way on an H200, against doctor on the
same workloads (issue 23).

The traces (tests/data/traces/plain_h200/) are session 2026-12-04s's, recorded by
benchmarks/plain_traces_gpu.py's `record()`: a `with profile(activities=[CPU, CUDA],
record_shapes=True):` block around 4 calls, then `torch.cuda.synchronize()`, no schedule
and no `prof.step()`, after 3 warm-up calls outside the profiler; torch 2.11.0+cu130.
Doctor (`gobrrr.diagnose(fn, *args, time_budget_s=1.0, experiments=False)`, unprofiled)
ran on the same callables right after (benchmarks/results/h200/session-2026-12-04s/plain/
plain_traces.json): its figures are the ones below. The MLP is 4 x (Linear(512, 512),
GELU) at batch 1, no_grad; GPT-2 small is inference at 8 x 512; "@default" and
"@reduce-overhead" are `torch.compile`'s modes (the latter replays CUDA graphs, whose
kernels carry no op).

The host-bound traces whose traced span carries the profiler's own cost (the compiled
pointwise chain, the training step) need the step's unprofiled time (`--step-ms`) and are
not here; the 10-point criterion is the issue's.
"""

from pathlib import Path

import pytest

from gobrrr.analyze import analyze

DATA = Path(__file__).parent / "data" / "traces" / "plain_h200"

# trace: (doctor's regime, its overhead / memory / compute fractions)
DOCTOR = {
    "mlp_b1": ("overhead", (0.927, 0.073, 0.0)),
    "mlp_b1-default": ("overhead", (0.935, 0.065, 0.0)),
    "mlp_b1-reduce-overhead": ("overhead", (0.863, 0.137, 0.0)),
    "gpt2_8x512": ("compute", (0.042, 0.131, 0.827)),
    "gpt2_8x512-default": ("compute", (0.053, 0.031, 0.916)),
    "gpt2_8x512-reduce-overhead": ("compute", (0.041, 0.023, 0.936)),
}


@pytest.mark.parametrize("name", sorted(DOCTOR))
def test_a_plain_h200_trace_reads_as_doctor_measured(name, h200_calibration):
    r = analyze([DATA / f"{name}.json.gz"])
    regime, (overhead, memory, compute) = DOCTOR[name]
    assert r.regime == regime
    doctor = {"overhead": overhead, "memory": memory, "compute": compute}
    gap = max(abs(r.fractions.get(k, 0.0) - v) for k, v in doctor.items())
    assert gap <= 0.10, (name, r.fractions)  # the 10 points
    trace = r.workload["trace"]
    assert trace["step_rule"] == "repeated calls"  # nobody marked the steps


def test_graph_replayed_kernels_are_counted_and_the_check_says_so(h200_calibration):
    r = analyze([DATA / "mlp_b1-reduce-overhead.json.gz"])
    check = {c["item"]: c for c in r.workload["trace"]["check"]}
    # 4 replays of the graph, one per call: 8 kernels each (4 GEMMs, 4 GELUs)
    assert check["graphs and compiled code"]["detail"].startswith("4 CUDA graph launch(es)")
    assert check["kernel links"]["detail"].startswith("8 kernel(s) per step")
    assert r.budget.busy_s > 0  # the replayed kernels are the step's device time
