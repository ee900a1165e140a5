"""`gobrrr doctor [TARGET]`: diagnose a workload."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from gobrrr.cli.common import BATCH, TARGET_HELP, FiniteFloat, load_announced, model_options

__all__ = ["register"]


_HELP = f"Split a workload's time into compute, memory and overhead.\n\n{TARGET_HELP}"


@click.command(help=_HELP)
@click.argument("target", required=False)
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto",
              show_default=True)
@click.option("--batch-size", type=BATCH, default=None,
              help="Batch size for a factory target (default: its own default).")
@model_options
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON on stdout.")
@click.option("--no-experiments", is_flag=True, help="Skip batch scaling and graph replay.")
@click.option("--time-budget", "time_budget_s", type=FiniteFloat(min=0.05), default=2.0,
              show_default=True,
              help="Sampling seconds per measurement (warm-up included, the first call "
                   "not); a call longer than this is made 3 times. Per measurement, not "
                   "a limit on the whole run (that is optimize's --budget-s).")
@click.option("--repeat", type=click.IntRange(min=1, max=100), default=1, show_default=True,
              metavar="N",
              help="Also time the workload in N - 1 fresh processes (the same command, "
                   "without experiments) and keep every run's T_wall (timing.runs_s): what "
                   "`gobrrr compare` needs to gate on time, since one process's samples "
                   "cannot show the shifts between processes.")
@click.option("--html", "html_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write a self-contained HTML report here.")
@click.option("--trace", "trace_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write a Chrome/Perfetto trace of the profiled run here.")
@click.option("--generate", "generate", type=click.IntRange(min=2), default=None,
              metavar="N",
              help="An hf: causal LM's greedy generation of N new tokens after a "
                   "--seq-len prompt (default batch 1): prefill and decode apart, decode "
                   "against its bandwidth bound (docs/generation.md).")
@click.option("-q", "--quiet", is_flag=True, help="No progress output.")
@click.option("--nproc-per-node", "nproc", type=click.IntRange(min=1), default=None,
              help="Run this diagnosis under torchrun with N processes (python -m "
                   "torch.distributed.run --standalone): the same as torchrun "
                   "--nproc-per-node N -m gobrrr doctor ...")
@click.option("--dist-timeout", "dist_timeout_s", type=FiniteFloat(min=1), default=None,
              help="Under torchrun: seconds before any collective gobrrr issues (and the "
                   "default process group gobrrr creates) times out [default: "
                   "GOBRRR_DIST_TIMEOUT_S, else 60].")
@click.option("--rank-traces", "rank_traces", type=click.Path(file_okay=False,
                                                               path_type=Path),
              help="Under torchrun: keep each rank's profiled trace here (rankN.json).")
@click.option("--inter-node-gbps", "inter_node_gbps", type=FiniteFloat(min=0, min_open=True),
              default=None,
              help="Under torchrun: the projection's inter-node bandwidth per node and "
                   "direction, in Gb/s [default: 8 x 400 Gb/s InfiniBand NDR = 3200].")
def doctor(target: str | None, device: str, batch_size: int | None, seq_len: int | None,
           image_size: int | None, dtype: str | None, train: bool, as_json: bool,
           no_experiments: bool, time_budget_s: float, quiet: bool, repeat: int = 1,
           html_path: Path | None = None, trace_path: Path | None = None,
           generate: int | None = None, nproc: int | None = None,
           dist_timeout_s: float | None = None,
           rank_traces: Path | None = None, inter_node_gbps: float | None = None) -> None:
    """Split a workload's time into compute, memory and overhead (help: _HELP)."""
    from gobrrr.cli.common import (
        check_writable,
        deliver_report,
        progress_printer,
        relaunch_under_torchrun,
        resolve_device,
        results_only_on_stdout,
        run_guarded,
        show_notes,
    )
    from gobrrr.dist.lockstep import World
    from gobrrr.errors import UserError

    if nproc is not None:
        relaunch_under_torchrun(nproc, target, "doctor")
    world = run_guarded(World.from_env)
    rank = world.rank if world is not None else 0

    def body() -> None:
        from gobrrr.api import diagnose_workload
        from gobrrr.models import ModelOptions

        check_writable(html_path, trace_path)
        dev = resolve_device(device)
        say = progress_printer(quiet or rank != 0)  # one rank speaks
        opts = ModelOptions(seq_len, image_size, dtype, train)
        if repeat > 1 and (generate is not None or (world is not None and world.size > 1)
                           or target is None):
            raise UserError("--repeat reruns a named target in one process each: not "
                            "with --generate, under torchrun or without a TARGET")
        if generate is not None:
            if world is not None and world.size > 1:
                raise UserError("--generate runs in one process, not under torchrun")
            report = _generation(target, dev, batch_size, opts, generate, say,
                                 experiments=not no_experiments)
        elif world is not None and world.size > 1:
            report = _distributed(world, target, dev, batch_size, opts, no_experiments,
                                  time_budget_s, dist_timeout_s, rank_traces, say,
                                  inter_node_gbps)
            if world.rank != 0:  # rank 0 alone writes the (merged) report
                return
        else:
            w = load_announced(target, dev, batch_size, opts, say)
            report = diagnose_workload(w, experiments=not no_experiments,
                                       time_budget_s=time_budget_s, progress=say)
            if repeat > 1:
                _rerun(report, repeat, target, dev, batch_size, opts, time_budget_s, say)
            if world is not None:  # torchrun with one process
                report.notes.append("torchrun world of 1 process: the single-process "
                                    "diagnosis (no communication to measure)")
        # diagnose_workload records name, description, device and batch; a model
        # target's details (library, config, dtype, mode) come from the Workload itself
        show_notes(report.notes, say, quiet)
        # what every output renders: the JSON, page, trace, terminal
        deliver_report(report.to_dict(), as_json=as_json, say=say, html_path=html_path,
                       trace_path=trace_path)

    if world is not None and world.size > 1:
        from gobrrr.dist.launch import run_rank

        with results_only_on_stdout(as_json):
            run_guarded(lambda: run_rank(body, rank))
    else:
        with results_only_on_stdout(as_json):
            run_guarded(body)


