"""gobrrr: why is my PyTorch workload slow? Compute, memory or overhead, measured here.

`import gobrrr` stays light: torch and the rest load on first use of an attribute.
"""

from __future__ import annotations

from typing import Any

from gobrrr.marks import step, watch
from gobrrr.version import __version__

__all__ = ["__version__", "count", "calibrate", "diagnose", "optimize", "step", "watch",
           "run_script", "LeanDecoder"]


def __getattr__(name: str) -> Any:
    # Lazy: `gobrrr --help` and `import gobrrr` must not pay for importing torch.
    if name == "count":
        from gobrrr.counting import count

        return count
    if name == "calibrate":
        from gobrrr.hardware import calibrate

        return calibrate
    if name == "run_script":
        from gobrrr.script import run_script

        return run_script
    if name == "LeanDecoder":
        from gobrrr.generation_lean import LeanDecoder

        return LeanDecoder
    if name in ("diagnose", "optimize"):
        from gobrrr import api

        return getattr(api, name)
    raise AttributeError(f"module 'gobrrr' has no attribute {name!r}")
