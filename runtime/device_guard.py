"""The verify graph's own check of its fast-path domain, on the device.

The host guards (``runtime/fallback.py``) judge a step by the host's
``seq_len_bounds``; inside a captured graph nobody looks at what the buffers
really hold.  ``DeviceGuard`` adds that look as captured device ops: it
evaluates the same guard expressions the host evaluates (the variants'
manifest guards, specialized from the families' ``GuardRule`` records) over
the true ``min`` / ``max`` of ``seq_lens``, checks that every block-table entry
a step maps is allocated (non-negative) and keeps its slots inside int32, and
that the accepted counts lie in ``0 .. W - 1``.  Each failed condition sets one
bit of a persistent int32 ``flag`` (sticky until the host clears it)::

    guard = DeviceGuard(DeviceGuardSpec.of(plan, width=4), device)
    guard.fork(bufs, bucket)    # enqueue the checks (on a side stream on a device)
    ...target forward...
    guard.join()                # the graph's main stream waits for them
    guard.names(int(guard.flag))  # ['block_table_entry'] when a -1 entry was mapped

The host never reads the flag synchronously: the runtime copies it with the
step's lagged host copy (``runtime/host_mirror.py``) and a set bit sends the
next step to the eager path (``device_guard_trip``).

Which positions need a block-table entry is read off the families' rules
too: a rule ``max_seq_len + K <= BT * BS`` says the family maps positions
``S .. S + K - 1``; the widest such reach over the plan's families is checked.
"""

from __future__ import annotations

import ast
import functools
import operator
from dataclasses import dataclass
from typing import Mapping

import torch

from ..specializations.expr import GUARD_NAMES, safe_eval, validate_expression
from ..specializations.families import DEFAULT_NUM_SPLITS, FAMILIES, GUARD_RULE_NAMES
from ..specializations.guard_check import GUARD_BITS, GUARD_CHECK, GUARD_SLOTS
from ..specializations.targets import TARGET_OF_DEVICE

__all__ = [
    "BLOCK_ENTRY",
    "ACCEPTED_RANGE",
    "SCRATCH_ENTRY",
    "DeviceGuard",
    "DeviceGuardSpec",
    "device_eval",
    "kernel_guards",
    "guard_kernel",
    "row_bounds",
]

I32 = torch.int32
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
BLOCK_ENTRY, ACCEPTED_RANGE, SCRATCH_ENTRY = GUARD_BITS
_DATA_NAMES = ("min_seq_len", "max_seq_len")

_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv}
_CMPOPS = {
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
}


# Bool tensors combine with Python bools through ``&`` / ``|`` (a scalar operand makes no host tensor,
# which a graph capture would refuse); two Python bools stay Python.
def _and(a, b):
    if isinstance(a, torch.Tensor):
        return a & b
    return b & a if isinstance(b, torch.Tensor) else a and b


def _or(a, b):
    if isinstance(a, torch.Tensor):
        return a | b
    return b | a if isinstance(b, torch.Tensor) else a or b


def _not(a):
    return torch.logical_not(a) if isinstance(a, torch.Tensor) else not a


def device_eval(text: str, env: Mapping[str, object]):
    """A guard expression over tensors: a bool tensor (or a Python bool when no tensor is named).

    The same integer subset as ``specializations.expr.safe_eval`` (checked
    first by ``validate_expression``), evaluated with tensor ops so nothing is
    read back to the host: ``and`` / ``or`` / ``not`` and chained comparisons
    become ``logical_*``.
    """

    def walk(node):
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            return env[node.id]
        if isinstance(node, ast.BinOp):
            return _BINOPS[type(node.op)](walk(node.left), walk(node.right))
        if isinstance(node, ast.UnaryOp):
            return -walk(node.operand) if isinstance(node.op, ast.USub) else _not(walk(node.operand))
        if isinstance(node, ast.BoolOp):
            combine = _and if isinstance(node.op, ast.And) else _or
            out = walk(node.values[0])
            for v in node.values[1:]:
                out = combine(out, walk(v))
            return out
        if isinstance(node, ast.Compare):
            left, out = walk(node.left), None
            for op, comp in zip(node.ops, node.comparators):
                right = walk(comp)
                this = _CMPOPS[type(op)](left, right)
                out = this if out is None else _and(out, this)
                left = right
            return out
        raise ValueError(f"{text!r}: {type(node).__name__} has no device form")  # validate_expression refused it

    return walk(_parsed(text))


@functools.lru_cache(maxsize=256)
def _parsed(text: str) -> ast.expr:
    validate_expression(text, GUARD_NAMES)
    return ast.parse(text, mode="eval").body


