"""Does `settings.once_logging_ignored` keep torch's compile-metrics tracebacks off stderr?

    python benchmarks/once_logging_quiet.py gobrrr|bare

A GPT-2 (config, random weights) forward with labels, compiled (dynamo with the eager
backend: the metrics are written by dynamo, whatever the backend) inside gobrrr's block
(`gobrrr`), or with the same functions put in dynamo's ignored set by hand and no filter
(`bare`). Prints one JSON line: the graph breaks and how many "Unexpected exception
logging" records passed that logger's filters, and whether gobrrr finds that this
torch's metrics trip on the set (the snippet's quieting line hangs on it). On torch 2.11
`bare` shows the defect (each compile logs a traceback); torch 2.13 leaves the set out of
its metrics, so both read 0.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
from collections.abc import Iterator


class _Count(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.n = 0

    def emit(self, record: logging.LogRecord) -> None:
        if str(record.msg).startswith("Unexpected exception logging"):
            self.n += 1


@contextlib.contextmanager
def _by_hand() -> Iterator[None]:
    import torch._dynamo.config as dynamo

    from gobrrr.settings import ignored_logging_name, once_logging_functions

    ignored = getattr(dynamo, ignored_logging_name() or "")
    ignored.update(once_logging_functions())
    yield


def main(way: str) -> int:
    import torch
    import transformers.utils.logging  # noqa: F401 - puts warning_once on logging.Logger
    from torch._dynamo.utils import counters
    from transformers import GPT2Config, GPT2LMHeadModel

    from gobrrr.settings import metrics_trip_on_ignored_functions, once_logging_ignored

    count = _Count()
    logging.getLogger("torch._dynamo.metrics_context").addHandler(count)
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=2)).eval()
    ids = torch.randint(0, 50257, (1, 8))
    model(input_ids=ids, labels=ids)  # eager warns first, as a user's calls have
    block = once_logging_ignored if way == "gobrrr" else _by_hand
    counters.clear()
    with block():
        torch.compile(model, backend="eager")(input_ids=ids, labels=ids)
    print(json.dumps({"way": way, "torch": torch.__version__,
                      "graph_breaks": sum(counters["graph_break"].values()),
                      "unexpected_exception_records": count.n,
                      "metrics_trip_on_ignored_functions":
                          metrics_trip_on_ignored_functions()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))
