"""What Inductor's default compile leaves of an eager call's work, estimated from the
eager call's counted ops (counting.OpRecord: their storages read and written): the bytes
its fusion saves (behind every compile prediction, remedies/savings.fusion; doctor's
compiled-path records, compiled.py; analyze's fusion hint) and the kernels it launches.
Estimates, by bytes and by launches, not a compile.

The byte model, each rule checked against Inductor's own count of the bytes its generated
kernels move (benchmarks/fusion_bytes_check.py, results in
benchmarks/results/cpu/fusion_bytes/README.md; where the count and the generated code
disagree, as on an optimizer's in-place update, against the code):
1. Kernels. The fusable ops (`is_fusable`: FUSABLE_CLASSES, and nll_loss_backward, which
   Inductor decomposes into a pointwise select) between two barriers form one kernel. A
   barrier is an op that launches kernels of its own (a GEMM, a convolution, attention,
   an op of no known class), or a change between a training step's parts (forward,
   backward, optimizer): AOTAutograd compiles each into a graph of its own. Copies and
   views are neither (Inductor folds some, not all).
2. On chip. A tensor a fusable op writes is read on chip by the fusable ops of its
   kernel, and not written at all when nothing outside the kernel reads it and it is not
   state that outlives the call (a storage the call read before writing it keeps its last
   write: a parameter, an optimizer's moments, an input).
3. Read once. A tensor several fusable ops of one kernel read is read once by it.
4. Recompute. For a training step, Inductor's partitioner saves what is cheapest to save:
   a backward kernel that reads tensors the forward's pointwise, norm or softmax ops wrote
   reads instead the tensors they were computed from (through such ops; reductions are
   saved, not recomputed), when that costs no more; the forward then need not write
   them. GPT-2's tanh-GELU: its backward reads the GEMM's output, not four intermediates.
5. Two passes. A training batch norm reduces over the batch and the image, too much for
   one pass: its kernel reads what feeds it twice (the statistics, then the
   normalization), eager or compiled. Its eager op's second read of its own inputs joins
   the fusable bytes (counting.py charges one), so the saving is a share of what eager
   moves.
6. Random numbers. Inductor draws them inside its kernels (`inductor_random`): a random
   op is fusable, an in-place fill (`bernoulli_`, eager dropout's mask on a CPU) does not
   read the storage it fills, a random value is never recomputed, and a mask that
   outlives its kernel (read by the backward) is stored as booleans, one byte an
   element, where eager keeps it in the activations' dtype. On CUDA `native_dropout`
   writes its own boolean mask; its output fuses into what reads it.
7. Inlined on reuse. Inductor keeps a pointwise value it has not written as the
   expression it came from, and a kernel that reads it outside its own reads its sources
   instead; it writes the value (realizes it) only once the expression reads more than
   `realize_reads_threshold` (4) tensors and has several readers, or more than
   `realize_acc_reads_threshold` (8; 12 on a CPU), or when a barrier op reads it. A
   pre-norm transformer's residual stream (x + attn, + mlp, ...) is written every other
   layer, its norms reading 2, 3, 4, then 5 tensors (ViT-B/16's forward on a CPU:
   7.3, 9.7, 12.1, 14.5 MB at batch 4). Inductor on a CPU also writes a reused value
   computed with exp, log, sigmoid or tanh; this estimate, for any device, does not.
8. Folded into the GEMM. An add of a GEMM's output (`mm`, read by nothing else) to
   another tensor, whose sum no other op of its graph reads (a graph output: the
   gradient of a weight two layers share, GPT-2's tied embedding), is the GEMM's
   accumulate (Inductor's `addmm` pattern, on a CPU and a GPU): no kernel of its own; the
   GEMM reads the other tensor. Where ops of its graph read the sum Inductor folds it on
   a CPU, and on a GPU unless they are all pointwise; this estimate leaves those apart.
9. The normalized input is saved. Inductor's partitioner saves what a layer norm's
   backward needs as the normalized input its forward kernel computes (ViT-B/16's
   `mul_2`), not the input: the forward writes it, the backward reads it, and the input
   (a residual stream) has no reader in the backward, so rule 7 may leave it unwritten.
The essay's `x.cos().cos()`: 4N -> 2N accesses.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gobrrr.counting import MATMUL_CLASSES, OpRecord
from gobrrr.phases import BACKWARD, FORWARD, OPTIMIZER

__all__ = ["FUSABLE_CLASSES", "is_fusable", "fusable_bytes_saved", "generated_bytes",
           "compiled_launches"]

# Ops whose intermediate results a fusing compiler can keep in registers.
FUSABLE_CLASSES = ("pointwise", "norm", "softmax", "reduction")
# Ops of no fusable class that Inductor decomposes into fusable ones: the language-model
# loss's backward is a select of -1/n at the targets, fused into the log-softmax's
# backward (compiled GPT-2's loss backward: one kernel, 206 MB at 2 x 256 tokens).
_DECOMPOSED_FUSABLE = ("aten::nll_loss_backward", "aten::nll_loss2d_backward")
# What a backward may recompute rather than read: elementwise work after its reductions
# (a norm's or softmax's statistics are saved; the normalized output is recomputed).
_RECOMPUTABLE_CLASSES = ("pointwise", "norm", "softmax")
# Random ops Inductor generates inside its kernels (rule 6); the in-place fills among them
# overwrite a storage without reading it; native_dropout's mask is boolean already.
_RANDOM = ("aten::bernoulli_", "aten::bernoulli", "aten::native_dropout", "aten::uniform_",
           "aten::normal_", "aten::rand", "aten::rand_like", "aten::randn",
           "aten::randn_like")
_RANDOM_FILLS = ("aten::bernoulli_", "aten::uniform_", "aten::normal_")
_OWN_MASK = ("aten::native_dropout",)
# Inductor's realization thresholds (torch._inductor.config; rule 7): a reused pointwise
# value reading more tensors than the first is written, any value reading more than the
# second is (a CPU's own threshold is 12).
_REALIZE_READS = 4
_REALIZE_ACC_READS = 8
# Bytes an element of each dtype name (counting.dtype_name); a mask stored as booleans
# takes one (rule 6). Other dtypes keep their bytes.
_ITEM_BYTES = {"fp64": 8, "fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2}


def is_fusable(r: OpRecord) -> bool:
    """An op Inductor generates into a fused kernel (module docstring, rules 1 and 6)."""
    return r.op_class in FUSABLE_CLASSES or r.op in _DECOMPOSED_FUSABLE or r.op in _RANDOM


def _part(phase: str) -> str:
    """The compiled graph an op of a training step lands in: backward, optimizer, or the
    forward (everything else, user ranges included)."""
    return phase if phase in (BACKWARD, OPTIMIZER) else FORWARD


def _two_pass(r: OpRecord) -> bool:
    """A training batch norm (rule 5): forward writes its statistics besides its output
    (in eval they are empty), and every batch-norm backward reduces before it applies."""
    if "batch_norm" not in r.op:
        return False
    return "backward" in r.op or sum(1 for _, n in r.writes if n > 0) >= 2


@dataclass
class _Value:
    """One tensor of the call: its storage, the op that wrote it (INPUT: the call read it
    before anything wrote it), its bytes (UNKNOWN: an input whose size the record lacks)
    and the ops that read it."""

    storage: int
    producer: int
    nbytes: int
    readers: list[int] = field(default_factory=list)


INPUT = -1
UNKNOWN = -1


@dataclass
class _Flow:
    """The call as values: each op's kernel (rule 1) and the values it reads."""

    records: list[OpRecord]
    fusable: list[bool]
    kernel: list[int]
    values: list[_Value]
    reads: list[list[int]]  # per op: indices into values
    persistent: set[int]  # storages read before they were written
    last_write: dict[int, int]  # storage -> the op that last wrote it
    # values whose backward reads a recompute took away (rule 4): with no reader left
    # outside their kernel they are not written, unlike an output of the call
    recomputed: set[int] = field(default_factory=set)
    unread_bytes: int = 0  # what in-place random fills' eager calls read (rule 6)
    # the adds folded into a GEMM (rule 8) -> the bytes of the input the GEMM reads
    folded: dict[int, int] = field(default_factory=dict)