def kernel_guards(kernel) -> tuple[str, ...]:
    """The guard expressions ``kernel.check_guards`` evaluates: every built target's, in manifest order."""
    library, key = getattr(kernel, "library", None), getattr(kernel, "key", None)
    if library is None or key is None:
        return ()
    return tuple(expr for e in library.entries() if e.key == key() for expr, _ in e.guards)


def _reach(family: str, width: int, block_table_width: int, block_size: int) -> int:
    """How many positions from ``S`` on a family maps through the block table (0 if none).

    A rule that names ``BT`` bounds the positions: the largest ``max_seq_len``
    it admits, ``L``, leaves ``BT * BS - L`` positions ``S .. S + K - 1`` inside
    the table.  Found by bisection over the rule itself, so the reach is the
    rule's, whatever its form.
    """
    cap = block_table_width * block_size
    reach = 0
    for rule in FAMILIES[family].guard_rules:
        if "BT" not in rule.expr:
            continue
        env = {
            "min_seq_len": 0,
            "batch": 1,
            "W": width,
            "BT": block_table_width,
            "BS": block_size,
            "NS": DEFAULT_NUM_SPLITS,
        }
        holds = lambda s: safe_eval(rule.expr, {**env, "max_seq_len": s}, GUARD_RULE_NAMES)  # noqa: E731
        if not holds(0):
            continue
        lo, hi = 0, cap  # holds(lo); find the largest admitted length below cap + 1
        if holds(hi):
            continue  # the rule does not bound positions by the table
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if holds(mid) else (lo, mid)
        reach = max(reach, cap - lo)
    return reach


def guard_kernel(library, width: int, kv_layout: tuple[int, int], device):
    """``library``'s ``spec_verify_guard_check`` at this layout for ``device``'s target (a ``KernelCallable``),
    or None when the build lacks it (the guard then runs its tensor ops)."""
    bt, bs = kv_layout
    target = TARGET_OF_DEVICE.get(torch.device(device).type)
    if target is None or not library.has(GUARD_CHECK, width, bt, bs, target=target):
        return None
    return library.get(GUARD_CHECK, width, bt, bs, target=target)


def _probes(at: int) -> set[int]:
    """Where a half-line's claim is checked: the int32 ends, 0, +-2**k and their neighbours, and ``at``'s."""
    out = {INT32_MIN, INT32_MAX, 0, at - 1, at, at + 1}
    for k in range(31):
        out |= {2**k - 1, 2**k, 2**k + 1, -(2**k) - 1, -(2**k), -(2**k) + 1}
    return {x for x in out if INT32_MIN <= x <= INT32_MAX}


def row_bounds(expr: str, batch: int) -> tuple[int, int] | None:
    """``(lo, hi)`` such that ``expr`` holds for a batch of ``batch`` rows exactly when every row's length
    lies in ``lo .. hi`` (``lo > hi``: it never holds); None when no such bounds exist.

    An expression over ``max_seq_len`` alone (``batch`` fixed) that holds on a half-line ``.. hi`` of the
    int32 lengths holds for the batch exactly when every row's length is ``<= hi``; one over
    ``min_seq_len`` alone on ``lo ..``, likewise.  The threshold is found by bisection over the expression
    itself and the half-line checked at the int32 ends, around the threshold and at every +-2**k; an
    expression naming both lengths, or not a half-line of the right side, gives None (the device guard then
    keeps its tensor-op checks, which evaluate it over the batch's true minimum and maximum).
    """
    names = {n.id for n in ast.walk(_parsed(expr)) if isinstance(n, ast.Name)} & set(_DATA_NAMES)

    def holds(mn: int, mx: int) -> bool:
        return bool(safe_eval(expr, {"min_seq_len": mn, "max_seq_len": mx, "batch": batch}, GUARD_NAMES))

    if not names:
        return (INT32_MIN, INT32_MAX) if holds(0, 0) else (1, 0)
    if len(names) == 2:
        return None
    upper = names == {"max_seq_len"}
    f = (lambda x: holds(0, x)) if upper else (lambda x: holds(x, 0))  # noqa: E731
    lo, hi = INT32_MIN, INT32_MAX
    if f(hi if upper else lo):  # holds on the whole range
        bound = hi if upper else lo
    elif not f(lo if upper else hi):  # holds nowhere (on the right side, at least; the probes tell)
        return (1, 0) if not any(f(x) for x in _probes(0)) else None
    else:  # f(lo) != f(hi): the threshold, by bisection
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if f(mid) == upper else (lo, mid)
        bound = lo if upper else hi
    if not all(f(x) == (x <= bound if upper else x >= bound) for x in _probes(bound)):
        return None
    return (INT32_MIN, bound) if upper else (bound, INT32_MAX)


