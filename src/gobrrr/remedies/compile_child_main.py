"""The child of compile_child.py: build the workload from its target again, apply the
candidate's remedies to a copy, prepare and make the warm calls that compile it, print
the seconds as one JSON line. Its own module so that the search (runner.py), which
starts it, is not imported by what it starts.

With "measure" in its spec it also holds the eager reference (two calls before the
compile) and, after printing the seconds, waits on its standard input for the search's
turn: a line {"time_left_s": T} has it verify and A/B-time the candidate as the search
would (evaluate.py) and print {"result": the row}; end of input stops it there.

Pre-started (its spec's "remedies" null: compile_child.prestart_child), it builds the
workload while the search diagnoses, then waits for a first line {"remedies": [...]}.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

__all__ = ["main"]


class Stopped(Exception):
    """The search closed the child's input: it ends without output."""


def _built(spec: dict[str, Any]) -> tuple[Any, list[Any], Any, Any]:
    """In the child: the workload built from its target, the candidate's remedies, the
    primed base copy and the remedies' context, as the search has them. A pre-started
    child (its spec's remedies None) builds the workload, then reads them from its first
    input line, and only then copies and primes it: nothing runs on the device while
    the search's diagnosis times the workload, beyond the build."""
    from gobrrr.models import ModelOptions
    from gobrrr.remedies import catalog
    from gobrrr.remedies.runner import base_copy, context_of, prime
    from gobrrr.targets import load_target

    opts = ModelOptions(**spec["options"]) if spec.get("options") else None
    w = load_target(spec["target"], spec["device"], spec["batch_size"], opts)
    names = spec.get("remedies")
    if names is None:
        line = sys.stdin.readline()
        if not line.strip():
            raise Stopped
        names = json.loads(line)["remedies"]
    by_name = {s.name: s for s in catalog.select(None)}
    specs = [by_name[n] for n in names]
    base, independent = base_copy(w, [])
    zero_calls = prime(base, w)
    return w, specs, base, context_of(w, None, base, independent, zero_calls, "inductor")


def _child(spec: dict[str, Any]) -> float:
    """In the child: build, copy, prime, apply, prepare and warm; the seconds of the
    last three (what the search calls compile_s)."""
    from gobrrr.remedies.base import Candidate
    from gobrrr.remedies.evaluate import warm_up
    from gobrrr.state import copy_workload
    from gobrrr.timing import device_sync

    _, specs, base, ctx = _built(spec)
    c = copy_workload(base.fn, base.args, base.kwargs)
    cand = Candidate(c.fn, c.args, c.kwargs, c.modules, c.optimizers, c.tensors)
    t0 = time.perf_counter()
    for s in sorted(specs, key=lambda s: s.stage):
        cand = s.apply(cand, ctx)
    warm_up(cand, device_sync(ctx.device), float("inf"), t0)
    return time.perf_counter() - t0


def _measure(spec: dict[str, Any]) -> dict[str, Any]:
    """In the child: the candidate through evaluate(), held after its compile (module
    docstring); the row (Stopped where the search closed its input)."""
    from gobrrr.remedies.evaluate import evaluate, make_reference

    w, specs, base, ctx = _built(spec)
    ref = make_reference(base, w.device)

    def hold(compile_s: float) -> float:
        print(json.dumps({"compile_s": compile_s}), flush=True)
        order = sys.stdin.readline()
        if not order.strip():
            raise Stopped
        return time.perf_counter() + float(json.loads(order)["time_left_s"])

    got, _ = evaluate(specs, base, ref, ctx, float(spec["ab_budget_s"]), hold=hold)
    return got.to_dict()


def main(argv: list[str]) -> int:
    try:
        spec = json.loads(argv[0])
        if spec.get("measure"):
            print(json.dumps({"result": _measure(spec)}), flush=True)
            return 0
        print(json.dumps({"compile_s": _child(spec)}), flush=True)
        return 0
    except Stopped:
        return 0
    except Exception as exc:  # noqa: BLE001 - the parent reads the reason
        print(json.dumps({"error": f"{type(exc).__name__}: {str(exc)[:240]}"}), flush=True)
        return 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
