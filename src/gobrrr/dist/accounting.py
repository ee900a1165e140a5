"""One rank's exposed communication per step, from its profiled window and the lockstep
timings: transfer, waiting for a late rank, and DDP's bucket copies. Pure functions:
traces and timings in, seconds out; every rank computes its own (the budget's fourth
part) and rank 0 the same for every rank (merge.py), from the one function here.

**Why the profiled window is not simply scaled.** The profiler (CPU ops with
record_shapes) slows the *CPU* side of a step: on two H200s the profiled DDP steps of
`examples:ddp_comm` took 11.7 ms against 6.9 ms timed. It does not slow what the GPU runs:
CUPTI timestamps kernels, and a kernel runs at the same speed whoever launched it (both
ranks ran 4.15 ms of compute kernels per profiled step; rank 0's 4.15 ms plus its
2.70 ms of exposed NCCL transfer is 6.85 ms, its unprofiled T_wall 6.91 ms). So:

- **Transfer** (CUDA) is GPU time: per collective, the fastest rank's duration (no
  waiting in it, comm.match_collectives), the part no compute kernel hides, summed over
  the window and divided by its steps: *kernel seconds per step*. Scaling it by
  T_wall / window (the earlier rule) shrank it by the CPU's slowdown, 1.7x on the
  H200s, which no kernel underwent. On CPU (gloo) the profiler slows gloo's threads and
  the step's ops alike: there the exposed time stays a share of the window times T_wall.
- **Waiting** is not GPU time: it is one rank's lateness, mostly CPU launch delay, which
  the profiler inflates (on the H200s each all-reduce started 300-450 us later on rank 1
  than on rank 0 in the profile; unprofiled the ranks' independent paces differ by
  0.41 ms per step). On CUDA, when the no_sync experiment ran (DDP), each rank's pace
  without communication was timed in lockstep, unprofiled: a rank waits, per step, for
  the slowest pace, `waiting_r = max_s(no_sync_s) - no_sync_r`. Otherwise (no DDP,
  FSDP, a custom step, `gobrrr analyze`) the profiled waiting is kept, with a note that
  it overstates lateness caused by CPU launch delays; of two or more profiled steps,
  the one that waited least (comm.least_step_waiting_us): a late peer is late in every
  step, the profiler's skew is not (two H200s, ResNet-50 under DDP: rank 1's three
  profiled steps waited 0, 18.2 and 30.8 ms, its unprofiled step 0.2 ms off rank 0's).
  Where every rank's trace gives its pace (`trace_paces`: per step, the larger of its
  host's own time, the step ranges less the calls that wait for the device, and its
  device's, the non-communication work plus the exposed transfer), a rank waits no
  longer than the slowest pace minus its own, as with the no_sync paces: a host-bound
  rank's collective kernel launched early spins while its GPU would be idle anyway (two
  H200s, examples:fsdp_comm: rank 0's all-gathers spun 37-42 ms in every profiled step,
  doctor's paces put its waiting at 1.09 ms). The waiting is the smaller of the two.
  On CPU (gloo) the profiler slows every thread
  of every rank alike, so the waiting, like the transfer, stays a share of the window
  times T_wall (and the no_sync paces of two ranks sharing 2 cores are too noisy to
  subtract). Both figures are reported.
- **CPU (gloo) with the no_sync experiment:** gloo's worker threads share the cores with
  the step's own ops, so communication costs the step ops slowed down as well as waits,
  and the slowed ops show in no interval of the trace: on the 2-core CI machine a
  `ddp_comm` step whose all-reduce dominated came out "overhead" by the trace (0.66,
  communication 0.18) when the machine was busy. There the communication part is the
  measured cost, this rank's sync step minus its no_sync step (as a share of T_wall)
  minus DDP's bucket copies, when it exceeds the trace's figure; the excess goes to
  transfer (gloo's work, not a late peer: waiting, which names stragglers, stays the
  trace's). `time_basis` says which.
- **DDP's bucket copies** (comm.BUCKET_COPY_RANGES): kernel seconds per step of the
  copies into the buckets (with the division by the world size) and back. They are
  memory work and stay in the memory part; they are what no_sync() removes besides the
  communication, so they explain part of the gap to the no_sync bound.

The parts of a rank's budget: communication = transfer + waiting; compute and memory
(the counted call's op times) are scaled down when the sum exceeds T_wall
(budget.with_communication), overhead is the rest.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from gobrrr.dist.comm import Matched, RankTrace, exposed_split_us, least_step_waiting_us
from gobrrr.dist.experiments import FSDP_METHOD
from gobrrr.intervals import total_us
from gobrrr.units import fmt_pct, fmt_s

__all__ = ["CommAccount", "account", "waiting_from_paces", "caused_waiting",
           "no_sync_comparison", "trace_pace", "trace_paces", "PROFILED_WAITING_NOTE",
           "TRACE_PACES"]

# waiting_source of the pace rule from the traces alone (module docstring)
TRACE_PACES = "the ranks' paces in the profiled steps"

PROFILED_WAITING_NOTE = (
    "waiting for a late rank comes from the profiled steps (no no_sync experiment to time "
    "each rank's own pace): it overstates lateness caused by CPU launch delays, which "
    "the profiler inflates")


@dataclass(frozen=True)
class CommAccount:
    """One rank's communication per step (seconds of one call of the workload)."""

    rank: int
    transfer_s: float  # exposed transfer (module docstring)
    waiting_s: float  # waiting used in the budget: the estimate, or the profiled one
    waiting_profiled_s: float  # exposed waiting in the profiled steps
    waiting_source: str  # "no_sync paces" or "profiled steps"
    communication_total_s: float  # every collective's time, hidden or not (profiled)
    ddp_bucket_copy_s: float  # DDP's bucket copies (memory work, not communication)
    time_basis: str  # "kernel seconds" (CUDA) or "share of the window x T_wall" (CPU)

    @property
    def communication_s(self) -> float:
        """Exposed communication: the budget's fourth part."""
        return self.transfer_s + self.waiting_s

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"communication_s": self.communication_s}


