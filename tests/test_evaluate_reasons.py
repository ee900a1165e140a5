"""How a candidate's failure reads in its row (evaluate.failure_reason)."""

from gobrrr.remedies.evaluate import TREES_LIVENESS_NOTE, failure_reason


def test_a_cuda_graph_trees_liveness_failure_is_named():
    exc = RuntimeError("TODO: graph recording observed an input tensor deallocate during "
                       "graph  recording that did not occur during replay. Please file "
                       "an issue.")
    assert failure_reason(exc).endswith(f"({TREES_LIVENESS_NOTE})")
    assert failure_reason(exc).startswith("RuntimeError: TODO: graph recording observed")
    assert failure_reason(ValueError("shapes differ")) == "ValueError: shapes differ"
