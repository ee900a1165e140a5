"""Model-name targets: `hf:NAME`, `timm:NAME`, `torchvision:NAME` become Workloads.

The model is built with random weights (seeded, never downloaded: transformers from the
shipped configs of model_configs.py, timm with pretrained=False, torchvision with
weights=None), cast to --dtype, and run as one step: inference (forward in eval mode under
no_grad) or --train (forward, the model's loss, backward, AdamW step). Inputs are random
token ids in the vocabulary (--seq-len) or random images (--image-size), drawn from a
fixed-seed torch.Generator, never the global RNG.

The Workload's factory `(batch_size, device)` builds a new, independent model (the same
weights: same seed) with inputs of that batch size, so gobrrr's batch experiment doubles
the batch exactly and optimize's remedies change a model of their own.

transformers, timm and torchvision are an optional extra (`gobrrr[models]`) and are
imported here only when a target names them.
"""

from __future__ import annotations

import copy
import importlib
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gobrrr.errors import UserError
from gobrrr.model_configs import hf_config, known_hf_names
from gobrrr.workload import Workload

__all__ = ["ModelOptions", "PREFIXES", "DTYPES", "is_model_target", "refuse_options",
           "load"]

PREFIXES = ("hf:", "timm:", "torchvision:")
DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
PIP_EXTRA = "pip install 'gobrrr[models]'"
SEED = 0
LEARNING_RATE = 1e-4  # AdamW's; any value costs the same time
# Defaults per device, as examples.py has them. GPT-2 small's forward is ~2 x 124M FLOP
# per token: batch 1 x 128 tokens is ~32 GFLOP, a fraction of a second on a few CPU
# cores; batch 8 x 512 tokens is ~1 TFLOP, 28 ms in fp32 on an H200 (measured).
DEFAULT_BATCH = {"cpu": 1, "cuda": 8}
DEFAULT_VISION_BATCH = {"cpu": 1, "cuda": 32}
DEFAULT_SEQ_LEN = {"cpu": 128, "cuda": 512}
DEFAULT_IMAGE_SIZE = 224
ATTENTION = "sdpa"  # set explicitly: transformers' own default depends on its version


@dataclass(frozen=True)
class ModelOptions:
    """What the CLI's --seq-len, --image-size, --dtype and --train asked for."""

    seq_len: int | None = None
    image_size: int | None = None
    dtype: str | None = None  # a key of DTYPES; None is fp32
    train: bool = False

    def given(self) -> list[str]:
        flags = [("--seq-len", self.seq_len is not None),
                 ("--image-size", self.image_size is not None),
                 ("--dtype", self.dtype is not None), ("--train", self.train)]
        return [name for name, on in flags if on]

    @property
    def mode(self) -> str:
        return "train" if self.train else "inference"


@dataclass
class _Built:
    """One model on one device, ready to run: the step and its inputs."""

    step: Callable[..., Any]
    args: tuple[Any, ...]
    details: dict[str, Any] = field(default_factory=dict)
    description: str = ""


Builder = Callable[[int, str], _Built]  # (batch_size, device) -> a new model and inputs


def is_model_target(target: str) -> bool:
    return target.startswith(PREFIXES)


def refuse_options(target: str | None, options: ModelOptions | None) -> None:
    """Model options given with a target that builds its own model and inputs."""
    given = options.given() if options is not None else []
    if given:
        shown = target or "the default example"
        raise UserError(f"{', '.join(given)} applies to hf:, timm: and torchvision: targets "
                        f"only ({shown} builds its own model and inputs)")


def load(target: str, device: str, batch_size: int | None,
         options: ModelOptions) -> Workload:
    """The Workload for a model target on `device` (see the module docstring)."""
    prefix, _, name = target.partition(":")
    if not name:
        raise UserError(f"target {target!r} names no model (e.g. hf:gpt2, "
                        "torchvision:resnet50)")
    builder = {"hf": _hf_builder, "timm": _timm_builder,
               "torchvision": _torchvision_builder}[prefix]
    build = builder(name, device, options)  # checks options and name before any build

    def factory(batch_size: int, device: str = device) -> tuple[Callable[..., Any], tuple]:
        built = build(batch_size, device)
        return built.step, built.args

    defaults = DEFAULT_BATCH if prefix == "hf" else DEFAULT_VISION_BATCH
    batch = batch_size or defaults.get(device, 1)
    built = build(batch, device)
    return Workload(target, built.step, built.args, device=device, batch_size=batch,
                    factory=factory, description=built.description,
                    details={"model": built.details})