def waiting_from_paces(no_sync_s: Mapping[int, float]) -> dict[int, float]:
    """Each rank's waiting per step when every rank waits for the slowest pace: max over
    ranks of the no_sync step minus the rank's own (module docstring)."""
    slowest = max(no_sync_s.values())
    return {r: max(0.0, slowest - s) for r, s in no_sync_s.items()}


def trace_pace(trace: RankTrace, matched: Sequence[Matched]) -> float | None:
    """One rank's pace per step from its own trace (module docstring): the larger of its
    host's own time and its device's (non-communication work plus exposed transfer), in
    seconds; None unless the trace is a CUDA one that read its host time."""
    if trace.source != "cuda" or trace.host_us is None:
        return None
    transfer_us, _ = exposed_split_us(trace, matched)
    device_us = total_us(trace.compute) + transfer_us
    return max(float(trace.host_us), device_us) * 1e-6 / max(1, trace.steps)


def trace_paces(traces: Sequence[RankTrace], matched: Sequence[Matched]
                ) -> dict[int, float] | None:
    """Every rank's `trace_pace`; None unless every trace gives one."""
    paces = {t.rank: trace_pace(t, matched) for t in traces}
    if not traces or any(p is None for p in paces.values()):
        return None
    return {r: float(p) for r, p in paces.items() if p is not None}


def account(trace: RankTrace, matched: Sequence[Matched], wall_s: float,
            no_sync_s: Mapping[int, float] | None = None,
            bound_fraction: float | None = None,
            paces_s: Mapping[int, float] | None = None) -> CommAccount:
    """This rank's CommAccount. `no_sync_s`: every rank's step under no_sync() (lockstep,
    unprofiled), when the experiment ran on every rank; else None. `bound_fraction`:
    this rank's (sync - no_sync) / sync step, used on CPU (module docstring). `paces_s`:
    every rank's pace from its trace (trace_paces), where no no_sync paces are given."""
    transfer_us, _waiting_us = exposed_split_us(trace, matched)
    # The rest of the exposed communication is waiting: on CUDA the split's own waiting;
    # on CPU it also holds the step's thread blocked in c10d ops (handing work to gloo's
    # busy queue), which the collectives' intervals do not cover.
    waiting_us = max(0.0, trace.exposed_us - transfer_us)
    steps = max(1, trace.steps)
    if trace.source == "cuda":
        def per_step(us: float) -> float:
            return us * 1e-6 / steps
        basis = "kernel seconds"
    else:
        def per_step(us: float) -> float:
            return wall_s * us / trace.window_us if trace.window_us > 0 else 0.0
        basis = "share of the window x T_wall"
    waiting_profiled = per_step(waiting_us)
    least_us = least_step_waiting_us(trace, matched) if trace.source == "cuda" else None
    if trace.source == "cuda" and no_sync_s and trace.rank in no_sync_s:
        waiting, source = waiting_from_paces(no_sync_s)[trace.rank], "no_sync paces"
    else:
        # the least of the estimates; on a tie the earlier (the profiled steps' own)
        found = [(waiting_profiled, "profiled steps")]
        if least_us is not None:
            found.append((least_us * 1e-6, "the least of the profiled steps"))
        if trace.source == "cuda" and paces_s and trace.rank in paces_s:
            found.append((waiting_from_paces(paces_s)[trace.rank], TRACE_PACES))
        waiting, source = min(found, key=lambda f: f[0])
    transfer = per_step(transfer_us)
    copies = per_step(trace.bucket_copy_us)
    if trace.source != "cuda" and bound_fraction is not None:
        # CPU: what communication costs the step beyond DDP's bucket copies (memory work,
        # counted as ops): sync - no_sync - copies, when that is more than the trace
        # shows. gloo's threads share the cores with the step's ops, so much of the cost
        # is ops slowed down, which no interval of the trace marks (module docstring).
        measured = bound_fraction * wall_s - copies
        if measured > transfer + waiting:
            # the excess is gloo's work (slowing the ops it shares cores with), not a
            # late peer: it goes to transfer; waiting, which names stragglers, stays
            transfer = measured - waiting
            basis = "no_sync bound minus bucket copies (CPU: gloo shares the cores)"
    return CommAccount(trace.rank, transfer, waiting, waiting_profiled, source,
                       per_step(trace.comm_us), copies, basis)