def _folded(records: list[OpRecord]) -> dict[int, int]:
    """Rule 8: the adds folded into the GEMM whose output they read -> the bytes of their
    other input, which the GEMM reads instead."""
    writer: dict[int, int] = {}  # storage -> the op that last wrote it
    readers: dict[tuple[int, int], list[int]] = {}  # (storage, its writer) -> ops reading
    for i, r in enumerate(records):
        for ptr in dict.fromkeys(r.reads):
            if ptr in writer:
                readers.setdefault((ptr, writer[ptr]), []).append(i)
        for ptr, _ in r.writes:
            writer[ptr] = i
    folded: dict[int, int] = {}
    for (ptr, w), js in readers.items():
        add = records[js[0]]
        if (records[w].op != "aten::mm" or len(js) != 1 or add.op != "aten::add"
                or len(add.writes) != 1 or len(set(add.reads)) != 2):
            continue
        sums = readers.get((add.writes[0][0], js[0]), [])
        if any(_part(records[j].phase) == _part(add.phase) for j in sums):
            continue
        folded[js[0]] = sum(n for p, n in add.read_sizes if p != ptr)
    return folded


def _flow(records: list[OpRecord]) -> _Flow:
    fusable = [is_fusable(r) for r in records]
    folded = _folded(records)
    kernel: list[int] = []
    k, part = 0, None
    for r, f in zip(records, fusable, strict=True):
        barrier = not f and r.op_class not in ("copy", "view")
        # a folded add is the GEMM's: a kernel of its own, nothing fuses with it
        barrier = barrier or len(kernel) in folded or len(kernel) - 1 in folded
        k += barrier or (part is not None and _part(r.phase) != part)
        part = _part(r.phase)
        kernel.append(k)
    values: list[_Value] = []
    reads: list[list[int]] = []
    seen: set[int] = set()
    persistent: set[int] = set()
    last_write: dict[int, int] = {}
    live: dict[int, int] = {}  # storage -> the value it holds
    unread = 0
    for i, r in enumerate(records):
        sizes = dict(r.read_sizes)
        mine: list[int] = []
        filled = {p for p, _ in r.writes} if r.op in _RANDOM_FILLS else set()
        for ptr in dict.fromkeys(r.reads):
            if ptr in filled:  # overwritten with random numbers, never read
                unread += max(0, sizes.get(ptr, 0))
                continue
            if ptr not in seen:
                seen.add(ptr)
                persistent.add(ptr)
                live[ptr] = len(values)
                values.append(_Value(ptr, INPUT, sizes.get(ptr, UNKNOWN)))
            values[live[ptr]].readers.append(i)
            mine.append(live[ptr])
        reads.append(mine)
        for ptr, nbytes in r.writes:
            seen.add(ptr)
            last_write[ptr] = i
            live[ptr] = len(values)
            values.append(_Value(ptr, i, nbytes))
    return _Flow(records, fusable, kernel, values, reads, persistent, last_write,
                 unread_bytes=unread, folded=folded)


