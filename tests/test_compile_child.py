"""The compile probe's child process (remedies/compile_child.py): a real child on CPU."""

from gobrrr.models import ModelOptions
from gobrrr.remedies.compile_child import compile_in_child, reload_spec


def test_the_child_compiles_the_candidate_and_is_stopped_at_its_timeout():
    spec = reload_spec("examples:mlp", "cpu", 8, ModelOptions())
    assert spec == {"target": "examples:mlp", "device": "cpu", "batch_size": 8,
                    "options": {"seq_len": None, "image_size": None, "dtype": None,
                                "train": False}}
    # generous: a loaded 2-core CI machine starts Python, torch and Inductor slowly
    got = compile_in_child(spec, ["compile"], timeout_s=300.0)
    assert got.error is None and not got.timed_out
    assert got.compile_s is not None and 0 < got.compile_s < got.waited_s
    # stopped: 0.5 s is less than Python and torch take to start
    got = compile_in_child(spec, ["compile"], timeout_s=0.5)
    assert got.timed_out and got.compile_s is None and got.waited_s >= 0.5
    # a child that fails says why in one line
    got = compile_in_child(dict(spec, target="examples:nope"), ["compile"], 300.0)
    assert not got.timed_out and got.error.startswith("UserError: unknown example 'nope'")
