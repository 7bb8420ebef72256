"""C kernels for the codegen tests, built once per session and shared by the test modules.

A variant is a tuple ``(family, W, BT, BS, draft_dtype)``, optionally followed by the split
count of a tiling variant (default 8).  ``c_kernels.require(variants)``
renders, lowers and compiles the ones not built yet (two spawned processes:
lowering is CPU-bound; a family's variants share a compiler run);
``c_kernels.run(variant, tensors, batch)`` launches one through ctypes with the tensors named like the
family's arguments.
"""

from __future__ import annotations

import ctypes
import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest

from specgen.codegen.batch import MAX_BATCH, batches
from specgen.codegen.lower import compile_many, lower
from specgen.codegen.templates import render_program
from specgen.specializations.guard_check import GUARD_PARAMS
from specgen.specializations.variants import VariantSpec


def num_splits(v) -> int:
    return v[5] if len(v) > 5 else 8


def variant_id(v) -> str:
    return VariantSpec(*v[:5]).key + (f"_ns{v[5]}" if len(v) > 5 else "")


def _lower(v):
    """Render and lower one variant (runs in a worker process); the entry is named after the variant, as a
    build names it, so that the variants of a family compile together (and a build's lowering is reused,
    ``SPECGEN_CODEGEN_CACHE``)."""
    return lower(
        render_program(v[0], v[1], v[2], v[3], draft_dtype=v[4], num_splits=num_splits(v)), "c", symbol=variant_id(v)
    )


def _compile(lowered, so):
    compile_many(lowered, so)  # raises CompileError with the compiler's last lines
    return so


class CKernels:
    def __init__(self, folder: Path):
        self.folder = folder
        self.built: dict = {}  # variant -> (Lowered, .so path)
        self._fns: dict = {}

    def require(self, variants) -> None:
        """Build the variants not built yet: lowered one per task, then each family's compiled together
        (``MAX_BATCH`` per compiler run, as ``specgen build`` does)."""
        todo = [v for v in dict.fromkeys(variants) if v not in self.built]
        if not todo:
            return
        with ProcessPoolExecutor(max_workers=2, mp_context=multiprocessing.get_context("spawn")) as pool:
            lowered = dict(zip(todo, pool.map(_lower, todo)))
            families: dict[str, list] = {}
            for v in todo:
                families.setdefault(v[0], []).append(v)
            jobs = []
            for family, members in families.items():
                for n, group in enumerate(batches(members, MAX_BATCH)):
                    so = self.folder / f"{family}-{len(self.built)}-{n}.so"
                    jobs.append((group, pool.submit(_compile, [lowered[v] for v in group], so)))
            for group, job in jobs:
                so = job.result()
                self.built.update({v: (lowered[v], so) for v in group})

    def run(self, v, tensors: dict, batch: int) -> None:
        """Launch ``v`` on ``tensors`` (name -> contiguous CPU tensor); B is the last argument."""
        low, so = self.built[v]
        fn = self._fns.get(v)
        if fn is None:
            fn = getattr(ctypes.CDLL(str(so)), low.entry)
            fn.restype = ctypes.c_int32
            fn.argtypes = [ctypes.c_void_p if p in low.pointer_params else ctypes.c_int32 for p in low.params]
            self._fns[v] = fn
        args = [tensors[p].data_ptr() if p in low.pointer_params else batch for p in low.params]
        assert fn(*args) == 0


@pytest.fixture(scope="session")
def c_kernels(tmp_path_factory) -> CKernels:
    return CKernels(tmp_path_factory.mktemp("kernels_c"))


INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
POISON = -777


