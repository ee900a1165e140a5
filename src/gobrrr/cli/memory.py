"""`gobrrr memory [TARGET]`: what uses the memory of one step (gobrrr/memory.py)."""

from __future__ import annotations

from typing import Any

import click

from gobrrr.cli.common import BATCH, TARGET_HELP, model_options

__all__ = ["register"]

_HELP = f"""What uses the memory of one step: its peak bytes of live tensors and, at the
peak, parameters, gradients, optimizer state, activations and temporaries, and each
module's activations (torch's MemTracker over one call after a warm one; on CUDA beside
the allocator's peak); with --fit, the batch that fits; with --fit-seq-len (an hf:
sequence model), the longest sequence that fits; with --fit --throughput, the step's
samples/s at doubling batches up to the batch that fits; with --remedies, what the memory
buys: activation checkpointing per block (full and selective), zero_grad(set_to_none),
a fused optimizer, bf16, expandable segments, each on a copy, verified, its peak and
step time against the plain step's.

{TARGET_HELP}"""


@click.command(help=_HELP)
@click.argument("target", required=False)
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto",
              show_default=True)
@click.option("--batch-size", type=BATCH, default=None,
              help="Batch size for a factory target (default: its own default).")
@model_options
@click.option("--fit", is_flag=True,
              help="Also the batch that fits: the step at this batch and twice it, bytes "
                   "per sample, the largest batch predicted to fit the memory this "
                   "process can use (run to check it on CUDA).")
@click.option("--throughput", is_flag=True,
              help="With --fit: also the step's time and samples/s at this batch and at "
                   "doubling batches up to the batch that fits (each in a fresh process on "
                   "CUDA; a short ladder on CPU), the gain at the batch that fits and the "
                   "batch from which a doubling buys under 10% more samples/s.")
@click.option("--fit-seq-len", is_flag=True,
              help="Also the sequence length that fits (an hf: target): the step at "
                   "--seq-len, twice and four times it, a quadratic in the length, the "
                   "longest sequence predicted to fit (within the model's positions; run "
                   "to check it on CUDA).")
@click.option("--remedies", is_flag=True,
              help="Also the remedies that trade time for memory, each applied to a copy "
                   "of the workload, verified (outputs, parameter updates, gradients) and "
                   "measured: peak bytes and step time before and after.")
@click.option("--only", multiple=True,
              help="With --remedies: only these (comma-separated names, e.g. "
                   "checkpoint_blocks,checkpoint_blocks_selective).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON on stdout.")
@click.option("-q", "--quiet", is_flag=True, help="No progress output.")
def memory(target: str | None, device: str, batch_size: int | None, seq_len: int | None,
           image_size: int | None, dtype: str | None, train: bool, fit: bool,
           throughput: bool, fit_seq_len: bool, remedies: bool, only: tuple[str, ...],
           as_json: bool, quiet: bool) -> None:
    """What uses the memory of one step (help: _HELP)."""
    from gobrrr.cli.common import (
        deliver,
        load_announced,
        progress_printer,
        resolve_device,
        results_only_on_stdout,
        run_guarded,
        shower,
    )

    def body() -> None:
        from gobrrr.memory import measure_memory
        from gobrrr.models import ModelOptions
        from gobrrr.show.terminal import print_memory

        say = progress_printer(quiet)
        if throughput and not fit:
            from gobrrr.errors import UserError

            raise UserError("--throughput climbs to the batch that fits: give it with --fit "
                            "(gobrrr memory TARGET --fit --throughput)")
        if only:  # an unknown name fails before any measurement
            from gobrrr.memory_remedies import select

            select(list(only))
        if fit_seq_len and not (target or "").startswith("hf:"):
            from gobrrr.errors import UserError

            raise UserError("--fit-seq-len takes an hf: sequence model (e.g. hf:gpt2), "
                            f"not {target or 'the built-in example'}")
        opts = ModelOptions(seq_len, image_size, dtype, train)
        w = load_announced(target, resolve_device(device), batch_size, opts, say)
        if throughput and target:
            from gobrrr.remedies.compile_child import reload_spec

            # how a fresh process builds this target again at each batch of the ladder
            w.reload = reload_spec(target, w.device, batch_size, opts)
        say("one warm call, then one call with every tensor storage followed (MemTracker)")
        prof = measure_memory(w)
        d = {"schema": "gobrrr.memory", "workload": w.to_dict(), **prof.to_dict()}
        if fit:
            from gobrrr.memory_fit import child_probe, fit_batch

            # each checked batch in a fresh process (a target given by name can be
            # rebuilt there): what a batch that ran out of memory held goes with it
            words = [*(["--seq-len", str(seq_len)] if seq_len else []),
                     *(["--image-size", str(image_size)] if image_size else []),
                     *(["--dtype", dtype] if dtype else []), *(["--train"] if train else [])]
            probe = child_probe(target, w.device, words) if target else None
            fitted = fit_batch(w, probe=probe, progress=say)
            d["fit"] = fitted.to_dict()
            if throughput:
                from gobrrr.memory_throughput import throughput_ladder

                d["fit"]["throughput"] = throughput_ladder(w, fitted, progress=say).to_dict()
        if fit_seq_len:
            d["fit_seq_len"] = _fit_seq_len(target, w, batch_size, seq_len, image_size,
                                            dtype, train, say)
        if remedies or only:
            from gobrrr.memory_remedies import memory_remedies

            words = [*(["--batch-size", str(batch_size)] if batch_size else []),
                     *(["--seq-len", str(seq_len)] if seq_len else []),
                     *(["--image-size", str(image_size)] if image_size else []),
                     *(["--dtype", dtype] if dtype else []), *(["--train"] if train else [])]
            got = memory_remedies(w, only=list(only) or None, target=target,
                                  target_words=words, progress=say)
            d["remedies"] = [r.to_dict() for r in got.results]
            d["remedies_notes"] = got.notes
        deliver([], shower(as_json, lambda: d, lambda: print_memory(d)), say)

    with results_only_on_stdout(as_json):
        run_guarded(body)


def _fit_seq_len(target: str | None, w: Any, batch_size: int | None, seq_len: int | None,
                 image_size: int | None, dtype: str | None, train: bool,
                 say: Any) -> dict[str, Any]:
    """memory_seq.fit_seq_len on the target rebuilt at each length (in this process);
    its checks each in a fresh process."""
    from gobrrr.memory import measure_memory
    from gobrrr.memory_fit import child_probe
    from gobrrr.memory_seq import fit_seq_len
    from gobrrr.models import ModelOptions
    from gobrrr.targets import load_target

    assert target is not None
    model = w.details.get("model", {})
    base_len = int(model.get("seq_len") or seq_len or 0)
    max_pos = (model.get("config") or {}).get("max_position_embeddings")

    def measure_at(n: int) -> Any:
        return measure_memory(load_target(target, w.device, batch_size,
                                          ModelOptions(n, image_size, dtype, train)))

    words = [*(["--batch-size", str(batch_size)] if batch_size else []),
             *(["--dtype", dtype] if dtype else []), *(["--train"] if train else [])]
    probe = child_probe(target, w.device, words, size_flag="--seq-len")
    return fit_seq_len(measure_at, base_len, w.device, max_positions=max_pos, probe=probe,
                       progress=say).to_dict()


def register(group: click.Group) -> None:
    group.add_command(memory)
