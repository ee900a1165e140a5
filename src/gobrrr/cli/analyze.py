"""`gobrrr analyze TRACE`: the report of a torch.profiler trace recorded elsewhere."""

from __future__ import annotations

from pathlib import Path

import click

from gobrrr.cli.common import FiniteFloat

__all__ = ["register"]


@click.command()
@click.argument("traces", nargs=-1, required=True,
                type=click.Path(dir_okay=True, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON on stdout.")
@click.option("--html", "html_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write a self-contained HTML report here.")
@click.option("--check", "check_only", is_flag=True,
              help="Print only the trace's health check: what it holds and lacks (device "
                   "activity, shapes, kernel links, graphs, the steps found) and what each "
                   "gap costs the analysis.")
@click.option("--step-ms", "step_ms", type=FiniteFloat(min=0, min_open=True),
              metavar="MS",
              help="The step's time measured without the profiler, in ms (your loop's "
                   "1000 / it/s): T_wall becomes it, so overhead is read as the program "
                   "runs rather than as the profiler slowed its host; kernel and op times "
                   "still come from the trace. Several ranks' traces: every rank's.")
@click.option("-q", "--quiet", is_flag=True, help="No progress output.")
def analyze(traces: tuple[Path, ...], as_json: bool, quiet: bool,
            html_path: Path | None = None, check_only: bool = False,
            step_ms: float | None = None) -> None:
    """Split the time of a profiled workload into compute, memory and overhead, from a
    torch.profiler trace (Chrome JSON, .json or .json.gz) recorded anywhere.

    Any trace torch.profiler wrote (export_chrome_trace, tensorboard_trace_handler) is
    read. Steps are its ProfilerStep# ranges (a schedule with prof.step()), else found:
    a record_function range that repeats, else a repeated sequence of top-level calls,
    else one step without the profiler's start-up; the report says which rule. Record
    with record_shapes=True for FLOPs and bytes. Compiled code: Inductor's Triton
    kernels are ops of their own (a CPU trace records none of Inductor's C++ kernels:
    refused); kernels replayed by CUDA graphs are linked to the op around their launch,
    else listed by name. Several files are read as the ranks of one distributed job and
    merged, with communication as a fourth regime. The health check, printed first, says
    what the trace lacks and what that costs.

    T_wall is the traced steps' span, which carries the profiler's host cost: where the
    host bounds a step, overhead is an upper bound. Give --step-ms, the step time your
    loop logs unprofiled, to read it as the program runs.
    """
    from gobrrr.cli.common import (
        check_writable,
        deliver_report,
        progress_printer,
        run_guarded,
    )

    def body() -> None:
        from gobrrr.analyze import analyze as analyze_traces

        check_writable(html_path)
        say = progress_printer(quiet)
        report = analyze_traces(list(traces), progress=say,
                                step_s=None if step_ms is None else step_ms * 1e-3)
        check = report.workload.get("trace", {}).get("check", [])
        if check_only:
            from gobrrr.cli.common import emit_json
            from gobrrr.show.terminal import trace_check_lines

            if as_json:
                emit_json({"check": check})
            else:
                click.echo("\n".join(trace_check_lines(check)))
            return
        for note in report.notes:
            say(note)
        deliver_report(report.to_dict(), as_json=as_json, say=say, html_path=html_path)

    run_guarded(body)


def register(group: click.Group) -> None:
    group.add_command(analyze)