def _generation(target: str | None, dev: str, batch_size: int | None, opts: Any,
                new_tokens: int, say: Callable[[str], None], *,
                experiments: bool = True) -> Any:
    """`doctor hf:NAME --generate N`: the generation source (generation_run.py)."""
    from gobrrr.errors import UserError
    from gobrrr.generation_run import diagnose_generation
    from gobrrr.models import load_generation

    if target is None:
        raise UserError("--generate needs an hf: causal LM target (e.g. hf:gpt2)")
    say(f"building {target} for generation on {dev}")
    g = load_generation(target, dev, batch_size, opts)
    return diagnose_generation(g.model, g.input_ids, new_tokens, name=target,
                               details=g.details, description=g.description, progress=say,
                               experiments=experiments)


def _distributed(world: Any, target: str | None, dev: str, batch_size: int | None,
                 opts: Any, no_experiments: bool, time_budget_s: float,
                 dist_timeout_s: float | None, rank_traces: Path | None,
                 say: Callable[[str], None], inter_node_gbps: float | None = None) -> Any:
    """The lockstep diagnosis on this rank (gobrrr.dist.diagnose): the merged Report on
    rank 0, each other rank's own."""
    from gobrrr.dist.diagnose import DistOptions, diagnose_distributed
    from gobrrr.dist.lockstep import timeout_from_env
    from gobrrr.targets import load_target

    timeout_s = dist_timeout_s if dist_timeout_s is not None else timeout_from_env()
    return diagnose_distributed(
        world, target, dev, lambda: load_target(target, dev, batch_size, opts),
        DistOptions(time_budget_s=time_budget_s, timeout_s=timeout_s,
                    experiments=not no_experiments, trace_dir=rank_traces,
                    inter_node_gbps=inter_node_gbps),
        progress=say)


def register(group: click.Group) -> None:
    group.add_command(doctor)


def _rerun(report: Any, repeat: int, target: str | None, device: str,
           batch_size: int | None, opts: Any, time_budget_s: float, say: Any) -> None:
    """`--repeat`: T_wall of the same command in repeat - 1 fresh processes
    (gobrrr.repeat), kept beside this run's in timing.runs_s, with a note."""
    from dataclasses import replace

    from gobrrr.repeat import child_walls
    from gobrrr.units import fmt_s

    args = [str(target), "--device", device, "--time-budget", str(time_budget_s)]
    for flag, value in (("--batch-size", batch_size), ("--seq-len", opts.seq_len),
                        ("--image-size", opts.image_size), ("--dtype", opts.dtype)):
        if value is not None:
            args += [flag, str(value)]
    if opts.train:
        args.append("--train")
    walls = [report.timing.median_s, *child_walls(args, repeat - 1, say)]
    report.timing = replace(report.timing, runs_s=tuple(walls))
    report.notes.append(f"T_wall in {repeat} processes (this one, then {repeat - 1} fresh "
                        f"ones): {fmt_s(min(walls))} to {fmt_s(max(walls))} (spread "
                        f"{100 * (max(walls) / min(walls) - 1):.1f}% of the lowest); the "
                        "report's other figures are this process's")