def caused_waiting(matched: Sequence[Matched], accounts: Sequence[CommAccount],
                   no_sync_s: Mapping[int, float] | None = None) -> dict[int, float]:
    """Seconds per step that each rank makes its peers wait, summed over peers. Each
    peer's waiting (its account's, the estimate where there is one) is attributed to the
    late ranks in the shares the profiled collectives show (the late rank of each
    collective caused that collective's waiting); a peer with estimated waiting but none
    in the profile owes it to the slowest no_sync pace."""
    caused = {a.rank: 0.0 for a in accounts}
    for a in accounts:
        by_late: dict[int, float] = {}
        for m in matched:
            if a.rank in m.dur_us and m.late_rank != a.rank:
                by_late[m.late_rank] = by_late.get(m.late_rank, 0.0) + m.waiting_us(a.rank)
        total = sum(by_late.values())
        if total > 0:
            for r, us in by_late.items():
                caused[r] = caused.get(r, 0.0) + a.waiting_s * us / total
        elif a.waiting_s > 0 and no_sync_s:
            slowest = max(no_sync_s, key=lambda r: no_sync_s[r])
            caused[slowest] = caused.get(slowest, 0.0) + a.waiting_s
    return caused


def no_sync_comparison(acc: Mapping[str, Any], no_sync: Mapping[str, Any] | None
                       ) -> dict[str, Any] | None:
    """gobrrr's exposed communication, the same plus DDP's bucket copies, and the no_sync
    bound, as shares of the sync step, with the sentence that explains the gap. `acc`:
    CommAccount.to_dict(); `no_sync`: experiments.NoSync.to_dict()."""
    if not no_sync or no_sync.get("bound_s") is None or not no_sync.get("sync_s"):
        return None
    sync_s = float(no_sync["sync_s"])
    comm = acc["communication_s"] / sync_s
    copies = acc["ddp_bucket_copy_s"] / sync_s
    bound = float(no_sync["bound_fraction"])
    gap = bound - (comm + copies)
    if no_sync.get("method") == FSDP_METHOD:
        why = (f"the bound is {fmt_pct(gap)} of the step above the trace's figure"
               if gap >= 0 else f"the trace's figure is {fmt_pct(-gap)} of the step above "
               "the bound (not strict here)") + (": keeping FSDP2's parameters unsharded "
               "also removes its buffer copies, the freeing and re-allocating of the "
               "unsharded parameters and the shards' optimizer update")
    elif abs(gap) <= 0.03:
        why = (f"DDP's bucket copies ({fmt_s(acc['ddp_bucket_copy_s'])} per step) explain "
               "the gap: no_sync() removes them too")
    elif gap > 0:
        why = (f"DDP's bucket copies ({fmt_s(acc['ddp_bucket_copy_s'])}) explain "
               f"{fmt_pct(copies)} of the step; the other {fmt_pct(gap)} no_sync() also "
               "removes: compute kernels slowed by sharing SMs and memory bandwidth with "
               "NCCL (gloo's threads sharing the cores on CPU)")
    else:
        why = (f"the trace's figure with the bucket copies is {fmt_pct(-gap)} of the step "
               "above the no_sync difference: removing GPU work from a step that the CPU "
               "(or a slower rank) paces shortens it by less than the work removed, so "
               "the bound is not strict here")
    return {"exposed_fraction": comm, "with_bucket_copies_fraction": comm + copies,
            "bound_fraction": bound, "gap_fraction": gap, "explanation": why}
