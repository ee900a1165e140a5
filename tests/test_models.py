"""Model-name targets (models.py): hf: with a tiny config through doctor and optimize,
--dtype and --train, and the one-line errors. Vision tests need timm and torchvision
(marked `vision`, skipped where they do not import; run them on the GPU machine)."""

import inspect
import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from gobrrr import model_configs
from gobrrr.cli import cli
from gobrrr.model_configs import HF_CONFIGS, HFConfig
from gobrrr.models import ModelOptions
from gobrrr.schema import validate
from gobrrr.targets import load_target

TARGETS = Path(__file__).parent / "data" / "targets.py"
SHIPPED = list(HF_CONFIGS)  # before the fixture adds the test-only entry

# GPT-2's architecture at 2 layers, 64 wide: a forward pass at 32 tokens takes ~1 ms.
# Token ids 0: GPT2Config's bos/eos (50256) lie outside a 512-token vocabulary.
TINY = HFConfig("gpt2-tiny", "gpt2", "causal_lm",
                {"n_layer": 2, "n_embd": 64, "n_head": 2, "n_positions": 64,
                 "vocab_size": 512, "bos_token_id": 0, "eos_token_id": 0},
                "tests/test_models.py (test only)")
TINY_BERT = HFConfig("bert-tiny", "bert", "masked_lm",
                     {"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 2,
                      "intermediate_size": 128, "max_position_embeddings": 64,
                      "vocab_size": 512},
                     "tests/test_models.py (test only)")


@pytest.fixture(autouse=True)
def tiny_configs(monkeypatch):
    monkeypatch.setitem(model_configs.HF_CONFIGS, TINY.name, TINY)
    monkeypatch.setitem(model_configs.HF_CONFIGS, TINY_BERT.name, TINY_BERT)


def run(*args):
    return CliRunner().invoke(cli, list(args))


def error_lines(result):
    return [x for x in result.stderr.splitlines() if x.startswith("gobrrr: error")]


def the_model(fn):
    """The module a model target's step closes over."""
    return inspect.getclosurevars(fn).nonlocals["model"]


def same_weights(a, b):
    import torch

    pa, pb = list(a.parameters()), list(b.parameters())
    return len(pa) == len(pb) and all(torch.equal(x, y) for x, y in zip(pa, pb, strict=True))


def test_hf_doctor_json_records_the_model_and_doubles_the_batch():
    transformers = pytest.importorskip("transformers")
    r = run("doctor", "hf:gpt2-tiny", "--seq-len", "32", "--batch-size", "2", "--json",
            "-q", "--time-budget", "0.2", "--device", "cpu")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    validate(d, "report")
    assert d["regime"] in ("overhead", "memory", "compute")
    m = d["workload"]["model"]
    assert m["library"] == "transformers"
    assert m["library_version"] == transformers.__version__
    if int(transformers.__version__.split(".")[0]) >= 5:
        assert m["attn_implementation"] == "sdpa"
    else:  # 4.40 has no SDPA for GPT-2: eager, and a note saying so
        assert m["attn_implementation"] == "sdpa" or "attn_note" in m
    assert (m["dtype"], m["mode"], m["seq_len"]) == ("float32", "inference", 32)
    assert m["config"]["num_hidden_layers"] == 2 and m["config"]["hidden_size"] == 64
    assert m["config"]["intermediate_size"] == 4 * 64  # GPT-2's MLP without n_inner
    pts = d["experiments"]["batch_scaling"]["points"]
    assert d["workload"]["batch_size"] == pts[0]["batch_size"] == 2
    assert pts[1]["batch_size"] == 2 * pts[0]["batch_size"]


