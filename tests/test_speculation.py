"""A training step's compile begun before the diagnosis (remedies/speculation.py,
compile_child_main.py) and its repeated blocks as nested compile regions
(remedies/nested.py): issue 24's GPT-2 training row at --budget-s 60."""

import copy
import io
import json
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from gobrrr.phases import BACKWARD, FORWARD, OPTIMIZER
from gobrrr.remedies import catalog, nested
from gobrrr.remedies.base import Candidate, Context
from gobrrr.remedies.speculation import speculative_stack


class Block(nn.Module):
    def __init__(self, width: int = 16) -> None:
        super().__init__()
        self.ln, self.a = nn.LayerNorm(width), nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.relu(self.a(self.ln(x)))


class Decoder(nn.Module):
    def __init__(self, n: int = 4) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block() for _ in range(n))
        self.head = nn.Linear(16, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for b in self.blocks:
            x = b(x)
        return self.head(x)


class Stage(nn.Module):
    """A ResNet stage's shape: the first block's parameters differ from the rest's."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(8, 16), *(nn.Linear(16, 16) for _ in range(2)))


def _rec(phase: str, op_class: str = "matmul", dtype: str = "fp32") -> SimpleNamespace:
    return SimpleNamespace(phase=phase, op_class=op_class, dtype=dtype)


TRAIN = [_rec(FORWARD), _rec(BACKWARD), _rec(OPTIMIZER, "pointwise")]


@pytest.fixture(autouse=True)
def _checked_torch(monkeypatch):
    """This torch's release counted among those whose gradients with the region were
    checked, so that the logic is tested here (the CPU build's are not: nested.py)."""
    release = ".".join(torch.__version__.split(".")[:2])
    monkeypatch.setattr(nested, "CHECKED_TORCH", (release,))


def _train_ctx(device: str = "cuda", fused: bool = False, records=TRAIN) -> Context:
    model = Decoder()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=fused or None)
    return Context(device, records=list(records), optimizers=[opt],
                   module_types={"Decoder", "Block"},
                   repeated_blocks=nested.repeated_blocks([model]))


def test_the_guess_is_a_training_steps_usual_best_stack_where_it_applies():
    specs = catalog.select(None)
    # session s's H200 hand search: bf16 autocast + fused AdamW + reduce-overhead
    assert speculative_stack(specs, _train_ctx()) == [
        "fused_optimizer", "bf16_autocast", "compile_reduce_overhead"]
    # a member that does not apply is left out: the optimizer is fused already
    assert speculative_stack(specs, _train_ctx(fused=True)) == [
        "bf16_autocast", "compile_reduce_overhead"]
    # no guess: on CPU, for inference, without the compile among the remedies selected
    assert speculative_stack(specs, _train_ctx("cpu")) == []
    assert speculative_stack(specs, _train_ctx(records=[_rec(FORWARD)])) == []
    assert speculative_stack(catalog.select(["bf16_autocast"]), _train_ctx()) == []
    assert speculative_stack(catalog.select(["compile_reduce_overhead"]),
                             _train_ctx()) == ["compile_reduce_overhead"]


def test_repeated_blocks_are_equal_siblings_and_nothing_inside_them():
    model = Decoder(n=3)
    assert nested.repeated_blocks([model]) == ("Block x3",)
    # the same model reached twice (two closures) counts once
    assert nested.repeated_blocks([model, model]) == ("Block x3",)
    # a stage whose first block differs is not one; one block alone is not
    assert nested.repeated_blocks([Stage()]) == ()
    assert nested.repeated_blocks([Decoder(n=1)]) == ()
    # blocks holding repeated layers of their own: the outer blocks only
    outer = nn.ModuleList(nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4)) for _ in range(2))
    assert nested.repeated_blocks([outer]) == ("Sequential x2",)