# ---------------------------------------------------------------- shared pieces


def _import(module: str, prefix: str) -> Any:
    """The library, or one line naming the extra that installs it."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name is None or exc.name.split(".")[0] == module:
            raise UserError(f"{prefix}NAME targets need {module}, which is not "
                            f"installed: {PIP_EXTRA}") from None
        broken: Exception = exc  # one of its own dependencies is missing
    except Exception as exc:  # installed but broken, e.g. built for another torch
        broken = exc
    first = str(broken).strip().splitlines()[0] if str(broken).strip() else ""
    raise UserError(f"{prefix}NAME targets need {module}, which is installed but did not "
                    f"import ({type(broken).__name__}: {first}); reinstall it for this "
                    f"torch: {PIP_EXTRA}")


def _torch_dtype(options: ModelOptions) -> Any:
    import torch

    return getattr(torch, DTYPES[options.dtype or "fp32"])


def _seeded_build(device: str, build: Callable[[], Any]) -> Any:
    """Build on `device` with weights drawn from seed 0, leaving the user's global RNG
    as it was (library initializers draw from it)."""
    import torch

    cuda = [torch.cuda.current_device()] if device == "cuda" else []
    with torch.random.fork_rng(devices=cuda):
        torch.random.default_generator.manual_seed(SEED)
        if cuda:
            torch.cuda.manual_seed(SEED)  # this device only, as fork_rng restores only it
        with torch.device(device):  # initialize in place: no CPU copy of a large model
            model = build()
        _redraw_zero_layers(model)
        return model


# Modules whose zero-initialized weights were drawn again, by model (for its details).
REDRAWN: weakref.WeakKeyDictionary[Any, list[str]] = weakref.WeakKeyDictionary()


def _redraw_zero_layers(model: Any) -> None:
    """Draw again, with the layer's own initializer, a Linear or convolution whose weight
    is all zeros: torchvision's ViT zero-initializes its classification head (trained
    from there, a fine choice), which left the untrained model's outputs all zeros; a
    remedy's outputs compared with zeros verify nothing (a bf16 ViT "verified" 9.19x on
    the H200 by 0 = 0). The weights are random anyway; they are now random everywhere."""
    import torch

    kinds = (torch.nn.Linear, torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d)
    names = []
    with torch.no_grad():
        for name, m in model.named_modules():
            w = getattr(m, "weight", None)
            if isinstance(m, kinds) and isinstance(w, torch.Tensor) and w.numel() \
                    and not w.any():
                m.reset_parameters()
                names.append(name)
    if names:
        REDRAWN[model] = names


def _finish(target: str, device: str, options: ModelOptions,
            build: Callable[[], Any]) -> Any:
    """The module, built and seeded, on `device` in the asked dtype and mode; a
    library's refusal (a size it does not take, out of memory) is one line."""
    try:
        model = _seeded_build(device, build)
        model = model.to(device=device, dtype=_torch_dtype(options))
    except UserError:
        raise
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise UserError(f"building {target} failed: {type(exc).__name__}: {first}") from None
    return model.train(options.train)


def _generator(device: str) -> Any:
    import torch

    return torch.Generator(device=device).manual_seed(SEED)


def _n_params(model: Any) -> int:
    return sum(p.numel() for p in model.parameters())


def _inference_step(model: Any, call: Callable[..., Any]) -> Callable[..., Any]:
    import torch

    def forward(*inputs: Any) -> Any:
        with torch.no_grad():
            return call(model, *inputs)

    return forward