class KernelFuzz:
    """Inputs over the whole int32 range for one variant, and the check of a kernel's outputs.

    A case is ``(batch, seq, acc, entries, seed)``: the explicit values lead
    (``seq`` and ``acc`` fill the first sequences, ``entries`` the first block
    table row), the rest is drawn with ``seed`` from a mix of the layout's
    edges (block boundaries, the end of the table, the int32 limits, the
    largest entry whose slot fits int32, -1 entries), values near the table
    and uniform int32 values.
    """

    @staticmethod
    def layout(v):
        return v[1], v[2] or 1, v[3] or 16

    def _fill(self, g, n, explicit, pools):
        """``n`` int64 values: ``explicit`` first, then each drawn from one of ``pools`` (tensors)."""
        import torch

        out = torch.empty(n, dtype=torch.int64)
        which = torch.randint(0, len(pools), (n,), generator=g)
        for k, pool in enumerate(pools):
            picks = pool[torch.randint(0, len(pool), (n,), generator=g)]
            out = torch.where(which == k, picks, out)
        head = torch.tensor(explicit[:n], dtype=torch.int64)
        out[: len(head)] = head
        return out

    def inputs(self, v, batch, seq, acc, entries, seed) -> dict:
        import torch

        w, bt, bs = self.layout(v)
        cap = bt * bs
        g = torch.Generator().manual_seed(seed)
        t = lambda *vals: torch.tensor(vals, dtype=torch.int64)  # noqa: E731
        uniform = torch.randint(INT32_MIN, INT32_MAX, (64,), generator=g, dtype=torch.int64)
        lim = INT32_MAX // bs  # the largest entry whose slot can still fit int32
        seq_edges = t(
            INT32_MIN,
            INT32_MIN + 1,
            -bs - 1,
            -bs,
            -w - 1,
            -w,
            -w + 1,
            -2,
            -1,
            0,
            1,
            bs - 1,
            bs,
            bs + 1,
            cap - w - 2,
            cap - w - 1,
            cap - w,
            cap - w + 1,
            cap - 1,
            cap,
            cap + 1,
            INT32_MAX - w - 1,
            INT32_MAX - w,
            INT32_MAX - w + 1,
            INT32_MAX - 1,
            INT32_MAX,
        )
        near = torch.randint(-2 * bs, cap + 2 * bs, (64,), generator=g, dtype=torch.int64)
        s = self._fill(g, batch, seq, [seq_edges, near, near, uniform])
        acc_edges = t(INT32_MIN, -2, -1, 0, 1, w - 2, w - 1, w, w + 1, INT32_MAX)
        a = self._fill(g, batch, acc, [acc_edges, torch.arange(w), torch.arange(w), uniform])
        entry_edges = t(-1, -1, INT32_MIN, 0, 1, lim - 1, lim, lim + 1, INT32_MAX)
        small = torch.randint(0, 4096, (64,), generator=g, dtype=torch.int64)
        table = self._fill(g, batch * bt, entries, [entry_edges, small, small, uniform]).reshape(batch, bt)
        token_edges = t(INT32_MIN, -1, 0, 1, 2, INT32_MAX)
        target = self._fill(g, batch * w, [], [token_edges, torch.arange(3), uniform]).reshape(batch, w)
        draft = target[:, :-1].clone()  # the first mismatch at a drawn cut (w - 1: all drafts match)
        cut = torch.randint(0, w, (batch,), generator=g)
        rows = torch.nonzero(cut < w - 1)[:, 0]
        draft[rows, cut[rows]] = draft[rows, cut[rows]] ^ 1
        if v[4] == "int64":  # tokens outside int32 too
            wide = t(INT32_MAX + 1, INT32_MIN - 1, 2**40, -(2**63), 2**63 - 1)
            swap = torch.randint(0, 4, draft.shape, generator=g) == 0
            draft = torch.where(swap, wide[torch.randint(0, 5, draft.shape, generator=g)], draft)
        # linear-state slots: a sequence's own W slots, a few -1 (unassigned) and anything in int32
        slot_edges = t(-1, -1, INT32_MIN, -2, 0, 1, INT32_MAX)
        owned = torch.arange(batch * w, dtype=torch.int64)
        state = self._fill(g, batch * w, [], [slot_edges, owned, owned, uniform]).reshape(batch, w)
        i32 = lambda x: x.to(torch.int32).contiguous()  # noqa: E731
        floats = self._float_inputs(g, batch, w)
        # the row remap's sources: rows of the batch (mostly), -1, the edges past it, anything in int32
        row_edges = t(-1, -1, INT32_MIN, -2, 0, batch - 1, batch, batch + 1, INT32_MAX)
        rows = torch.arange(batch, dtype=torch.int64)
        remap = {
            "src_rows": i32(self._fill(g, batch, [0], [row_edges, rows, rows, uniform])),
            "src_tokens": i32(self._fill(g, batch * w, [], [token_edges, torch.arange(3), uniform])),
            "src_accepted": i32(self._fill(g, batch, acc[::-1], [acc_edges, torch.arange(w), uniform])),
            "src_next_last_token": i32(self._fill(g, batch, [], [token_edges, uniform])),
            "src_next_seq_lens": i32(self._fill(g, batch, seq[::-1], [seq_edges, near, near, uniform])),
        }
        return (
            remap
            | floats
            | {
                "state_slots": i32(state),
                "seq_lens": i32(s),
                "block_table": i32(table),
                "accepted": i32(a),
                "target_tokens": i32(target),
                "draft_tokens": draft.to(getattr(torch, v[4])).contiguous(),
                "last_tokens": i32(self._fill(g, batch, [], [token_edges, uniform])),
                "scratch_slot": i32(self._fill(g, 1, [], [t(-1, 0, 7), uniform])),
                # the device guard's bounds, reach, scratch block and largest count: the edges and anything
                "guard_params": i32(self._fill(g, GUARD_PARAMS, [], [seq_edges, acc_edges, entry_edges, uniform])),
            }
        )

    def _floats(self, g, n, pools):
        """``n`` float32 values, each drawn from one of ``pools`` (float32 tensors)."""
        import torch

        out = torch.empty(n, dtype=torch.float32)
        which = torch.randint(0, len(pools), (n,), generator=g)
        for k, pool in enumerate(pools):
            out = torch.where(which == k, pool[torch.randint(0, len(pool), (n,), generator=g)], out)
        return out

    def _float_inputs(self, g, batch, w) -> dict:
        """Sampled verification's float32 inputs: mostly probabilities and keyed uniforms, with the
        float edges (0, -0, subnormals, 1, the largest float, infinities, NaNs), any int32 bit pattern
        read as a float, and target probabilities equal to ``u * q`` rounded to float32 (either side
        of the exact product: a float32 comparison would get some of them wrong)."""
        import torch

        inf, nan = float("inf"), float("nan")
        edges = torch.tensor(
            [0.0, -0.0, 2**-149, 2**-126, 2**-24, 0.5, 1 - 2**-24, 1.0, 2.0, 3.4028234e38, inf, -inf, nan, -1.0],
            dtype=torch.float32,
        )
        bits = torch.randint(INT32_MIN, INT32_MAX, (64,), generator=g, dtype=torch.int64).to(torch.int32)
        anything = bits.view(torch.float32)
        probs = torch.rand(64, generator=g)
        keyed = torch.randint(0, 2**24, (64,), generator=g).to(torch.float32) * 2**-24  # philox_uniform's values
        n = batch * (w - 1)
        q = self._floats(g, n, [probs, probs, torch.ones(1), edges, anything])
        u = self._floats(g, n, [keyed, keyed, keyed, edges, anything])
        p = self._floats(g, n, [probs, probs, torch.ones(1), torch.zeros(1), edges, anything])
        tie = torch.randint(0, 4, (n,), generator=g) == 0
        p = torch.where(tie, (u.double() * q.double()).float(), p)
        temperature = self._floats(g, batch, [torch.zeros(1), probs, edges, anything])
        shape = (batch, w - 1)
        return {
            "draft_probs": q.reshape(shape).contiguous(),
            "accept_uniforms": u.reshape(shape).contiguous(),
            "target_draft_probs": p.reshape(shape).contiguous(),
            "temperature": temperature.contiguous(),
        }

    def outputs(self, v, batch, device="cpu") -> dict:
        import torch

        from specgen.specializations.families import FAMILIES, shape_of

        return {
            a.name: torch.full(shape_of(a, batch, v[1], v[2]), POISON, dtype=torch.int32, device=device)
            for a in FAMILIES[v[0]].outputs
        }

    def expected(self, v, ins) -> dict:
        """The torch semantics on CPU copies of ``ins``."""
        from specgen.runtime.semantics import SEMANTICS, semantics_kwargs
        from specgen.specializations.families import FAMILIES

        batch = ins["seq_lens"].shape[0]
        want = self.outputs(v, batch)
        cpu = {k: x.cpu() for k, x in ins.items()}
        SEMANTICS[v[0]](
            *[(want if a.output else cpu)[a.name] for a in FAMILIES[v[0]].args],
            **semantics_kwargs(v[0], self.layout(v)[2], num_splits(v)),
        )
        return want

    def check(self, v, ins, got) -> None:
        """``got`` (a kernel's outputs) equals the semantics and keeps the contract's promises."""
        import torch

        want = self.expected(v, ins)
        got = {k: x.cpu() for k, x in got.items()}
        for name in want:
            diff = torch.nonzero(got[name].reshape(-1) != want[name].reshape(-1))[:, 0]
            assert diff.numel() == 0, (
                name,
                diff[:4].tolist(),
                got[name].reshape(-1)[diff[:4]].tolist(),
                want[name].reshape(-1)[diff[:4]].tolist(),
            )
        self.contract(v, {k: x.cpu() for k, x in ins.items()}, got)

    def contract(self, v, ins, out) -> None:
        """The promises of docs/kernels.md that hold for every input, checked on the values."""
        import torch

        w, bt, bs = self.layout(v)
        batch = ins["seq_lens"].shape[0]
        table = ins["block_table"].long()
        for name in ("slot_mapping", "context_slots", "draft_slots"):
            if name not in out:
                continue
            slots = out[name].long().reshape(batch, -1)
            if name == "draft_slots":  # row 0 may be the scratch slot, passed through
                slots = slots[:, 1:]
            ok = (slots == -1) | ((slots >= 0) & ((slots // bs)[:, :, None] == table[:, None, :]).any(-1))
            assert bool(ok.all()), f"{name}: a slot outside the sequence's own blocks"
        for name in (
            "positions",
            "kv_lens",
            "row_kv_lens",
            "row_num_blocks",
            "row_last_block_len",
            "row_block_offsets",
            "max_kv_len",
            "kv_split_len",
            "next_seq_lens",
            "draft_positions",
        ):
            if name in out:
                assert int(out[name].min()) >= 0, f"{name}: negative"
        if "state_read_slot" in out:  # the committed slot is one of the sequence's own, or none
            own = ins["state_slots"].long()
            read = out["state_read_slot"].long()
            assert bool(((read == -1) | (read[:, None] == own).any(-1)).all()), "state_read_slot: not the sequence's"
            writes = out["state_write_slots"].long().reshape(batch, w)
            assert bool(((writes == -1) | (writes == own)).all()), "state_write_slots: not row j's own slot"
            assert int(writes.min()) >= -1 and int(read.min()) >= -1, "a negative slot other than -1"
        if "hidden_rows" in out:
            rows = out["hidden_rows"].long()
            base = torch.arange(batch)[:, None] * w
            assert bool(((rows >= base) & (rows < base + w)).all()), "hidden_rows outside the sequence's rows"
        if "accepted" in out:
            assert bool(((out["accepted"] >= 0) & (out["accepted"] < w)).all())
        if "hidden_src" in out:  # the row remap: verify row j of a source row inside the batch, or none
            src = out["hidden_src"].long().reshape(batch, w)
            inside = (src >= 0) & (src < batch * w) & (src % w == torch.arange(w)[None, :])
            assert bool(((src == -1) | inside).all()), "hidden_src: outside the batch's verify rows"
        if v[0] == "spec_rejection_verify":  # a greedy row is greedy_prefix_verify, whatever its floats
            from specgen.runtime.semantics import greedy_prefix_verify

            greedy = ins["temperature"] <= 0
            acc, nxt = torch.empty_like(out["accepted"]), torch.empty_like(out["next_tokens"])
            greedy_prefix_verify(ins["draft_tokens"], ins["target_tokens"], acc, nxt)
            assert torch.equal(out["accepted"][greedy], acc[greedy]), "a greedy row: not greedy_prefix_verify"
            assert torch.equal(out["next_tokens"][greedy], nxt[greedy]), "a greedy row: not greedy_prefix_verify"


@pytest.fixture(scope="session")
def kernel_fuzz() -> KernelFuzz:
    return KernelFuzz()


@pytest.fixture(scope="module")
def one_torch_thread():
    """Small CPU tensors: torch's intra-op threads only contend on a busy two-core machine."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