@dataclass(frozen=True)
class DeviceGuardSpec:
    """What the device checks for one verify width and layout (see the module docstring)."""

    width: int
    block_table_width: int
    block_size: int
    guards: tuple[str, ...]  # the host's guard expressions that read the data (min / max seq_len)
    reach: int  # positions S .. S + reach - 1 need an allocated block
    scratch_block: int = 0  # padding rows' block: no live row may map it

    @classmethod
    def of(cls, plan, width: int, scratch_block: int = 0) -> "DeviceGuardSpec":
        """The spec of a ``StepPlan``: its kernels' manifest guards, its families' block reach."""
        bt, bs = plan.kv_layout
        exprs: dict[str, None] = {}
        for k in plan.kernels.values():
            for expr in kernel_guards(k):
                if any(n in expr for n in _DATA_NAMES):
                    exprs.setdefault(expr)
        families = [s.variant.family for s in plan.steps if s.kind == "kernel"]
        reach = max((_reach(f, width, bt, bs) for f in families), default=0)
        return cls(int(width), int(bt), int(bs), tuple(exprs), reach, int(scratch_block))

    @property
    def names(self) -> tuple[str, ...]:
        """Every condition: the guard expressions, then the table and count checks (``bits`` places them)."""
        return (*self.guards, BLOCK_ENTRY, ACCEPTED_RANGE, SCRATCH_ENTRY)

    @property
    def bits(self) -> tuple[int, ...]:
        """The flag bit of each of ``names``: guard ``e`` at bit ``e``, the three checks after
        ``GUARD_SLOTS`` (the kernel's layout, ``docs/kernels.md``), or after the guards when there are more."""
        first = max(GUARD_SLOTS, len(self.guards))
        if first + 3 > 31:
            raise ValueError(f"{len(self.guards)} guard expressions do not fit the int32 flag")
        return (*range(len(self.guards)), first, first + 1, first + 2)

    def kernel_params(self, batch: int) -> list[int] | None:
        """``spec_verify_guard_check``'s ``guard_params`` for a bucket of ``batch`` rows: each guard's row
        bounds (``row_bounds``; unused slots admit every length), the reach, the scratch block and ``W - 1``;
        None when the kernel cannot decide these guards (more than ``GUARD_SLOTS``, or one without row bounds).
        """
        if len(self.guards) > GUARD_SLOTS:
            return None
        bounds = [row_bounds(g, batch) for g in self.guards]
        if any(b is None for b in bounds):
            return None
        bounds += [(INT32_MIN, INT32_MAX)] * (GUARD_SLOTS - len(bounds))
        return [lo for lo, _ in bounds] + [hi for _, hi in bounds] + [self.reach, self.scratch_block, self.width - 1]