def test_a_copys_blocks_are_marked_and_the_users_class_is_left_alone():
    model = Decoder()
    original = Block.forward
    copied = copy.deepcopy(model)
    assert nested.nest_blocks([copied]) == ("Block x4",)
    assert Block.forward is original
    assert all(type(b) is Block for b in model.blocks)
    assert all(type(b) is not Block and isinstance(b, Block) and
               type(b).__name__ == "Block" for b in copied.blocks)
    # eager, the region is a no-op: the copy computes what the user's model does
    x = torch.randn(3, 16)
    torch.testing.assert_close(copied(x), model(x), rtol=0, atol=0)


def test_only_a_cuda_training_steps_compile_marks_them(monkeypatch):
    from gobrrr.remedies import compiled
    from gobrrr.remedies.compiled import compile_candidate

    # as in a process without transformers (another test may have imported it)
    monkeypatch.setattr(compiled, "once_logging_functions", lambda: [])

    def cand_of(model: nn.Module) -> Candidate:
        return Candidate(model, (torch.randn(2, 16),), {}, [model], [], [])

    # CPU (torch 2.13 there computed the first block's gradients wrong): not marked
    cand = compile_candidate(cand_of(Decoder()), _train_ctx("cpu"), None)
    assert "nested_regions" not in cand.compile_info
    assert all(type(b) is Block for b in cand.modules[0].blocks)
    # inference on CUDA: not marked (its compile fits; the fusion lost unmeasured)
    cand = compile_candidate(cand_of(Decoder()), _train_ctx(records=[_rec(FORWARD)]),
                             "reduce-overhead")
    assert "nested_regions" not in cand.compile_info
    # a CUDA training step: marked at apply time, before the compile traces it
    cand = compile_candidate(cand_of(Decoder()), _train_ctx(), "reduce-overhead")
    assert cand.compile_info["nested_regions"] == ["Block x4"]
    assert type(cand.modules[0].blocks[0]) is not Block
    assert cand.notes == ["Block x4 compiled as a nested compile region (once, reused for "
                          "every block)"]
    # a torch release whose gradients with the region were not checked: not marked
    monkeypatch.setattr(nested, "CHECKED_TORCH", ())
    cand = compile_candidate(cand_of(Decoder()), _train_ctx(), "reduce-overhead")
    assert "nested_regions" not in cand.compile_info


def test_the_snippet_marks_the_users_block_class_first_where_the_search_did(monkeypatch):
    from gobrrr.remedies import compiled

    # as in a process without transformers (another test may have imported it)
    monkeypatch.setattr(compiled, "once_logging_functions", lambda: [])
    spec = {s.name: s for s in catalog.select(None)}["compile_reduce_overhead"]
    assert spec.snippet_in(_train_ctx()) == (
        "# the repeated block compiled once and reused for every layer\n"
        "Block.forward = torch.compiler.nested_compile_region(Block.forward)\n"
        'step = torch.compile(step, mode="reduce-overhead")')
    assert spec.snippet_in(_train_ctx("cpu")) == spec.snippet
    # with transformers' once-logging on logging.Logger: skipped first, as the search did
    import logging

    import transformers.utils.logging  # noqa: F401 - puts warning_once on logging.Logger

    monkeypatch.setattr(compiled, "once_logging_functions",
                        lambda: [logging.Logger.warning_once])
    name = compiled.ignored_logging_name()
    assert spec.snippet_in(_train_ctx("cpu")) == (
        "import logging\n"
        "# transformers' once-logging in a forward is a graph break: skip it when compiled\n"
        f"torch._dynamo.config.{name}.add(logging.Logger.warning_once)\n"
        'step = torch.compile(step, mode="reduce-overhead")')
    # where this torch's compile metrics trip on the set (torch 2.11), the snippet quiets them
    monkeypatch.setattr(compiled, "metrics_trip_on_ignored_functions", lambda: True)
    assert spec.snippet_in(_train_ctx("cpu")) == (
        "import logging\n"
        "# transformers' once-logging in a forward is a graph break: skip it when compiled\n"
        f"torch._dynamo.config.{name}.add(logging.Logger.warning_once)\n"
        "# this torch then logs a harmless traceback per compile (its compile metrics sort "
        "that set)\n"
        'logging.getLogger("torch._dynamo.metrics_context").setLevel(logging.CRITICAL)\n'
        'step = torch.compile(step, mode="reduce-overhead")')
    cand = compiled.compile_candidate(
        Candidate(Decoder(), (torch.randn(2, 16),), {}, [], [], []), _train_ctx("cpu"),
        None)
    assert compiled.once_logging_ignored in cand.switches
    assert cand.notes == ["transformers' Logger.warning_once/info_once skipped inside the "
                          "compiled code (dynamo's ignored logging functions): a graph "
                          "break otherwise"]


