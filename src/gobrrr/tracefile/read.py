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

__all__ = ["TraceHeader", "read_header", "open_trace", "reading", "ijson_backend",
           "TokenBoundedReader", "MAX_TOKEN_BYTES", "READ_BUFFER_BYTES"]


# ---------------------------------------------------------------- files, errors, header


# The longest token a trace may hold: a kernel's templated C++ name or a recorded
# argument's text is kilobytes; a "token" of megabytes is no profiler's. ijson holds a
# token whole and its C backend's scan of one grows with the square of its length
# (8 MiB 5.3 s, 64 MiB 17.9 s, 256 MiB 209 s with its 64 KiB buffer, seen here): a
# compressed trace of 4 MB holding a 4 GiB string ran for hours.
MAX_TOKEN_BYTES = 16 * 2**20
# What ijson reads at a time: with its default 64 KiB a 64 MiB string took 14.9 s, with
# 16 MiB 0.24 s (a token is scanned once per buffer refill).
READ_BUFFER_BYTES = 16 * 2**20
_QUOTE = ord('"')
_WHITESPACE = frozenset(b" \t\r\n")


class TokenBoundedReader:
    """A trace's decompressed bytes, read through a check of the longest token so far: a
    string (the bytes between two quotes) or, outside strings, a run of bytes that are
    neither whitespace nor quotes (a number, a bare word) longer than MAX_TOKEN_BYTES is
    a UserError, raised within one buffer of reaching it. Whitespace outside strings is
    no token: a file padded with it is read (slowly) to its end. An escaped quote is
    taken for a quote, which can only shorten the runs it sees."""

    def __init__(self, raw: IO[bytes], path: Path,
                 max_token_bytes: int = MAX_TOKEN_BYTES) -> None:
        import numpy as np

        self._np = np
        self.raw = raw
        self.path = path
        self.max_token = max_token_bytes
        self.inside = False  # inside a string
        self.run = 0  # bytes of the current token so far
        self.space = np.zeros(256, dtype=bool)
        self.space[list(_WHITESPACE)] = True

    def read(self, size: int = -1) -> bytes:
        data = self.raw.read(size)
        if data:
            self._check(data)
        return data

    def _check(self, data: bytes) -> None:
        """One buffer, vectorised (traces run to gigabytes): a token ends at a quote,
        and outside strings at whitespace; the longest token so far, across buffers."""
        np = self._np
        buf = np.frombuffer(data, dtype=np.uint8)
        quote = buf == _QUOTE
        # inside a string after an odd count of quotes (uint8 wraps at 256: parity kept)
        inside = (np.cumsum(quote, dtype=np.uint8) + np.uint8(self.inside)) & 1
        breaks = np.flatnonzero(quote | (self.space[buf] & (inside == 0)))
        if not len(breaks):
            self.run += len(buf)
        else:
            longest = self.run + int(breaks[0])
            if len(breaks) > 1:
                longest = max(longest, int(np.diff(breaks).max()) - 1)
            self.run = max(longest, len(buf) - int(breaks[-1]) - 1)
            if longest <= self.max_token:
                self.run = len(buf) - int(breaks[-1]) - 1
        self.inside = bool(inside[-1])
        if self.run > self.max_token:
            raise UserError(f"{self.path} holds a token of over "
                            f"{self.max_token // 2**20} MiB (a string or number no "
                            "profiler writes): not a torch.profiler trace; refused")


@contextmanager
def open_trace(path: Path) -> Iterator[IO[bytes]]:
    """The trace's bytes, decompressed when the file is gzip (by its magic number, whatever
    its suffix), through TokenBoundedReader."""
    if path.is_dir():
        raise UserError(f"{path} is a directory, not a trace file")
    with path.open("rb") as raw:
        if raw.read(2) == b"\x1f\x8b":
            raw.seek(0)
            with gzip.GzipFile(fileobj=raw) as gz:
                yield cast(IO[bytes], TokenBoundedReader(cast(IO[bytes], gz), path))
        else:
            raw.seek(0)
            yield cast(IO[bytes], TokenBoundedReader(raw, path))


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
        if "integer overflow" in first:  # yajl's: a valid JSON number past 64 bits
            raise UserError(f"{path} holds an integer beyond 64 bits, which no profiler "
                            "writes: not a torch.profiler trace") from None
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
        events = backend.parse(f, buf_size=READ_BUFFER_BYTES)
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