def test_hf_optimize_train_step():
    pytest.importorskip("transformers")
    r = run("optimize", "hf:gpt2-tiny", "--train", "--seq-len", "16", "--no-diagnose",
            "--only", "zero_grad_set_to_none,foreach_optimizer", "--budget-s", "5",
            "--json", "-q", "--device", "cpu")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["workload"]["model"]["mode"] == "train"
    by_name = {x["name"]: x for x in d["remedies"]}
    assert set(by_name) == {"zero_grad_set_to_none", "foreach_optimizer"}
    # the step calls zero_grad(set_to_none=True), as torch's default does
    assert by_name["zero_grad_set_to_none"]["status"] == "not applicable"
    assert by_name["foreach_optimizer"]["status"] != "not applicable"  # off on CPU


def test_dtype_casts_weights_not_token_ids():
    pytest.importorskip("transformers")
    import torch

    w = load_target("hf:gpt2-tiny", "cpu", 2, ModelOptions(seq_len=8, dtype="bf16"))
    fn, args = w.factory(4, "cpu")
    assert {p.dtype for p in the_model(fn).parameters()} == {torch.bfloat16}
    assert args[0].dtype == torch.int64 and args[0].shape == (4, 8)
    assert int(args[0].max()) < TINY.fields["vocab_size"]
    assert w.details["model"]["dtype"] == "bfloat16"
    assert w().dtype == torch.bfloat16  # logits


def test_train_and_inference_modes_and_the_users_rng():
    pytest.importorskip("transformers")
    import torch

    torch.manual_seed(123)
    before = torch.random.get_rng_state()
    infer = load_target("hf:bert-tiny", "cpu", 2, ModelOptions(seq_len=16))
    train = load_target("hf:bert-tiny", "cpu", 2, ModelOptions(seq_len=16, train=True))
    assert torch.equal(torch.random.get_rng_state(), before)  # seeded apart from the user
    assert not the_model(infer.fn).training and the_model(train.fn).training
    assert infer().shape == (2, 16, TINY_BERT.fields["vocab_size"])
    loss = train()
    assert loss.dim() == 0 and torch.isfinite(loss)
    # same seed, same weights and inputs: two loads build the same workload
    again = load_target("hf:bert-tiny", "cpu", 2, ModelOptions(seq_len=16))
    assert torch.equal(again.args[0], infer.args[0])
    assert same_weights(the_model(again.fn), the_model(infer.fn))


def test_factory_builds_an_independent_model_per_batch():
    pytest.importorskip("transformers")
    import torch

    w = load_target("hf:gpt2-tiny", "cpu", 1, ModelOptions(seq_len=8))
    big = w.scaled(2)
    assert big.batch_size == 2 and big.args[0].shape == (2, 8)
    assert torch.equal(big.args[0][:1], w.args[0])  # the same generator, drawn further
    # optimize changes the factory's fresh model, never the one diagnosed
    assert the_model(big.fn) is not the_model(w.fn)
    assert same_weights(the_model(big.fn), the_model(w.fn))
    assert big.details == w.details


def test_download_name_is_one_line():
    r = run("doctor", "hf:meta-llama/Llama-3-8B", "-q", "--device", "cpu")
    assert r.exit_code == 2
    lines = error_lines(r)
    assert len(lines) == 1 and "download" in lines[0], r.stderr
    assert all(name in lines[0] for name in SHIPPED)
    assert "Traceback" not in r.stderr


def test_missing_library_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)  # import raises ImportError
    r = run("doctor", "hf:gpt2", "-q", "--device", "cpu")
    assert r.exit_code == 2
    lines = error_lines(r)
    assert len(lines) == 1 and "transformers" in lines[0], r.stderr
    assert "pip install 'gobrrr[models]'" in lines[0]


