"""A FILE.py:NAME target is imported as a module of its own, as Python's import would."""

import sys

import torch

from gobrrr.targets import load_target

SOURCE = ("import torch\n"
          "def make(batch_size=8):\n"
          "    w = torch.randn(16, 16)\n"
          "    def step(a):\n"
          "        return (a @ w).relu()\n"
          "    return step, (torch.randn(batch_size, 16),)\n")


def test_a_file_target_is_a_registered_module_that_torch_compile_can_trace(tmp_path):
    f = tmp_path / "slow.py"
    f.write_text(SOURCE)
    w = load_target(f"{f}:make", "cpu")
    mod = sys.modules[w.fn.__module__]  # dynamo looks the module up by this name
    assert mod.__file__ == str(f)
    # under inference_mode, dynamo failed on an unregistered module (ModuleNotFoundError)
    with torch.inference_mode():
        out = torch.compile(w.fn, backend="eager")(*w.args)
    assert torch.equal(out, w.fn(*w.args))


def test_two_files_of_one_name_are_two_modules(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    for d in ("a", "b"):
        (tmp_path / d / "train.py").write_text(SOURCE)
    one = load_target(f"{tmp_path / 'a' / 'train.py'}:make", "cpu")
    two = load_target(f"{tmp_path / 'b' / 'train.py'}:make", "cpu")
    assert one.fn.__module__ != two.fn.__module__
