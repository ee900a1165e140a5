"""A `torch.profiler` trace file written elsewhere (Chrome trace-event JSON, `.json` or
`.json.gz`, from `prof.export_chrome_trace` or `tensorboard_trace_handler`): opening it,
its header, and one error style for every reader.

`read_header` reads only the top-level keys written before `traceEvents` (device
properties, distributedInfo, record_shapes); `open_trace` + `reading` give every reader
the same file handling and one-line errors (columns.py streams the events of traces of
any size; dist/commread.py reads the doctor's own small rank traces whole).
"""

from __future__ import annotations

import gzip
import json
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, cast

from gobrrr.errors import UserError

__all__ = ["TraceHeader", "read_header", "open_trace", "reading", "ijson_backend"]


# ---------------------------------------------------------------- files, errors, header


@contextmanager
def open_trace(path: Path) -> Iterator[IO[bytes]]:
    """The trace's bytes, decompressed when the file is gzip (by its magic number, whatever
    its suffix)."""
    if path.is_dir():
        raise UserError(f"{path} is a directory, not a trace file")
    with path.open("rb") as raw:
        if raw.read(2) == b"\x1f\x8b":
            raw.seek(0)
            with gzip.GzipFile(fileobj=raw) as gz:
                yield cast(IO[bytes], gz)
        else:
            raw.seek(0)
            yield raw


@contextmanager
def reading(path: Path) -> Iterator[None]:
    """Map what reading a trace can raise to one UserError line naming the file."""
    try:
        yield
    except UserError:
        raise
    except FileNotFoundError:
        raise UserError(f"no such file: {path}") from None
    except (OSError, EOFError, zlib.error) as exc:  # unreadable, or a .gz cut short
        raise UserError(f"{path}: cannot read it ({exc})") from None
    except ValueError as exc:  # json's JSONDecodeError
        raise UserError(f"{path} is not JSON ({exc})") from None
    except Exception as exc:
        if type(exc).__name__ not in ("JSONError", "IncompleteJSONError"):  # ijson's
            raise
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if "premature EOF" in first:
            raise UserError(f"{path}: the JSON ends early (a file cut short?)") from None
        raise UserError(f"{path} is not JSON ({first})") from None


@dataclass(frozen=True)
class TraceHeader:
    """The top-level keys a trace has before `traceEvents` (Kineto writes its metadata
    there): small values only, the events are not read."""

    path: Path
    meta: dict[str, Any]

    @property
    def device_properties(self) -> list[dict[str, Any]]:
        props = self.meta.get("deviceProperties")
        return [p for p in props if isinstance(p, dict)] if isinstance(props, list) else []

    @property
    def device_name(self) -> str | None:
        props = self.device_properties
        return str(props[0]["name"]) if props and props[0].get("name") else None

    @property
    def distributed(self) -> dict[str, Any] | None:
        """`distributedInfo` (rank, world_size, backend), written by torch.profiler when
        torch.distributed was initialized; as an object or as a JSON string."""
        info = self.meta.get("distributedInfo")
        if isinstance(info, str):
            try:
                info = json.loads(info)
            except ValueError:
                return None
        return info if isinstance(info, dict) else None

    @property
    def record_shapes(self) -> bool | None:
        v = self.meta.get("record_shapes")
        return None if v is None else str(v) not in ("0", "false", "False", "")

    @property
    def torch_version(self) -> str | None:
        """torch.profiler writes no version of its own; a user's preset metadata or a
        tool that merged traces sometimes does (e.g. "torch_version")."""
        for key, value in self.meta.items():
            k = key.lower()
            if "torch" in k and "version" in k and isinstance(value, (str, int, float)):
                return str(value)
        return None


def read_header(path: str | Path) -> TraceHeader:
    """The metadata before `traceEvents`; a UserError unless the file is a JSON object
    with a `traceEvents` list. Reads only as far as the events' start."""
    p = Path(path)
    meta: dict[str, Any] = {}
    backend, _note = ijson_backend()
    with reading(p), open_trace(p) as f:
        events = backend.parse(f)
        first = next(events, None)
        if first is None or first[:2] != ("", "start_map"):
            raise UserError(f"{p} is not a torch.profiler trace (not a JSON object)")
        for prefix, event, value in events:
            if (prefix, event) == ("", "end_map"):
                break
            if (prefix, event) != ("", "map_key"):
                continue
            if value == "traceEvents":
                if next(events, (None, None, None))[1] != "start_array":
                    break
                return TraceHeader(p, meta)
            meta[value] = _build_value(events)
    raise UserError(f"{p} is not a torch.profiler trace (no traceEvents list)")


def ijson_backend() -> tuple[Any, str | None]:
    """ijson's C backend (yajl2_c, ~10x faster) when it is installed, else its pure-Python
    one, with a note saying so. Imported here only: `import gobrrr` never needs ijson."""
    try:
        import ijson
    except ImportError:  # a dependency, but gobrrr may run from a source tree without it
        raise UserError("gobrrr analyze needs ijson, which is not installed here: "
                        "pip install 'ijson>=3.1' (a dependency of gobrrr)") from None

    try:
        return ijson.get_backend("yajl2_c"), None
    except ImportError:
        return ijson.get_backend("python"), (
            "ijson's C backend (yajl2_c) is not available here: the trace was parsed by its "
            "pure-Python backend, several times slower")


def _build_value(events: Iterator[tuple[str, str, Any]]) -> Any:
    """One JSON value from ijson.parse events (the next value in the stream)."""
    from ijson.common import ObjectBuilder

    builder = ObjectBuilder()
    depth = 0
    for _prefix, event, value in events:
        builder.event(event, value)
        if event in ("start_map", "start_array"):
            depth += 1
        elif event in ("end_map", "end_array"):
            depth -= 1
        if depth == 0:
            return builder.value
    return None