@pytest.mark.parametrize("error,needle", [
    (RuntimeError("operator torchvision::nms does not exist\nmore"),
     "installed but did not import (RuntimeError: operator torchvision::nms does not exist)"),
    (ModuleNotFoundError("No module named 'PIL'", name="PIL"),
     "installed but did not import (ModuleNotFoundError"),
])
def test_broken_library_is_one_line(monkeypatch, error, needle):
    import importlib

    real = importlib.import_module

    def import_module(name, *args):
        if name == "torchvision":
            raise error
        return real(name, *args)

    monkeypatch.setattr(importlib, "import_module", import_module)
    r = run("doctor", "torchvision:resnet18", "-q", "--device", "cpu")
    assert r.exit_code == 2
    lines = error_lines(r)
    assert len(lines) == 1 and needle in lines[0], r.stderr
    assert "pip install 'gobrrr[models]'" in lines[0]


@pytest.mark.parametrize("args,needle", [
    (["hf:gpt2-tiny", "--seq-len", "65"], "more than hf:gpt2-tiny's 64 positions"),
    (["hf:gpt2-tiny", "--image-size", "64"], "--image-size is for timm: and torchvision:"),
    (["torchvision:resnet50", "--seq-len", "16"], "--seq-len is for hf: targets"),
    (["timm:resnet50", "--seq-len", "16"], "--seq-len is for hf: targets"),
    (["examples:mlp", "--train"], "--train applies to hf:, timm: and torchvision:"),
    ([f"{TARGETS}:good", "--dtype", "bf16"], "--dtype applies to"),
    (["--seq-len", "8"], "the default example"),
    (["hf:", "--dtype", "bf16"], "names no model"),
    (["timm:hf-hub:org/name"], "would need a download"),
])
def test_bad_combinations_are_one_line_errors(args, needle):
    if args[0].startswith("hf:gpt2"):
        pytest.importorskip("transformers")
    for command in ("doctor", "optimize"):
        r = run(command, *args, "-q", "--device", "cpu")
        assert r.exit_code == 2, r.output
        lines = error_lines(r)
        assert len(lines) == 1 and needle in lines[0], r.stderr
        assert "Traceback" not in r.stderr


def test_help_names_every_target_form_and_shipped_config():
    for command in ("doctor", "optimize"):
        text = run(command, "--help").output
        for form in ("FILE.py:NAME", "examples:NAME", "hf:NAME", "timm:NAME",
                     "torchvision:NAME", "--seq-len", "--image-size", "--dtype", "--train"):
            assert form in text, (command, form)
        for name in SHIPPED:
            assert name in text, (command, name)