def _train_step(model: Any, loss_of: Callable[..., Any]) -> Callable[..., Any]:
    import torch

    opt = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE)

    def step(*inputs: Any) -> Any:
        opt.zero_grad(set_to_none=True)
        loss = loss_of(model, *inputs)
        loss.backward()
        opt.step()
        return loss.detach()

    return step


def _details(library: Any, name: str, model: Any, options: ModelOptions,
             **extra: Any) -> dict[str, Any]:
    redrawn = REDRAWN.get(model)
    weights = f"random (seed {SEED}), not downloaded"
    if redrawn:
        weights += (f"; {', '.join(redrawn)} drawn again (the library initializes them to "
                    "zero: outputs of zeros would verify no remedy)")
    return {"library": library.__name__, "library_version": library.__version__,
            "name": name, "class": type(model).__name__, "parameters": _n_params(model),
            "weights": weights,
            "dtype": DTYPES[options.dtype or "fp32"], "mode": options.mode, **extra}


def _summary(model: Any, options: ModelOptions, *parts: str) -> str:
    n = _n_params(model)
    size = f"{n / 1e9:.2f}B" if n >= 1e9 else f"{n / 1e6:.1f}M"
    return ", ".join([f"{type(model).__name__} ({size} parameters, random weights)",
                      DTYPES[options.dtype or "fp32"], options.mode, *parts])


# ---------------------------------------------------------------- transformers


def _hf_logits(model: Any, ids: Any) -> Any:
    return model(input_ids=ids).logits


def _hf_loss(model: Any, ids: Any) -> Any:
    # labels = the inputs: a causal LM shifts them itself (next-token loss), a masked LM
    # scores every position; either way the model's own loss, as its training runs it.
    return model(input_ids=ids, labels=ids).loss


def _hf_sizes(config: Any, model_type: str) -> dict[str, Any]:
    hidden = config.hidden_size
    # GPT-2's MLP is 4 x hidden unless n_inner is set (GPT2MLP); others name it
    ffn = getattr(config, "intermediate_size", None) or getattr(config, "n_inner", None)
    if ffn is None and model_type == "gpt2":
        ffn = 4 * hidden
    sizes = {"num_hidden_layers": config.num_hidden_layers, "hidden_size": hidden,
             "num_attention_heads": config.num_attention_heads,
             "num_key_value_heads": getattr(config, "num_key_value_heads", None),
             "intermediate_size": ffn, "vocab_size": config.vocab_size,
             "max_position_embeddings": config.max_position_embeddings}
    return {k: v for k, v in sizes.items() if v is not None}


def _hf_from_config(auto_class: Any, config: Any, notes: list[str]) -> Any:
    """from_config with SDPA attention; a model or transformers version without SDPA
    for it (GPT-2 in transformers 4.40, for one) raises ValueError, and gets eager
    attention instead, with a note saying why."""
    try:
        return auto_class.from_config(config, attn_implementation=ATTENTION)
    except ValueError as exc:
        if "attn" not in str(exc).lower() and "sdpa" not in str(exc).lower():
            raise
        first = str(exc).strip().splitlines()[0].split(". ")[0]
        notes.append(f"eager attention: {ATTENTION} refused ({first})")
        return auto_class.from_config(config, attn_implementation="eager")


def _hf_setup(name: str, device: str, options: ModelOptions, *, use_cache: bool
              ) -> tuple[Any, Any, Any, int, Any]:
    """(transformers, the table entry, its config, the sequence length, the Auto class)
    for hf:NAME, every option checked before any build."""
    target = f"hf:{name}"
    if options.image_size is not None:
        raise UserError(f"--image-size is for timm: and torchvision: targets; {target} "
                        "takes --seq-len")
    entry = hf_config(name)
    if entry is None:
        raise UserError(f"{target} is not in gobrrr's table of configs and would need a "
                        "download from the Hugging Face Hub (gobrrr builds models offline "
                        f"with random weights); known: {', '.join(known_hf_names())}")
    transformers = _import("transformers", "hf:")
    # use_cache: the key/value cache serves generation only
    config = transformers.AutoConfig.for_model(entry.model_type, **entry.fields,
                                               use_cache=use_cache)
    max_positions = config.max_position_embeddings
    seq_len = options.seq_len or min(max_positions, DEFAULT_SEQ_LEN.get(device, 128))
    if seq_len > max_positions:
        raise UserError(f"--seq-len {seq_len} is more than {target}'s "
                        f"{max_positions} positions (max_position_embeddings)")
    auto = (transformers.AutoModelForCausalLM if entry.head == "causal_lm"
            else transformers.AutoModelForMaskedLM)
    # Warnings about a config gobrrr built (deprecations, token ids) would interleave
    # with progress and say nothing about speed; this process is gobrrr's command.
    transformers.logging.set_verbosity_error()
    return transformers, entry, config, seq_len, auto