def _normalized_saved(f: _Flow) -> int:
    """Rule 9: a layer norm's backward reads the normalized input its forward kernel
    wrote (Inductor's partitioner saves it, ViT-B/16's `mul_2`), not the input; returns
    the bytes that adds (the forward writes it; eager never did). Edits `f` in place: the
    input loses that reader (rule 7 may then leave it unwritten)."""
    added = 0
    for j, r in enumerate(f.records):
        if r.op != "aten::native_layer_norm_backward":
            continue
        for v in list(f.reads[j]):
            val = f.values[v]
            fwd = [i for i in val.readers if f.records[i].op == "aten::native_layer_norm"
                   and f.reads[i] and f.reads[i][0] == v]
            if not fwd or val.nbytes <= 0:
                continue
            xhat = len(f.values)
            f.values.append(_Value(-1 - xhat, fwd[-1], val.nbytes, [j]))
            f.reads[j][f.reads[j].index(v)] = xhat
            val.readers.remove(j)
            added += val.nbytes
            break
    return added


def _recompute(f: _Flow) -> int:
    """Rule 4: move each backward kernel's reads of recomputable forward values to the
    values they derive from, where that reads no more; returns the bytes that saves (the
    reads removed less the reads added). Edits `f`'s readers and reads in place."""
    if not any(r.phase == BACKWARD for r in f.records):
        return 0

    def recomputable(v: int) -> bool:
        p = f.values[v].producer
        return (p != INPUT and f.fusable[p]
                and f.records[p].op_class in _RECOMPUTABLE_CLASSES
                and f.records[p].op not in _RANDOM
                and _part(f.records[p].phase) == FORWARD)

    memo: dict[int, frozenset[int]] = {}

    def roots(v: int) -> frozenset[int]:
        # iterative (a long elementwise chain must not reach Python's recursion limit);
        # a value's producer reads only earlier values, so the walk ends
        todo = [v]
        while todo:
            u = todo[-1]
            if u in memo:
                todo.pop()
            elif not recomputable(u):
                memo[u] = frozenset([u])
                todo.pop()
            else:
                parts = f.reads[f.values[u].producer]
                missing = [w for w in parts if w not in memo]
                if missing:
                    todo.extend(missing)
                else:
                    memo[u] = frozenset().union(*(memo[w] for w in parts))
                    todo.pop()
        return memo[v]

    by_kernel: dict[int, dict[int, list[int]]] = {}  # kernel -> value -> its readers there
    for v, val in enumerate(f.values):
        if not recomputable(v):
            continue
        for j in val.readers:
            if (f.fusable[j] and f.records[j].phase == BACKWARD
                    and f.kernel[j] != f.kernel[val.producer]):
                by_kernel.setdefault(f.kernel[j], {}).setdefault(v, []).append(j)
    read_by_kernel: dict[int, set[int]] = {k: set() for k in by_kernel}
    for j, k in enumerate(f.kernel):
        if f.fusable[j] and k in read_by_kernel:
            read_by_kernel[k].update(f.reads[j])
    saved = 0
    for k, saved_reads in by_kernel.items():
        read_there = read_by_kernel[k]
        direct = sum(f.values[v].nbytes for v in saved_reads)
        derived: set[int] = set()
        for v in saved_reads:
            derived |= roots(v)
        added = derived - read_there
        if any(f.values[w].nbytes == UNKNOWN for w in added):
            continue
        cost = sum(f.values[w].nbytes for w in added)
        if cost > direct:
            continue
        first = min(j for js in saved_reads.values() for j in js)
        for v, js in saved_reads.items():
            f.recomputed.add(v)
            f.values[v].readers = [j for j in f.values[v].readers if j not in js]
            for j in js:
                f.reads[j].remove(v)
            saved += f.values[v].nbytes * len(js)  # each reader's eager bytes held it
        for w in added:
            f.values[w].readers.append(first)
            f.reads[first].append(w)
        saved -= cost
    return saved


