"""The optimize search's background child for the GPT-2 8x256 training step, started as
the CLI starts it (`compile_child.early_child`: confined to the cores the search leaves,
nice 10, told to speculate and to measure) but with no search beside it: its compile
time with the machine to itself (issue 24, GPU machine). Prints one JSON line: the
child's timeline (built, compile begun, answered) and compile seconds.

    python benchmarks/child_alone.py [--all-cores] [--no-measure]
"""

from __future__ import annotations

import argparse
import json
import time


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--all-cores", action="store_true",
                   help="every core at the normal priority, not the background's")
    p.add_argument("--no-measure", action="store_true",
                   help="a plain compile child (no eager reference held before it)")
    p.add_argument("--timeout-s", type=float, default=150.0)
    p.add_argument("--device", default="cuda")
    p.add_argument("--measure-s", type=float, default=0.0,
                   help="then have it verify and time its candidate, in this many seconds")
    a = p.parse_args()
    from gobrrr.models import ModelOptions
    from gobrrr.remedies.compile_child import background_cores, prestart_child, reload_spec

    reload = reload_spec("hf:gpt2", a.device, 8, ModelOptions(seq_len=256, train=True))
    cores = None if a.all_cores else background_cores()
    t0 = time.perf_counter()
    child = prestart_child(reload, cores, None if a.no_measure else 1.0, speculate=True)
    # a speculating child reads the search's order after its compile, before its compile
    # line: sent as soon as it says what it guessed, as the search's would be
    while not child.speculating and child.proc.poll() is None and \
            time.perf_counter() - t0 < a.timeout_s:
        time.sleep(0.1)
    if child.speculating:
        child.begin(list(child.speculating))
    got = child.wait(max(1.0, a.timeout_s - (time.perf_counter() - t0)))
    row = None
    if a.measure_s and got.run is not None:
        t1 = time.perf_counter()
        full = got.run.measure(a.measure_s) or {}
        row = {k: full.get(k) for k in ("status", "reason", "measured_speedup")}
        row["measure_wall_s"] = round(time.perf_counter() - t1, 2)
    print(json.dumps({"all_cores": a.all_cores, "measure": not a.no_measure,
                      "cores": len(cores) if cores else None,
                      "compile_s": got.compile_s, "timed_out": got.timed_out,
                      "error": got.error, "remedies": list(got.remedies),
                      "timeline": got.timeline, "speculating": list(child.speculating), "row": row,
                      "wall_s": round(time.perf_counter() - t0, 2)}), flush=True)
    child.stop()


if __name__ == "__main__":
    main()
