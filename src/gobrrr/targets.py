"""Target strings -> Workloads: what `gobrrr doctor TARGET` (and optimize, and every
rank under torchrun) runs. Above workload.py, models.py and both example registries.

  None or "examples:NAME"   a built-in workload (examples.py; the distributed ones,
                            which need torchrun, in dist/examples.py)
  "path/to/file.py:NAME"    NAME() -> (callable, args_tuple), or a factory
                            NAME(batch_size[, device]) -> (callable, args_tuple)
  "hf:NAME", "timm:NAME", "torchvision:NAME"
                            a library's model with random weights (models.py)
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import inspect
import sys
from pathlib import Path
from typing import Any

from gobrrr import examples, models
from gobrrr.dist import examples as dist_examples
from gobrrr.errors import UserError, WorkloadError
from gobrrr.examples import Example
from gobrrr.models import ModelOptions
from gobrrr.workload import Factory, Workload, call_factory

__all__ = ["load_target", "check_target", "example", "DEFAULT_EXAMPLE"]

DEFAULT_EXAMPLE = "mlp"


def example(name: str) -> Example:
    """A built-in example, single-process or distributed (ddp_*, fsdp_*: torchrun)."""
    if name in dist_examples.EXAMPLES:
        return dist_examples.EXAMPLES[name]
    if name not in examples.EXAMPLES:
        raise UserError(f"unknown example {name!r}; choose from "
                        f"{', '.join([*examples.EXAMPLES, *dist_examples.EXAMPLES])}")
    return examples.EXAMPLES[name]


def _default_batch(factory: Factory) -> int | None:
    params = list(inspect.signature(factory).parameters.values())
    positional = [p for p in params if p.name != "device"]
    if not positional:
        return None
    first = positional[0]
    return first.default if isinstance(first.default, int) else 1


def _load_module(path: Path) -> Any:
    # A name of its own per file (two train.py in different folders are two modules),
    # registered in sys.modules as an import would: torch.compile imports a function's
    # __module__ by name for some guards (under inference_mode it failed without it).
    digest = hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:8]
    name = f"_gobrrr_target_{path.stem}_{digest}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise UserError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(path.parent))
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[name]
        raise WorkloadError(f"importing {path}", exc) from exc
    finally:
        with contextlib.suppress(ValueError):
            sys.path.remove(str(path.parent))
    return module


def _check_signature(target: str, factory: Factory) -> list[inspect.Parameter]:
    """The factory's parameters but `device`, when gobrrr can call it: NAME(),
    NAME(batch_size) or NAME(batch_size, device=...), every other parameter with a
    default. Otherwise one line saying so: gobrrr's call failing inside the user's code
    read as the user's error ("the workload raised TypeError ... missing 2 required
    positional arguments")."""
    try:
        sig = inspect.signature(factory)
    except (TypeError, ValueError):  # a builtin without a signature: call it as it is
        return []
    params = [p for p in sig.parameters.values() if p.name != "device"]
    required = [p for p in params if p.default is inspect.Parameter.empty
                and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    bad = required[1:] + [p for p in required[:1] if p.kind is p.KEYWORD_ONLY]
    if bad:
        raise UserError(f"{target} takes {sig}: gobrrr calls NAME() or NAME(batch_size), "
                        f"with device= when it takes one; give "
                        f"{', '.join(p.name for p in bad)} a default, or wrap it in a "
                        "function of the batch size")
    return params


def check_target(target: str | None) -> None:
    """What can be checked of a target without running it, in one UserError line:
    before `--nproc-per-node` starts torchrun, whose ranks would each fail on it with
    torch's traceback and exit 1. A file must exist and compile; an example must exist;
    the rest is checked where the target loads."""
    if target is None or models.is_model_target(target):
        return
    if target.startswith("examples:"):
        example(target.split(":", 1)[1])
        return
    if ":" not in target:
        load_target(target, "cpu")  # raises its one line
    path = Path(target.rpartition(":")[0])
    if not path.is_file():
        raise UserError(f"no such file: {path}")
    try:
        compile(path.read_bytes(), str(path), "exec")
    except SyntaxError as exc:
        raise UserError(f"{path}:{exc.lineno}: {exc.msg} (a syntax error in the target's "
                        "file)") from None


def load_target(target: str | None, device: str, batch_size: int | None = None,
                model_options: ModelOptions | None = None) -> Workload:
    """Resolve a target string to a Workload on `device` (see module docstring).
    `model_options` (--seq-len, --image-size, --dtype, --train) are for model targets
    only; given with another target, they are a UserError."""
    if target is not None and models.is_model_target(target):
        return models.load(target, device, batch_size, model_options or models.ModelOptions())
    models.refuse_options(target, model_options)
    if target is None or target.startswith("examples:"):
        name = DEFAULT_EXAMPLE if target is None else target.split(":", 1)[1]
        ex = example(name)  # raises UserError for unknown names
        return call_factory(f"examples:{name}", ex.factory,
                             batch_size or ex.default_batch(device), device, ex.description)
    if ":" not in target:
        hint = (f"; for a script, name the function that builds the workload: "
                f"{target}:NAME" if target.endswith(".py") else "")
        raise UserError(f"target {target!r} must be FILE.py:NAME, examples:NAME, hf:NAME, "
                        f"timm:NAME or torchvision:NAME{hint}")
    file_part, _, attr = target.rpartition(":")
    path = Path(file_part)
    if not path.is_file():
        raise UserError(f"no such file: {file_part}")
    module = _load_module(path)
    if not hasattr(module, attr):
        raise UserError(f"{file_part} has no attribute {attr!r}")
    factory = getattr(module, attr)
    if not callable(factory):
        raise UserError(f"{target} is not callable")
    params = _check_signature(target, factory)
    if params:
        return call_factory(target, factory, batch_size or _default_batch(factory), device)
    if batch_size is not None:
        raise UserError(f"--batch-size given but {target} takes no batch_size argument")
    return call_factory(target, factory, None, device)