def _inline(f: _Flow) -> int:
    """Rule 7: move each read of an inlined pointwise value by a kernel other than its
    own (of the same part) to the values it is computed from; returns the bytes that
    saves (the reads removed less the reads added: a kernel already reading a source
    reads it once). Edits `f`'s readers and reads in place, after rule 4 (a value the
    backward still reads is saved for it: written)."""
    sources: dict[int, frozenset[int]] = {}  # an inlined value -> what it is read as
    ops_in: dict[int, list[int]] = {}  # kernel -> its fusable ops
    for i, k in enumerate(f.kernel):
        if f.fusable[i]:
            ops_in.setdefault(k, []).append(i)
    saved = 0
    for v, val in enumerate(f.values):
        p = val.producer
        if (p == INPUT or not f.fusable[p] or f.records[p].op_class != "pointwise"
                or f.records[p].op in _RANDOM or val.nbytes <= 0
                or val.storage in f.persistent or not val.readers):
            continue
        part = _part(f.records[p].phase)
        if any(not f.fusable[j] and f.records[j].op_class != "view" or j in f.folded
               or _part(f.records[j].phase) != part for j in val.readers):
            continue  # a barrier (a folded add: its GEMM) or another graph reads it
        reads = frozenset().union(*(sources.get(w, frozenset([w])) for w in f.reads[p]))
        users = len(set(val.readers))
        if (len(reads) > _REALIZE_ACC_READS
                or (users > 1 and len(reads) > _REALIZE_READS)
                or any(f.values[w].nbytes == UNKNOWN for w in reads)):
            continue
        sources[v] = reads
        moved: dict[int, list[int]] = {}  # kernel -> its ops that read v
        for j in val.readers:
            if f.kernel[j] != f.kernel[p] and f.fusable[j]:
                moved.setdefault(f.kernel[j], []).append(j)
        if not moved:
            continue
        f.recomputed.add(v)
        for k, js in moved.items():
            there = {w for i in ops_in[k] for w in f.reads[i]}
            for j in js:
                f.reads[j].remove(v)
            f.values[v].readers = [j for j in f.values[v].readers if j not in js]
            saved += val.nbytes * len(js)  # each reader's eager bytes held it
            for w in reads - there:
                f.values[w].readers.append(js[0])
                f.reads[js[0]].append(w)
                saved -= f.values[w].nbytes
    return saved