def _hf_builder(name: str, device: str, options: ModelOptions) -> Builder:
    target = f"hf:{name}"
    transformers, entry, config, seq_len, auto = _hf_setup(name, device, options,
                                                           use_cache=False)

    def build(batch_size: int, device: str) -> _Built:
        import torch

        # a config of its own: from_config records dtype and attention in it
        notes: list[str] = []
        model = _finish(target, device, options,
                        lambda: _hf_from_config(auto, copy.deepcopy(config), notes))
        ids = torch.randint(0, model.config.vocab_size, (batch_size, seq_len),
                            device=device, generator=_generator(device))
        attn = model.config._attn_implementation
        step = (_train_step(model, _hf_loss) if options.train
                else _inference_step(model, _hf_logits))
        details = _details(transformers, entry.name, model, options,
                           config=_hf_sizes(model.config, entry.model_type),
                           config_source=entry.source, head=entry.head,
                           seq_len=seq_len, attn_implementation=attn,
                           **({"attn_note": notes[0]} if notes else {}))
        return _Built(step, (ids,), details,
                      _summary(model, options, f"seq {seq_len}", f"{attn} attention"))

    return build


@dataclass
class GenerationTarget:
    """A causal LM built for generation (`doctor hf:NAME --generate N`): the model with
    its KV cache on, eval mode, and a prompt of `seq_len` random tokens per sequence."""

    target: str
    model: Any
    input_ids: Any
    details: dict[str, Any]
    description: str


def load_generation(target: str, device: str, batch_size: int | None,
                    options: ModelOptions) -> GenerationTarget:
    """hf:NAME of a causal LM, for generation; --seq-len is the prompt's length."""
    import torch

    prefix, _, name = target.partition(":")
    if prefix != "hf" or not name:
        raise UserError(f"--generate takes an hf: causal LM (e.g. hf:gpt2, "
                        f"hf:tinyllama-1.1b), not {target}")
    if options.train:
        raise UserError("--generate and --train do not go together: generation is "
                        "inference")
    transformers, entry, config, seq_len, auto = _hf_setup(name, device, options,
                                                           use_cache=True)
    if entry.head != "causal_lm":
        raise UserError(f"{target} is a {entry.head.replace('_', ' ')}, not a causal LM: "
                        "it does not generate")
    notes: list[str] = []
    model = _finish(target, device, options,
                    lambda: _hf_from_config(auto, copy.deepcopy(config), notes)).eval()
    batch = batch_size or 1  # generation's default: one sequence, the latency case
    # token 0 is left out of the prompt: it is the pad token generate is given
    ids = torch.randint(1, model.config.vocab_size, (batch, seq_len), device=device,
                        generator=_generator(device))
    attn = model.config._attn_implementation
    details = _details(transformers, entry.name, model, options,
                       config=_hf_sizes(model.config, entry.model_type),
                       config_source=entry.source, head=entry.head, seq_len=seq_len,
                       attn_implementation=attn, **({"attn_note": notes[0]} if notes else {}))
    return GenerationTarget(target, model, ids, details,
                            _summary(model, options, f"prompt {seq_len}",
                                     f"{attn} attention", f"batch {batch}"))


# ---------------------------------------------------------------- vision


def _logits(out: Any) -> Any:
    """Classifiers in train mode may return (logits, aux logits) (Inception, GoogLeNet)."""
    if hasattr(out, "logits"):
        return out.logits
    return out[0] if isinstance(out, tuple) else out