def _child_main(monkeypatch, capsys, spec, stdin_lines, order_waiting):
    """compile_child_main.main in this process: its input `stdin_lines`, whether a line
    already waits when it decides to guess; its JSON lines out."""
    from gobrrr.remedies import compile_child_main, speculation

    monkeypatch.setattr(compile_child_main, "_order_waiting", lambda: order_waiting)
    monkeypatch.setattr("sys.stdin", io.StringIO("".join(
        json.dumps(x) + "\n" for x in stdin_lines)))
    # the guess on this CPU: the real one is CUDA-only; any flag remedy shows the order
    monkeypatch.setattr(speculation, "speculative_stack",
                        lambda specs, ctx: ["zero_grad_set_to_none"])
    assert compile_child_main.main([json.dumps(spec)]) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_a_speculating_child_compiles_its_guess_then_reads_the_searchs_order(
        monkeypatch, capsys):
    from gobrrr.models import ModelOptions
    from gobrrr.remedies.compile_child import reload_spec

    spec = dict(reload_spec("examples:mlp_train", "cpu", 8, ModelOptions()),
                remedies=None, speculate=True, only=None)
    # nothing told yet: it says its guess, compiles it, and only then reads the order;
    # its compile line names what it compiled, not what it was asked
    out = _child_main(monkeypatch, capsys, spec, [{"remedies": ["foreach_optimizer"]}],
                      order_waiting=False)
    assert out[0] == {"speculating": ["zero_grad_set_to_none"]}
    assert out[1]["remedies"] == ["zero_grad_set_to_none"] and out[1]["compile_s"] >= 0
    import sys
    assert sys.stdin.read() == ""  # the order was read, after the compile
    # told before it could guess: what it was told
    out = _child_main(monkeypatch, capsys, spec, [{"remedies": ["foreach_optimizer"]}],
                      order_waiting=True)
    assert len(out) == 1 and out[0]["remedies"] == ["foreach_optimizer"]
    # its timeline, seconds since its start: built, then the compile begun
    assert 0 < out[0]["built_s"] <= out[0]["compile_from_s"]
    # an inference workload (no optimizer): no guess, it waits for the order
    out = _child_main(monkeypatch, capsys, dict(spec, target="examples:mlp"),
                      [{"remedies": ["inference_mode"]}], order_waiting=False)
    assert len(out) == 1 and out[0]["remedies"] == ["inference_mode"]


def test_the_parent_reads_a_guess_apart_from_the_compile_lines():
    from gobrrr.remedies.compile_child import ChildRun

    run = ChildRun.__new__(ChildRun)
    run.speculating, run.spawned = (), 0.0
    import queue
    run._lines = queue.Queue()
    run.proc = SimpleNamespace(stdout=io.StringIO(
        '{"speculating": ["bf16_autocast", "compile_reduce_overhead"]}\n'
        'noise from a library\n{"compile_s": 31.0, "remedies": ["bf16_autocast"]}\n'))
    run._read_out()
    assert run.speculating == ("bf16_autocast", "compile_reduce_overhead")
    assert run.speculating_at_s > 0
    assert run._lines.get_nowait() == {"compile_s": 31.0, "remedies": ["bf16_autocast"]}
    assert run._lines.get_nowait() is None  # the end of its output