def _second_passes(f: _Flow) -> tuple[int, int]:
    """Rule 5: (the bytes a two-pass op's eager call reads again: its own inputs, the
    bytes its fused kernel reads again: what feeds it from outside the kernel)."""
    eager = fused = 0
    for t, r in enumerate(f.records):
        if not (f.fusable[t] and _two_pass(r)):
            continue
        eager += sum(max(0, f.values[v].nbytes) for v in set(f.reads[t]))
        chain: set[int] = set()
        outside: set[int] = set()
        todo = [t]
        while todo:
            i = todo.pop()
            if i in chain:
                continue
            chain.add(i)
            for v in f.reads[i]:
                p = f.values[v].producer
                if p != INPUT and f.fusable[p] and f.kernel[p] == f.kernel[t]:
                    todo.append(p)
                else:
                    outside.add(v)
        fused += sum(max(0, f.values[v].nbytes) for v in outside)
    return eager, fused


def _mask_bytes(f: _Flow) -> dict[int, int]:
    """Rule 6: value -> its bytes as booleans, for the random masks (a random op's output
    other than native_dropout's, and forward pointwise values computed from masks alone:
    the eager dropout's scaled mask) whose dtype takes more than a byte an element."""
    masks: dict[int, int] = {}
    for v, val in enumerate(f.values):
        p = val.producer
        if p == INPUT or val.nbytes <= 0:
            continue
        r = f.records[p]
        derived = (r.op_class == "pointwise" and _part(r.phase) == FORWARD
                   and f.reads[p] and all(w in masks for w in f.reads[p]))
        if (r.op in _RANDOM and r.op not in _OWN_MASK) or derived:
            item = _ITEM_BYTES.get(r.dtype, 1)
            if item > 1:
                masks[v] = val.nbytes // item
    return masks


def fusable_bytes_saved(records: list[OpRecord]) -> tuple[int, int]:
    """(bytes Inductor's fusion saves of what the fusable ops move, what those ops move
    eagerly), by the module docstring's rules. Against Inductor's own count on this
    project's CPU (generated_bytes, benchmarks/fusion_bytes_check.py): inference of GPT-2,
    BERT-base, ViT-B/16, ResNet-50 and ConvNeXt-T within 0.93-1.02x; training steps'
    forward and backward (GPT-2, BERT-base, ResNet-50, ViT-B/16) 1.00x, 1.02x, 1.03x and
    0.89x; AdamW's step at the 7 parameter-sized passes its generated kernel makes (the
    count says 8). An estimate."""
    saved, total, _ = _estimate(records)
    return saved, total


