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
Told to speculate as well (its spec's "speculate", and "only": the search's selection),
a training step's child does not wait: it compiles speculation.py's guess, says so first
({"speculating": [...]}), and reads the search's line after its compile. Its compile
line names what it compiled: {"compile_s": ..., "remedies": [...]}.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from typing import Any

__all__ = ["main"]

T0 = time.perf_counter()  # the child's start, near enough (its timeline counts from it)


class Stopped(Exception):
    """The search closed the child's input: it ends without output."""


def _order_waiting() -> bool:
    """A line from the search waits on the standard input (not yet read)."""
    import select

    try:
        return bool(select.select([sys.stdin], [], [], 0)[0])
    except (OSError, ValueError):  # not a pipe: nothing can be waiting
        return False


def _read_remedies() -> list[str]:
    """The search's {"remedies": [...]} line (Stopped at the end of the input)."""
    line = sys.stdin.readline()
    if not line.strip():
        raise Stopped
    return list(json.loads(line)["remedies"])


def _primed(w: Any) -> tuple[Any, Any]:
    """The primed base copy and the remedies' context, as the search has them."""
    from gobrrr.remedies.runner import base_copy, context_of, prime

    base, independent = base_copy(w, [])
    zero_calls = prime(base, w)
    return base, context_of(w, None, base, independent, zero_calls, "inductor")


@dataclass
class Built:
    w: Any
    specs: list[Any]
    base: Any
    ctx: Any
    # compiling its own guess (speculation.py): the search's order, sent meanwhile, is
    # read after the compile
    speculated: bool = False
    built_s: float = 0.0  # since the child's start: the workload built

    def compiled(self, compile_s: float) -> dict[str, Any]:
        """The compile line: its seconds, what it compiled, and when (since the child's
        start) the workload was built and the compile began."""
        from_s = time.perf_counter() - T0 - compile_s
        if self.speculated:
            _read_remedies()  # what the search asked: the line says what was compiled
        return {"compile_s": compile_s, "remedies": [s.name for s in self.specs],
                "built_s": self.built_s, "compile_from_s": from_s}


def _built(spec: dict[str, Any]) -> Built:
    """In the child: the workload built from its target, the candidate's remedies, the
    primed base copy and the remedies' context, as the search has them. A pre-started
    child (its spec's remedies None) builds the workload, then reads them from its first
    input line, and only then copies and primes it: nothing runs on the device while
    the search's diagnosis times the workload, beyond the build. One told to speculate
    (its spec's "speculate"), of a workload with an optimizer, not yet told its
    remedies once built, primes and counts it and compiles the guess of speculation.py
    where there is one, announcing it in a line {"speculating": [...]}."""
    from gobrrr.models import ModelOptions
    from gobrrr.remedies import catalog
    from gobrrr.remedies.base import reached_facts
    from gobrrr.remedies.speculation import speculative_stack
    from gobrrr.targets import load_target

    opts = ModelOptions(**spec["options"]) if spec.get("options") else None
    w = load_target(spec["target"], spec["device"], spec["batch_size"], opts)
    built_s = time.perf_counter() - T0
    names = spec.get("remedies")
    primed: tuple[Any, Any] | None = None
    speculated = False
    if names is None and spec.get("speculate") and not _order_waiting() and \
            reached_facts(w)["optimizers"]:
        primed = _primed(w)
        guess = speculative_stack(catalog.select(spec.get("only")), primed[1])
        if guess and not _order_waiting():
            print(json.dumps({"speculating": guess}), flush=True)
            names, speculated = guess, True
    if names is None:
        names = _read_remedies()
    by_name = {s.name: s for s in catalog.select(None)}
    base, ctx = primed if primed is not None else _primed(w)
    return Built(w, [by_name[n] for n in names], base, ctx, speculated, built_s)


def _child(spec: dict[str, Any]) -> dict[str, Any]:
    """In the child: build, copy, prime, apply, prepare and warm; the compile line with
    the seconds of the last three (what the search calls compile_s)."""
    from gobrrr.remedies.base import Candidate
    from gobrrr.remedies.evaluate import warm_up
    from gobrrr.state import copy_workload
    from gobrrr.timing import device_sync

    b = _built(spec)
    c = copy_workload(b.base.fn, b.base.args, b.base.kwargs)
    cand = Candidate(c.fn, c.args, c.kwargs, c.modules, c.optimizers, c.tensors)
    t0 = time.perf_counter()
    for s in sorted(b.specs, key=lambda s: s.stage):
        cand = s.apply(cand, b.ctx)
    warm_up(cand, device_sync(b.ctx.device), float("inf"), t0)
    return b.compiled(time.perf_counter() - t0)


def _measure(spec: dict[str, Any]) -> dict[str, Any]:
    """In the child: the candidate through evaluate(), held after its compile (module
    docstring); the row (Stopped where the search closed its input)."""
    from gobrrr.remedies.evaluate import evaluate, make_reference

    b = _built(spec)
    ref = make_reference(b.base, b.w.device)

    def hold(compile_s: float) -> float:
        print(json.dumps(b.compiled(compile_s)), flush=True)
        order = sys.stdin.readline()
        if not order.strip():
            raise Stopped
        return time.perf_counter() + float(json.loads(order)["time_left_s"])

    got, _ = evaluate(b.specs, b.base, ref, b.ctx, float(spec["ab_budget_s"]), hold=hold)
    return got.to_dict()


def main(argv: list[str]) -> int:
    try:
        spec = json.loads(argv[0])
        if spec.get("measure"):
            print(json.dumps({"result": _measure(spec)}), flush=True)
            return 0
        print(json.dumps(_child(spec)), flush=True)
        return 0
    except Stopped:
        return 0
    except Exception as exc:  # noqa: BLE001 - the parent reads the reason
        print(json.dumps({"error": f"{type(exc).__name__}: {str(exc)[:240]}"}), flush=True)
        return 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