def test_the_cli_starts_its_child_before_torch_only_where_cuda_is_likely(monkeypatch):
    # on the H200's host the CLI's own torch import took 4-5 s that the child's start
    # waited for; the child now starts first, where --device will likely be CUDA
    from gobrrr.remedies import compile_child

    started = []
    monkeypatch.setattr(compile_child, "background_cores", lambda: [4, 5, 6, 7])
    monkeypatch.setattr(compile_child, "prestart_child",
                        lambda reload, cores, ab, speculate, only: started.append(
                            (reload["device"], cores, ab, speculate, only)) or "child")
    monkeypatch.setattr(compile_child.os.path, "exists",
                        lambda p: p == "/proc/driver/nvidia/version")
    spec = {"target": "hf:gpt2", "device": "auto"}
    assert compile_child.early_child(spec, "auto", None, 1.5) == "child"
    assert compile_child.early_child(spec, "cuda", ["compile"], 1.5) == "child"
    assert compile_child.early_child(spec, "cpu", None, 1.5) is None
    assert started == [("cuda", [4, 5, 6, 7], 1.5, True, None),
                       ("cuda", [4, 5, 6, 7], 1.5, True, ["compile"])]
    # auto without NVIDIA's driver, or no cores to spare: none
    monkeypatch.setattr(compile_child.os.path, "exists", lambda p: False)
    assert compile_child.early_child(spec, "auto", None, 1.5) is None
    monkeypatch.setattr(compile_child, "background_cores", lambda: None)
    assert compile_child.early_child(spec, "cuda", None, 1.5) is None
    assert len(started) == 2


def test_the_cli_stops_a_child_it_started_in_vain(monkeypatch):
    # started before torch could say where the workload runs; the device resolved to
    # something else (or the build fails): the child is stopped, none left behind
    from click.testing import CliRunner

    from gobrrr.cli import cli
    from gobrrr.remedies import compile_child

    class Child:
        stops = 0

        def stop(self):
            Child.stops += 1

    from gobrrr.cli import optimize as cli_optimize
    from gobrrr.errors import UserError

    asked, at_build = [], []

    def build(*args, **kwargs):
        at_build.append(Child.stops)
        raise UserError("unknown example 'nope'")

    monkeypatch.setattr(compile_child, "early_child",
                        lambda reload, device, only, ab: asked.append(device) or Child())
    monkeypatch.setattr(cli_optimize, "load_announced", build)
    res = CliRunner().invoke(cli, ["optimize", "examples:nope", "--device", "cpu", "-q"])
    assert res.exit_code == 2 and "unknown example 'nope'" in res.output
    # the device is the CPU: stopped before the build, and the command's end stops it
    # again (idempotent)
    assert asked == ["cpu"] and at_build == [1] and Child.stops == 2


def test_the_parent_knows_what_a_measuring_child_holds_compiled_before_any_wait():
    # runner.ChildProber.compiled_aside asks while the search measures, before the
    # compile line is taken off the queue by `wait`
    import queue

    from gobrrr.remedies.compile_child import ChildRun

    def read(out: str, measuring: bool = True, alive: bool = True) -> ChildRun:
        run = ChildRun.__new__(ChildRun)
        run.speculating, run.spawned, run.remedies = (), 0.0, ("compile",)
        run.answered, run.compiled, run.measuring = False, None, measuring
        run._lines = queue.Queue()
        run.proc = SimpleNamespace(stdout=io.StringIO(out),
                                   poll=lambda: None if alive else 0)
        run._read_out()
        return run

    done = '{"compile_s": 12.0, "remedies": ["bf16_cast", "compile"]}\n'
    assert read(done).waits_compiled() == ("bf16_cast", "compile")
    assert read('{"compile_s": 12.0}\n').waits_compiled() == ("compile",)
    assert read('{"error": "no GPU"}\n').waits_compiled() is None  # failed: nothing held
    assert read(done, measuring=False).waits_compiled() is None  # it does not measure
    assert read(done, alive=False).waits_compiled() is None  # it ended
    assert read("").waits_compiled() is None  # still compiling
