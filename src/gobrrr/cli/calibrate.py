"""`gobrrr calibrate`: measure this machine's ceilings (cached); with --distributed, the
communication ceilings of a torchrun job (dist/ceilings.py)."""

from __future__ import annotations

import click

from gobrrr.cli.common import DEVICE, FiniteFloat

__all__ = ["register"]


@click.command()
@click.option("--device", type=DEVICE, default="auto", show_default=True)
@click.option("--force", is_flag=True, help="Re-measure even if a cached result exists.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON on stdout.")
@click.option("-q", "--quiet", is_flag=True, help="No progress output.")
@click.option("--distributed", is_flag=True,
              help="Communication ceilings: all-reduce, all-gather and reduce-scatter "
                   "bandwidth on every rank of a torchrun job (run under torchrun, or give "
                   "--nproc-per-node).")
@click.option("--nproc-per-node", type=click.IntRange(min=1), default=None,
              help="With --distributed outside torchrun: start N processes on this "
                   "machine through `python -m torch.distributed.run --standalone`.")
@click.option("--min-size", default="1KiB", show_default=True,
              help="--distributed: smallest collective size (e.g. 1KiB).")
@click.option("--max-size", default=None,
              help="--distributed: largest collective size, powers of 2 in between "
                   "(default 1GiB with NCCL, 64MiB with gloo on CPU).")
@click.option("--timeout-s", type=FiniteFloat(min=1), default=300.0,
              show_default=True,
              help="--distributed: timeout of every collective, so a lost rank ends the "
                   "job instead of hanging it.")
def calibrate(device: str, force: bool, as_json: bool, quiet: bool, distributed: bool,
              nproc_per_node: int | None, min_size: str, max_size: str | None,
              timeout_s: float) -> None:
    """Measure this machine's ceilings (matmul FLOP/s per dtype, bandwidth, per-op cost).

    With --distributed (under `torchrun --nproc-per-node N -m gobrrr calibrate
    --distributed`): the bus bandwidth of NCCL's (gloo's on CPU) collectives from 1 KiB up,
    cached per topology, beside the link's datasheet peak. Rank 0 prints.
    """

    from gobrrr.cli.common import (
        emit_json,
        finish_progress,
        progress_printer,
        resolve_device,
        run_guarded,
        stdout_guarded,
    )

    if distributed:
        run_guarded(lambda: _distributed(force, as_json, quiet, nproc_per_node, min_size,
                                         max_size, timeout_s))
        return
    if nproc_per_node is not None:
        run_guarded(_needs_distributed)

    def body() -> None:
        from gobrrr.hardware import calibrate as _calibrate
        from gobrrr.show.terminal import print_ceilings

        dev = resolve_device(device)
        progress = progress_printer(quiet)
        ceilings = _calibrate(dev, force=force, progress=progress)
        for note in ceilings.notes:
            progress(note)
        if as_json:
            emit_json(ceilings.to_dict())
        else:
            finish_progress()
            with stdout_guarded():
                print_ceilings(ceilings)

    run_guarded(body)


def _needs_distributed() -> None:
    from gobrrr.errors import UserError

    raise UserError("--nproc-per-node goes with --distributed")


def _distributed(force: bool, as_json: bool, quiet: bool, nproc_per_node: int | None,
                 min_size: str, max_size: str | None, timeout_s: float) -> None:
    import os

    from gobrrr.dist.ceilings import parse_size
    from gobrrr.errors import UserError

    lo = parse_size(min_size)
    hi = parse_size(max_size) if max_size is not None else None
    if "WORLD_SIZE" not in os.environ:
        if nproc_per_node is None:
            raise UserError("--distributed runs under torchrun: `torchrun --nproc-per-node N "
                            "-m gobrrr calibrate --distributed`, or add --nproc-per-node N")
        _launch(nproc_per_node, force, as_json, quiet, min_size, max_size, timeout_s)
        return
    local = os.environ.get("LOCAL_WORLD_SIZE", os.environ["WORLD_SIZE"])
    if nproc_per_node is not None and int(local) != nproc_per_node:
        raise UserError(f"--nproc-per-node {nproc_per_node} under torchrun, which started "
                        f"{local} per node: leave it out")
    _measure_on_ranks(force, as_json, quiet, lo, hi, timeout_s)


def _launch(nproc: int, force: bool, as_json: bool, quiet: bool, min_size: str,
            max_size: str | None, timeout_s: float) -> None:
    """Start the same command on `nproc` ranks through torch's own launcher and exit with
    its status (rank 0's output passes through); stopping this process stops them."""
    import sys

    from gobrrr.dist.launch import run_child

    args = [sys.executable, "-m", "torch.distributed.run", "--standalone",
            f"--nproc-per-node={nproc}", "-m", "gobrrr", "calibrate", "--distributed",
            "--min-size", min_size, "--timeout-s", str(timeout_s)]
    args += ["--max-size", max_size] if max_size is not None else []
    args += [flag for flag, on in (("--force", force), ("--json", as_json),
                                   ("-q", quiet)) if on]
    sys.exit(run_child(args))


def _measure_on_ranks(force: bool, as_json: bool, quiet: bool, lo: int, hi: int | None,
                      timeout_s: float) -> None:
    import torch.distributed as dist

    from gobrrr.cli.common import emit_json, finish_progress, progress_printer
    from gobrrr.dist.ceilings import (
        DEFAULT_MAX_BYTES_CPU,
        DEFAULT_MAX_BYTES_CUDA,
        calibrate_distributed,
        default_sizes,
        ensure_process_group,
    )

    created = ensure_process_group(timeout_s)
    try:
        rank0 = dist.get_rank() == 0
        say = progress_printer(quiet or not rank0)
        nccl = dist.get_backend() == "nccl"
        if hi is None:
            hi = DEFAULT_MAX_BYTES_CUDA if nccl else DEFAULT_MAX_BYTES_CPU
            if not nccl:
                say(f"{dist.get_backend()}: sizes up to {hi // 2**20} MiB by default "
                    "(--max-size for more)")
        ceil = calibrate_distributed(default_sizes(hi, lo), force=force, progress=say)
        if not rank0:
            return
        for note in ceil.notes:
            say(note)
        if as_json:
            emit_json(ceil.to_dict())
        else:
            from gobrrr.show.terminal import print_comm_ceilings

            finish_progress()
            print_comm_ceilings(ceil)
    finally:
        if created:
            dist.destroy_process_group()


def register(group: click.Group) -> None:
    group.add_command(calibrate)