def test_import_gobrrr_stays_light():
    import subprocess

    code = ("import sys, gobrrr, gobrrr.cli, gobrrr.models, gobrrr.workload; "
            "print(sorted(m for m in ('transformers', 'timm', 'torchvision') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"


# Published parameter counts of the shipped configs; built on the meta device (no
# memory, no init), so a typo in a size shows here. GPT-2, TinyLlama, Qwen2.5: the counts the
# Hub reports for the checkpoints; BERT: BertForMaskedLM (no pooler, MLM head + bias).
PUBLISHED_PARAMETERS = {
    "gpt2": 124_439_808, "gpt2-medium": 354_823_168, "gpt2-large": 774_030_080,
    "gpt2-xl": 1_557_611_200, "bert-base-uncased": 109_514_298,
    "bert-large-uncased": 335_174_458, "tinyllama-1.1b": 1_100_048_384,
    "qwen2.5-0.5b": 494_032_768,
}


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_configs_have_their_published_sizes(name):
    transformers = pytest.importorskip("transformers")
    import torch

    entry = HF_CONFIGS[name]
    config = transformers.AutoConfig.for_model(entry.model_type, **entry.fields)
    auto = (transformers.AutoModelForCausalLM if entry.head == "causal_lm"
            else transformers.AutoModelForMaskedLM)
    with torch.device("meta"):
        model = auto.from_config(config)
    assert sum(p.numel() for p in model.parameters()) == PUBLISHED_PARAMETERS[name]


def test_hub_ids_are_aliases():
    assert model_configs.hf_config("openai-community/gpt2") is HF_CONFIGS["gpt2"]
    assert model_configs.hf_config("TinyLlama/TinyLlama-1.1B-Chat-v1.0").name == \
        "tinyllama-1.1b"
    assert model_configs.hf_config("meta-llama/Llama-3-8B") is None


# ---------------------------------------------------------------- vision (GPU machine)


@pytest.mark.vision
@pytest.mark.parametrize("target", ["torchvision:resnet18", "timm:resnet18"])
def test_vision_doctor_json(target):
    r = run("doctor", target, "--image-size", "64", "--json", "-q", "--time-budget", "0.2",
            "--device", "cpu")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    validate(d, "report")
    m = d["workload"]["model"]
    assert m["library"] == target.split(":")[0] and m["image_size"] == 64
    assert m["config"]["num_classes"] == 1000
    pts = d["experiments"]["batch_scaling"]["points"]
    assert pts[1]["batch_size"] == 2 * pts[0]["batch_size"]


@pytest.mark.vision
@pytest.mark.parametrize("target", ["timm:vit_tiny_patch16_224", "torchvision:vit_b_16"])
def test_vits_are_built_at_the_image_size(target):
    import torch

    w = load_target(target, "cpu", 2, ModelOptions(image_size=64, train=True))
    assert w.details["model"]["image_size"] == 64
    assert w.args[0].shape == (2, 3, 64, 64) and w.args[1].shape == (2,)
    loss = w()
    assert loss.dim() == 0 and torch.isfinite(loss)


@pytest.mark.vision
def test_vision_dtype_casts_images_and_weights():
    import torch

    w = load_target("torchvision:resnet18", "cpu", 2,
                    ModelOptions(image_size=32, dtype="bf16"))
    assert w.args[0].dtype == torch.bfloat16
    assert {p.dtype for p in the_model(w.fn).parameters()} == {torch.bfloat16}


@pytest.mark.vision
@pytest.mark.parametrize("target,needle", [
    ("torchvision:resnet5", "unknown torchvision classification model 'resnet5'"),
    ("torchvision:fasterrcnn_resnet50_fpn", "unknown torchvision classification"),
    ("timm:resnet5", "unknown timm model 'resnet5'"),
])
def test_unknown_vision_names(target, needle):
    r = run("doctor", target, "-q", "--device", "cpu")
    assert r.exit_code == 2
    lines = error_lines(r)
    assert len(lines) == 1 and needle in lines[0], r.stderr


@pytest.mark.cuda
def test_hf_on_cuda_bf16_train():
    pytest.importorskip("transformers")
    import torch

    w = load_target("hf:gpt2-tiny", "cuda", 4, ModelOptions(seq_len=64, dtype="bf16",
                                                            train=True))
    model = the_model(w.fn)
    assert {p.device.type for p in model.parameters()} == {"cuda"}
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    assert w.args[0].device.type == "cuda"
    assert torch.isfinite(w())


def test_a_layer_a_library_initializes_to_zero_is_drawn_again():
    """torchvision's ViT zero-initializes its head: the untrained model's outputs were all
    zeros, and any remedy 'verified' against them (0 = 0)."""
    import torch

    from gobrrr.models import REDRAWN, _details, _seeded_build

    def build():
        m = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
        torch.nn.init.zeros_(m[2].weight)
        torch.nn.init.zeros_(m[2].bias)
        return m

    model = _seeded_build("cpu", build)
    assert model[2].weight.abs().min() > 0  # every weight drawn again, none left zero
    assert model(torch.ones(2, 4)).abs().max() > 0
    assert REDRAWN[model] == ["2"]
    again = _seeded_build("cpu", build)
    assert torch.equal(again[2].weight, model[2].weight)  # from the seed: the same draw
    weights = _details(torch, "toy", model, ModelOptions())["weights"]
    assert weights.endswith("; 2 drawn again (the library initializes them to zero: "
                            "outputs of zeros would verify no remedy)")
    plain = _seeded_build("cpu", lambda: torch.nn.Linear(4, 4))
    assert plain not in REDRAWN