def _estimate(records: list[OpRecord]) -> tuple[int, int, int]:
    """fusable_bytes_saved's pair, and the bytes of the folded adds' inputs the GEMMs read
    (rule 8): moved from generated kernels to extern calls."""
    f = _flow(records)
    masks = _mask_bytes(f)
    saved = -_normalized_saved(f)
    saved += _recompute(f) + f.unread_bytes
    saved += _inline(f)
    for v, val in enumerate(f.values):
        if val.nbytes == UNKNOWN:
            continue
        per_kernel: dict[int, int] = {}
        for j in val.readers:
            if f.fusable[j]:
                per_kernel[f.kernel[j]] = per_kernel.get(f.kernel[j], 0) + 1
        kept = True
        if val.producer != INPUT and f.fusable[val.producer]:
            inside = per_kernel.pop(f.kernel[val.producer], 0)
            kept = (inside < len(val.readers)
                    or (val.storage in f.persistent
                        and f.last_write[val.storage] == val.producer))
            read = bool(val.readers) or v in f.recomputed
            saved += val.nbytes * inside + (0 if kept or not read else val.nbytes)
        saved += val.nbytes * sum(n - 1 for n in per_kernel.values())
        if v in masks and kept and val.readers:
            # a mask that leaves its kernel: written, and read once by each kernel and
            # op outside, as booleans
            outside = len(per_kernel) + sum(1 for j in val.readers if not f.fusable[j])
            saved += (val.nbytes - masks[v]) * (1 + outside)
    eager_again, fused_again = _second_passes(f)
    total = sum(r.bytes for r, fu in zip(records, f.fusable, strict=True) if fu) + eager_again
    saved += eager_again - fused_again
    # a folded add: its read of the GEMM's output and its write are the GEMM's own write
    saved += sum(records[i].bytes - moved for i, moved in f.folded.items())
    return max(0, min(saved, total)), total, sum(f.folded.values())


def generated_bytes(records: list[OpRecord]) -> int:
    """The bytes Inductor's generated kernels move for the call, by this estimate: the
    fusable ops' bytes less what fusion saves, plus every other op's that is not an
    extern call (GEMMs, convolutions, attention) or a view: copies, scatters, the ops
    Inductor lowers without fusing."""
    saved, fusable, into_gemms = _estimate(records)
    rest = sum(r.bytes for r in records
               if not is_fusable(r) and r.op_class not in (*MATMUL_CLASSES, "view"))
    return fusable - saved - into_gemms + rest


def compiled_launches(records: list[OpRecord], kernel_ops: list[int | None]
                      ) -> tuple[int, int]:
    """(kernels the eager call launched, an estimate of the kernels Inductor's default
    compile launches for it). `kernel_ops`: the launching op's record index of every
    eager kernel (None: outside any op, which stays). Fusable ops (FUSABLE_CLASSES and
    copies, which Inductor folds into their neighbours' loads and stores) joined by a
    tensor one writes and another reads become one kernel per joined group; any other op
    that launched is one extern call (a GEMM, a convolution, attention). Views launch
    nothing. Checked on the H200's plain traces (session s, torch 2.11): GPT-2 8x512
    eager 259 kernels, estimated 122, compiled 134; ResNet-50 b256 285, 108 and 128; the
    MLP at batch 1 8, 8 and 8 a call. An estimate: Inductor also fuses across what this
    keeps apart (a reduction into its consumer) and splits what it joins."""
    per_op: dict[int, int] = {}
    outside = 0
    for i in kernel_ops:
        if i is None:
            outside += 1
        else:
            per_op[i] = per_op.get(i, 0) + 1
    group: dict[int, int] = {}  # union-find over the fusable ops that launched

    def root(i: int) -> int:
        while group[i] != i:
            group[i] = group[group[i]]
            i = group[i]
        return i

    producer: dict[int, int] = {}  # storage -> the fusable op that last wrote it
    extern = 0
    for r in records:
        if not per_op.get(r.index):
            continue
        if not (is_fusable(r) or r.op_class == "copy"):
            extern += 1
            for ptr, _ in r.writes:
                producer.pop(ptr, None)
            continue
        group[r.index] = r.index
        for ptr in r.reads:
            if ptr in producer:
                group[root(r.index)] = root(producer[ptr])
        for ptr, _ in r.writes:
            producer[ptr] = r.index
    fused = len({root(i) for i in group})
    return sum(per_op.values()) + outside, extern + fused + outside