def _vision_logits(model: Any, images: Any) -> Any:
    return _logits(model(images))


def _vision_loss(model: Any, images: Any, labels: Any) -> Any:
    import torch

    return torch.nn.functional.cross_entropy(_logits(model(images)), labels)


def _check_vision_options(target: str, options: ModelOptions) -> None:
    if options.seq_len is not None:
        raise UserError(f"--seq-len is for hf: targets; {target} takes --image-size")


def _vision_built(library: Any, name: str, model: Any, options: ModelOptions,
                  image_size: int, num_classes: int, batch_size: int,
                  device: str) -> _Built:
    import torch

    gen = _generator(device)
    images = torch.randn(batch_size, 3, image_size, image_size, device=device,
                         generator=gen).to(_torch_dtype(options))
    labels = torch.randint(0, num_classes, (batch_size,), device=device, generator=gen)
    args = (images, labels) if options.train else (images,)

    step = (_train_step(model, _vision_loss) if options.train
            else _inference_step(model, _vision_logits))
    details = _details(library, name, model, options, image_size=image_size,
                       config={"num_classes": num_classes,
                               "input_size": [3, image_size, image_size]})
    return _Built(step, args, details,
                  _summary(model, options, f"{image_size}x{image_size} images"))


def _no_download(target: str, name: str) -> None:
    if "/" in name or ":" in name:
        raise UserError(f"{target} would need a download (gobrrr builds models offline "
                        "with random weights): give an architecture name")


def _timm_builder(name: str, device: str, options: ModelOptions) -> Builder:
    import difflib

    target = f"timm:{name}"
    _check_vision_options(target, options)
    _no_download(target, name)
    timm = _import("timm", "timm:")
    if not timm.is_model(name):
        near = difflib.get_close_matches(name, timm.list_models(), n=5)
        raise UserError(f"unknown timm model {name!r}"
                        + (f"; close: {', '.join(near)}" if near else ""))

    def build(batch_size: int, device: str) -> _Built:
        model = _finish(target, device, options,
                        lambda: timm.create_model(name, pretrained=False))
        cfg = getattr(model, "pretrained_cfg", None) or {}
        own_size = int(cfg.get("input_size", (3, DEFAULT_IMAGE_SIZE))[-1])
        size = options.image_size or own_size
        if size != own_size and cfg.get("fixed_input_size"):
            # ViT-like models fix their patch grid at build time: build at this size
            model = _finish(target, device, options,
                            lambda: timm.create_model(name, pretrained=False, img_size=size))
        return _vision_built(timm, name, model, options, size, model.num_classes,
                             batch_size, device)

    return build


def _torchvision_builder(name: str, device: str, options: ModelOptions) -> Builder:
    import difflib

    target = f"torchvision:{name}"
    _check_vision_options(target, options)
    _no_download(target, name)
    torchvision = _import("torchvision", "torchvision:")
    # classification models only: detection and segmentation take other inputs
    names = torchvision.models.list_models(module=torchvision.models)
    if name not in names:
        near = difflib.get_close_matches(name, names, n=5)
        raise UserError(f"unknown torchvision classification model {name!r}"
                        + (f"; close: {', '.join(near)}" if near else ""))

    def build(batch_size: int, device: str) -> _Built:
        get = torchvision.models.get_model
        model = _finish(target, device, options, lambda: get(name, weights=None))
        # ViTs fix their patch grid at build time (image_size); other models take any size
        own_size = getattr(model, "image_size", None)
        size = options.image_size or own_size or DEFAULT_IMAGE_SIZE
        if own_size is not None and size != own_size:
            model = _finish(target, device, options,
                            lambda: get(name, weights=None, image_size=size))
        classes = getattr(model, "num_classes", None) or _out_features(model)
        return _vision_built(torchvision, name, model, options, size, classes, batch_size,
                             device)

    return build


def _out_features(model: Any) -> int:
    """The classifier's width: the last Linear's out_features (torchvision keeps no
    num_classes on most models); ImageNet's 1000 if none."""
    import torch

    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    return int(linears[-1].out_features) if linears else 1000
