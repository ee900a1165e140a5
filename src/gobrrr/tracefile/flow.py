"""Tensor identities for the ops of a profiler trace, guessed from shapes, for the remedies
that follow data from op to op (hand-written attention: remedies/attention.py).

A live run knows which storage each op read and wrote (counting.OpRecord.reads/writes). A
trace recorded with `record_shapes=True` lists each op's input shapes and dtypes, never a
tensor's identity. The guess, op by op in call order:
- an input is the most recent tensor of its shape and dtype (one never written in the
  trace, such as a parameter or an input, gets an identity of its own the first time);
- a view (transpose, reshape, expand) names its input's tensor under its output's shape,
  as a view shares its input's storage;
- any other op writes a new tensor of its output's shape (rebuilt on meta tensors by
  tracecount.py; unknown where the op could not be rebuilt: it then writes nothing).

Two tensors alive at once with one shape and dtype (q, k and v of an attention) become
one, so a chain can be linked where the program did not link it: whatever uses these
identities says the match was made by shapes (analyze's note). Identities are small
integers here, storage addresses in a live run; the two never meet.
"""

from __future__ import annotations

__all__ = ["ShapeFlow"]

Shape = tuple[int, ...]


class ShapeFlow:
    """Feed ops in call order; each call gives that op's (reads, writes)."""

    def __init__(self) -> None:
        self._latest: dict[tuple[Shape, str], int] = {}
        self._next = 1

    def _new(self) -> int:
        self._next += 1
        return self._next - 1

    def op(self, op_class: str, inputs: list[tuple[Shape, str]],
           out: tuple[Shape, str, int] | None
           ) -> tuple[tuple[int, ...], tuple[tuple[int, int], ...]]:
        """(identities read, ((identity written, bytes written),)) for one op: module
        docstring. inputs: (shape, dtype name) of each tensor argument; out: (shape,
        dtype name, bytes) of its result, None where unknown."""
        reads = []
        for key in inputs:
            if key not in self._latest:
                self._latest[key] = self._new()
            reads.append(self._latest[key])
        if out is None:
            return tuple(reads), ()
        shape, dtype, nbytes = out
        ident = reads[0] if op_class == "view" and reads else self._new()
        self._latest[(shape, dtype)] = ident
        return tuple(reads), ((ident, nbytes),)
