"""`gobrrr optimize [TARGET]`: apply the essay's remedies to copies, verify, rank."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from gobrrr.cli.common import BATCH, TARGET_HELP, FiniteFloat, load_announced, model_options

if TYPE_CHECKING:
    from gobrrr.models import ModelOptions
    from gobrrr.remedies.compile_child import ChildRun

__all__ = ["register"]

_HELP = f"""Apply the essay's remedies to a copy of a workload, verify outputs and speed,
and rank them: inference mode, TF32, bf16 (autocast, or the model cast), cuDNN
benchmark, channels_last, fused optimizers, set_to_none, CUDA graphs, torch.compile
(its modes, Inductor freezing), SDPA, batch size (advice).

{TARGET_HELP}"""


@click.command(help=_HELP)
@click.argument("target", required=False)
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto",
              show_default=True)
@click.option("--batch-size", type=BATCH, default=None,
              help="Batch size for a factory target (default: its own default).")
@model_options
@click.option("--budget-s", type=FiniteFloat(min=1), default=120.0, show_default=True,
              help="Seconds for the whole run of remedies from the command's start, the "
                   "workload's build and the diagnosis included (it gets a quarter of "
                   "what the build leaves): a candidate starts only when its estimated "
                   "cost fits, one still timing at the deadline is abandoned; the command "
                   "ends within about 1.15x this + 10 s (the compile with the largest "
                   "predicted gain may run into that 15%). A limit on the run, not the "
                   "sampling time per measurement (that is doctor's --time-budget).")
@click.option("--only", "only", multiple=True,
              help="Remedies or families to try, e.g. --only compile,tf32 (repeatable).")
@click.option("--no-diagnose", is_flag=True,
              help="Skip diagnose: faster, but no predicted speedups.")
@click.option("--generate", "generate", type=click.IntRange(min=2), default=None,
              metavar="N",
              help="An hf: causal LM's greedy generation of N new tokens: the generation "
                   "remedies (static cache, bf16 weights) on copies, verified by "
                   "teacher-forced logits, timed in tokens/s (docs/generation.md).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON on stdout.")
@click.option("--html", "html_path", type=click.Path(dir_okay=False, path_type=Path),
              default=None,
              metavar="FILE", help="Also write a self-contained HTML page here.")
@click.option("-q", "--quiet", is_flag=True, help="No progress output.")
@click.option("--nproc-per-node", "nproc", type=click.IntRange(min=1), default=None,
              help="Run under torchrun with N processes (python -m torch.distributed.run "
                   "--standalone): the same as torchrun --nproc-per-node N -m gobrrr "
                   "optimize ... The distributed remedies (DDP buckets, bucket views, "
                   "static graph, bf16 gradient compression; FSDP2 resharding and "
                   "prefetch) run on every rank in lockstep.")
@click.option("--dist-timeout", "dist_timeout_s", type=FiniteFloat(min=1), default=None,
              help="Under torchrun: seconds before any collective gobrrr issues times out "
                   "[default: GOBRRR_DIST_TIMEOUT_S, else 60].")
def optimize(target: str | None, device: str, batch_size: int | None, seq_len: int | None,
             image_size: int | None, dtype: str | None, train: bool, budget_s: float,
             only: tuple[str, ...], no_diagnose: bool, as_json: bool, html_path: Path | None,
             quiet: bool, nproc: int | None = None,
             dist_timeout_s: float | None = None, generate: int | None = None) -> None:
    """Apply remedies to a copy of a workload, verify, rank (help: _HELP)."""
    # --budget-s counts from here: torch's import and the target's build (18-21 s of 60
    # for BERT-base built on an H200, issue 24) come before the run and are part of it
    started_s = time.perf_counter()
    from gobrrr.cli.common import (
        INTERRUPTED_EXIT,
        check_writable,
        deliver,
        progress_printer,
        relaunch_under_torchrun,
        resolve_device,
        results_only_on_stdout,
        run_guarded,
        show_notes,
        shower,
    )
    from gobrrr.dist.lockstep import World
    from gobrrr.errors import WARNING

    if nproc is not None:
        relaunch_under_torchrun(nproc, target, "optimize")
    world = run_guarded(World.from_env)
    rank = world.rank if world is not None else 0
    distributed = world is not None and world.size > 1

    def body() -> None:
        from gobrrr.models import ModelOptions
        from gobrrr.remedies.compile_child import early_child, reload_spec
        from gobrrr.remedies.verify import AB_BUDGET_S

        opts = ModelOptions(seq_len, image_size, dtype, train)
        # the background compile's child first, before this process imports torch: it
        # imports and builds the workload beside this process (a training step's then
        # compiles its guess at once: remedies/speculation.py)
        early = None if distributed or generate is not None else early_child(
            reload_spec(target, device, batch_size, opts), device, list(only) or None,
            AB_BUDGET_S)
        try:
            run_body(early, opts)
        finally:
            if early is not None:
                early.stop()

    def run_body(early: ChildRun | None, opts: ModelOptions) -> None:
        from gobrrr.api import optimize_workload
        from gobrrr.remedies import catalog
        from gobrrr.remedies.compile_child import reload_spec
        from gobrrr.remedies.runner import INTERRUPTED, wants_child

        if not distributed:
            catalog.select(list(only))  # unknown names: one line, exit 2, before any work
        check_writable(html_path)
        dev = resolve_device(device)
        if early is not None and not wants_child(dev, list(only) or None):
            early.stop()  # not CUDA after all, or nothing selected compiles
            early = None
        say = progress_printer(quiet or rank != 0)  # one rank speaks
        if generate is not None:
            _generation(target, dev, batch_size, opts, generate, budget_s, started_s, as_json,
                        html_path, only, distributed, say)
            return
        if world is not None and distributed:
            res = _distributed(world, target, dev, batch_size, opts, budget_s, only,
                               no_diagnose, dist_timeout_s, say)
            if res is None:  # not rank 0: rank 0 alone writes the result
                return
        else:
            w = load_announced(target, dev, batch_size, opts, say)
            # a compile probe can then run in a child process, stopped at the deadline
            w.reload = reload_spec(target, dev, batch_size, opts)
            res = optimize_workload(w, diagnose=not no_diagnose, budget_s=budget_s,
                                    only=list(only) or None, started_s=started_s,
                                    progress=say, prestarted=early)
            if world is not None:  # torchrun with one process
                res.notes.append("torchrun world of 1 process: the single-process "
                                 "optimize (no communication to change)")
        # warnings on stderr also with -q; the other notes are in the table and JSON
        show_notes([n for n in res.notes if n.startswith(WARNING)], say, quiet)
        writes = []
        if html_path:
            from gobrrr.show.optimize_html import write_optimize

            writes.append((html_path, lambda p: write_optimize(res.to_dict(), p)))

        from gobrrr.show.terminal import print_optimize

        deliver(writes, shower(as_json, res.to_dict, lambda: print_optimize(res)), say)
        if any(n.startswith(INTERRUPTED) for n in res.notes):
            raise SystemExit(INTERRUPTED_EXIT)  # what was measured is above

    if distributed:
        from gobrrr.dist.launch import run_rank

        with results_only_on_stdout(as_json):
            run_guarded(lambda: run_rank(body, rank))
    else:
        with results_only_on_stdout(as_json):
            run_guarded(body)


def _generation(target: str | None, dev: str, batch_size: int | None, opts: Any,
                new_tokens: int, budget_s: float, started_s: float, as_json: bool,
                html_path: Path | None,
                only: tuple[str, ...], distributed: bool, say: Callable[[str], None]
                ) -> None:
    """`optimize hf:NAME --generate N` (generation_optimize.py)."""
    from gobrrr.cli.common import deliver, shower
    from gobrrr.errors import UserError
    from gobrrr.generation_optimize import optimize_generation
    from gobrrr.models import load_generation
    from gobrrr.show.terminal import print_generation_optimize

    if distributed:
        raise UserError("--generate runs in one process, not under torchrun")
    if only:
        raise UserError("--generate tries its own remedies: --only does not apply")
    if target is None:
        raise UserError("--generate needs an hf: causal LM target (e.g. hf:gpt2)")
    say(f"building {target} for generation on {dev}")
    g = load_generation(target, dev, batch_size, opts)
    res = optimize_generation(g.model, g.input_ids, new_tokens, name=target,
                              budget_s=budget_s, progress=say, started_s=started_s).to_dict()
    writes = []
    if html_path:
        from gobrrr.show.optimize_html import write_optimize

        writes.append((html_path, lambda p: write_optimize(res, p)))
    deliver(writes, shower(as_json, lambda: res, lambda: print_generation_optimize(res)),
            say)


def _distributed(world: Any, target: str | None, dev: str, batch_size: int | None,
                 opts: Any, budget_s: float, only: tuple[str, ...], no_diagnose: bool,
                 dist_timeout_s: float | None, say: Callable[[str], None]) -> Any:
    """The lockstep search on this rank (gobrrr.dist.optimize): the OptimizeResult on
    rank 0, None on the others."""
    from gobrrr.dist.lockstep import timeout_from_env
    from gobrrr.dist.optimize import DistOptimizeOptions, optimize_distributed
    from gobrrr.targets import load_target

    timeout_s = dist_timeout_s if dist_timeout_s is not None else timeout_from_env()
    return optimize_distributed(
        world, target, dev, lambda: load_target(target, dev, batch_size, opts),
        DistOptimizeOptions(budget_s=budget_s, timeout_s=timeout_s,
                            diagnose=not no_diagnose, only=list(only) or None),
        progress=say)


def register(group: click.Group) -> None:
    group.add_command(optimize)