class DeviceGuard:
    """The device-side checks of one runtime and their persistent ``flag`` (int32, shape ``(1,)``).

    ``api`` is a ``DeviceAPI`` (None on the CPU, where the checks run in line; so do they with ``beside=False``).
    ``kernel``: a built ``spec_verify_guard_check`` of the runtime's layout
    (a ``KernelCallable``); with it, each bucket of ``buffers`` (bucket ->
    its step buffers) whose guards have row bounds gets its ``guard_params``
    written here and is checked by one launch, which writes the per-sequence
    bits (``guard_bits``) and ORs them into the flag itself, instead of about
    thirty tensor ops.  Every tensor the checks need besides the step
    buffers is made here, before any capture.
    """

    def __init__(self, spec: DeviceGuardSpec, device, api=None, kernel=None, buffers=None, beside: bool = True):
        self.spec, self._api, self._device = spec, api, torch.device(device)
        self.flag = torch.zeros(1, dtype=I32, device=device)
        self._bit_of = spec.bits
        self._weights = torch.tensor([1 << k for k in self._bit_of], dtype=I32, device=device)
        self._starts = torch.arange(spec.block_table_width, device=device) * spec.block_size  # block starts
        # an entry e maps slots e * BS .. e * BS + BS - 1; all must fit int32
        self._max_entry = (INT32_MAX + 1) // spec.block_size - 1
        self._side = api.new_stream(device) if api is not None and beside else None  # else in line
        self._forked = self._marked = False
        self._kernel = kernel
        # whether the kernel ORs its bits into the flag itself (docs/kernels.md: not where the target's lowering
        # has no atomic OR, ascend)
        self.kernel_ors = TARGET_OF_DEVICE.get(self._device.type) != "ascend"
        self._masks = torch.tensor([1 << k for k in range(GUARD_SLOTS + len(GUARD_BITS))], dtype=I32, device=device)
        self._kernel_buckets: set[int] = set()
        for bucket, bufs in (buffers or {}).items() if kernel is not None else ():
            params = spec.kernel_params(bucket)
            if params is not None:
                bufs["guard_params"].copy_(torch.tensor(params, dtype=I32))
                self._kernel_buckets.add(bucket)

    def names(self, bits: int) -> list[str]:
        """The conditions whose bits are set in ``bits``."""
        return [n for n, k in zip(self.spec.names, self._bit_of) if bits >> k & 1]

    def uses_kernel(self, bucket: int) -> bool:
        """Whether ``bucket``'s checks are the generated launch (else tensor ops)."""
        return bucket in self._kernel_buckets

    def fork(self, bufs: Mapping[str, torch.Tensor], bucket: int) -> None:
        """Enqueue the checks of ``bufs`` (a bucket of ``bucket`` rows); on a device, on the side stream.

        They read ``seq_lens``, ``block_table`` and ``accepted`` as the step
        finds them (at ``mark``, where one came first: work between the two
        must not write them); ``join`` must follow before anything writes ``accepted``.
        """
        if self._side is None:
            self._check(bufs, bucket)
            return
        if not self._marked:
            self.mark()
        with self._api.stream(self._side):
            self._check(bufs, bucket)
        self._forked, self._marked = True, False

    def mark(self) -> None:
        """On a device: where the checks of the next ``fork`` start, the current stream's work so far (captured:
        the side stream's dependencies, so work captured between the two may come first in a replay)."""
        if self._side is not None:
            self._side.wait_stream(self._api.current_stream(self._device))
            self._marked = True

    @property
    def stream(self):
        """The side stream the checks run on (None on the CPU)."""
        return self._side

    def check(self, bufs: Mapping[str, torch.Tensor], bucket: int) -> None:
        """Enqueue the checks on the current stream (a caller that orders them itself: a runtime running them
        beside its prologue, whose join also joins them)."""
        self._check(bufs, bucket)

    def join(self) -> None:
        """Make the current stream wait for the checks (a no-op on the CPU or when nothing is forked)."""
        if self._forked:
            self._api.current_stream(self._device).wait_stream(self._side)
            self._forked = False

    def _check(self, bufs: Mapping[str, torch.Tensor], bucket: int) -> None:
        if bucket in self._kernel_buckets:  # one launch: the bits of each sequence, ORed into the flag
            rows = bufs["guard_bits"]
            self._kernel(bufs["seq_lens"], bufs["block_table"], bufs["accepted"], bufs["guard_params"], rows, self.flag)
            if not self.kernel_ors:  # a target without an atomic OR: four tensor ops fold the bits into the flag
                self.flag.bitwise_or_((rows[:, None] & self._masks).amax(0).sum(dtype=I32))
            return
        self._check_ops(bufs, bucket)

    def _check_ops(self, bufs: Mapping[str, torch.Tensor], bucket: int) -> None:
        """The checks as tensor ops: the guard expressions over the batch's true minimum and maximum."""
        spec = self.spec
        s = bufs["seq_lens"].long()
        lo, hi = torch.aminmax(s)
        env = {"min_seq_len": lo, "max_seq_len": hi, "batch": bucket}
        oks = []
        for expr in spec.guards:
            ok = device_eval(expr, env)
            oks.append(ok if isinstance(ok, torch.Tensor) else torch.full((), bool(ok), device=s.device))
        need = self._needed(s)
        table = bufs["block_table"]
        oks.append(~(need & ((table < 0) | (table > self._max_entry))).any())
        acc = bufs["accepted"]
        oks.append(~((acc < 0) | (acc > spec.width - 1)).any())
        # a live row (S > 0; padding rows have S = 0 and only the scratch block) mapping the scratch block
        oks.append(~(need & (table == spec.scratch_block) & (s[:, None] > 0)).any())
        bad = torch.logical_not(torch.stack(oks)).to(I32)
        self.flag.bitwise_or_((bad * self._weights).sum(dtype=I32))

    def _needed(self, s: torch.Tensor) -> torch.Tensor:
        """``[B, BT]``: whether block ``c`` of row ``b`` holds one of the positions ``S .. S + reach - 1``."""
        reach, bs = self.spec.reach, self.spec.block_size
        if reach <= 0:
            return torch.zeros(s.shape[0], self._starts.shape[0], dtype=torch.bool, device=s.device)
        # block c holds positions c * BS .. c * BS + BS - 1: it is needed when that range meets S .. S + reach - 1
        d = self._starts - s[:, None]
        return (d > -bs) & (d < reach)
