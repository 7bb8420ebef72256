"""Launchers: one per target, each built from a verified manifest entry.

Every launcher checks the artifact's sha256 before anything else touches it
and exposes ``launch(tensors, batch)`` with the tensors in ``docs/kernels.md``
order, already checked by ``runtime/guards.py`` (``check_tensors``); the entry's own
parameter order (``params``) is applied here.

- ``c``: the build compiles TileLang's C output into shared libraries, one
  per batch of a family's variants (the entry ``<key>_kernel`` names the
  variant), each entry taking one ``void*`` per tensor, ``int32_t B`` (and
  ``int32_t V``, the vocabulary read from the tensors by ``guards.vocab_of``,
  ``int32_t C``, a block family's chunks per row read by ``guards.chunks_of``,
  where a shape names them, and ``int32_t W``, the width read by ``guards.width_of``,
  where the variant serves every width) and returning 0 on success; it is called through
  ctypes on the calling thread (synchronous; the entry walks its grid, a
  chunked block family's chunks within each row's block).  Entries of one
  library share the ``dlopen`` handle.
- ``cuda``: the cubin is loaded with ``cuModuleLoadData`` once per device
  (variants that share one cubin share the module; each takes its own entry
  with ``cuModuleGetFunction``), into the device's primary context (the one
  torch uses), and launched with
  ``cuLaunchKernel`` on ``torch.cuda.current_stream()``: no synchronisation
  and no device allocation, so it records into ``torch.cuda.graph`` captures.
  The driver copies parameter values at launch (or capture); the host
  buffers holding them are cached per (pointers, B, V, C, W) all the same; the
  grid is the entry's ``grid`` evaluated with the launch's B (and V, C and a
  width-free variant's W, read from the tensors, where it names them).
  ``cuda.bindings`` is imported on first use only.  Before any of that, the
  entry is checked against the cubin itself (``runtime/cubin.py``: the
  symbol is there, its parameters are the pointers and int32 ``B`` (and
  ``V``, ``C``, ``W``) the launch packs, in that order, and its block bound admits
  the launch's threads).
- ``ascend``: TileLang lowers the families to Ascend C on any machine, but
  compiling that needs CANN's bisheng, which the build machines here lack.
  The launcher verifies the artifact and torch_npu (imported only here) and
  refuses with ``TargetUnavailableError`` saying what is missing, rather
  than guessing at a launch path never run on hardware.
"""

from __future__ import annotations

import ctypes
import re
from pathlib import Path
from typing import Sequence

from ..specializations.expr import SHAPE_NAMES, expression_names, safe_eval
from ..specializations.targets import TARGETS
from .cubin import cubin_kernels, entry_problems
from .guards import chunks_of, vocab_of, width_of
from .manifest import ArtifactError, KernelLaunchError, VariantEntry, read_artifact

_ARCH = re.compile(r"^sm_(\d+)(\d)([af]?)$")
_PACK_CACHE_SIZE = 64
_ASCEND_BINARIES = (TARGETS["ascend"].artifact_suffix, ".so", ".bin")  # what bisheng may emit
_MODULES: dict[tuple[int, str], object] = {}  # (device index, cubin sha256) -> module loaded into the primary context
_KERNELS: dict[str, dict] = {}  # cubin sha256 -> cubin_kernels(cubin): read once for the variants sharing it


class TargetUnavailableError(ArtifactError):
    """The variant exists but this runtime cannot launch it on this machine."""


VOCAB = -1  # the slot of the parameter ``V``: the vocabulary size, read from the tensors (``vocab_of``)
CHUNKS = -2  # the slot of the parameter ``C``: a block family's chunks per row, read from the tensors (``chunks_of``)
WIDTH = -3  # the slot of the parameter ``W``: a width-free variant's verify width, read from the tensors (``width_of``)
_SCALARS = {"B": None, "V": VOCAB, "C": CHUNKS, "W": WIDTH}  # the int32 parameters' slots
_READ = {VOCAB: vocab_of, CHUNKS: chunks_of, WIDTH: width_of}  # a slot -> how a launch reads it from its tensors


def param_slots(entry: VariantEntry) -> tuple[int | None, ...]:
    """Per entry parameter: the index of its tensor in ``entry.args``; None for ``B``, ``VOCAB`` for ``V``,
    ``CHUNKS`` for ``C``, ``WIDTH`` for ``W``."""
    index = {a.name: i for i, a in enumerate(entry.args)}
    return tuple(_SCALARS[p] if p in _SCALARS else index[p] for p in entry.params)


def _int32(slot: int | None) -> bool:
    return slot is None or slot in _READ


def _values(slots: tuple[int | None, ...], args: Sequence, tensors: Sequence, batch: int) -> tuple[int, ...]:
    """The entry's parameters as ints, in its order: pointers, ``B`` (and ``V``, ``C``, ``W``)."""
    scalars = {s: read(args, tensors) for s, read in _READ.items() if s in slots} | {None: batch}
    return tuple(scalars[s] if s in scalars else tensors[s].data_ptr() for s in slots)


class CLauncher:
    """Calls ``entry.entry`` in ``entry.artifact`` with tensors on the CPU."""

    target = "c"

    def __init__(self, entry: VariantEntry, root: Path):
        self.entry = entry
        self.path = Path(root) / entry.artifact
        read_artifact(entry, Path(root))  # refuse an altered library before dlopen runs its code
        try:
            self._lib = ctypes.CDLL(str(self.path))
        except OSError as exc:
            raise ArtifactError(f"{self.path}: cannot load {entry.key}: {exc}") from None
        try:
            fn = getattr(self._lib, entry.entry)
        except AttributeError:
            raise ArtifactError(f"{self.path}: has no symbol {entry.entry!r} ({entry.key})") from None
        self._slots = param_slots(entry)
        fn.argtypes = [ctypes.c_int32 if _int32(s) else ctypes.c_void_p for s in self._slots]
        fn.restype = ctypes.c_int32
        self._fn = fn

    def launch(self, tensors: Sequence, batch: int) -> None:
        """Run the entry on ``tensors`` (``docs/kernels.md`` order, already checked)."""
        rc = self._fn(*_values(self._slots, self.entry.args, tensors, batch))
        if rc != 0:
            raise KernelLaunchError(f"{self.entry.entry} ({self.path.name}) returned {rc}")

    def __repr__(self) -> str:
        return f"CLauncher({self.entry.key}, {self.path})"


def _driver():
    try:
        from cuda.bindings import driver
    except ImportError as exc:
        raise ArtifactError(f"the cuda target needs the cuda-bindings package (cuda.bindings.driver): {exc}") from None
    return driver


def check(result, what: str):
    """Unwrap a cuda-bindings ``(CUresult, *values)`` tuple; raise on failure."""
    drv = _driver()
    err, *values = result if isinstance(result, tuple) else (result,)
    if err != drv.CUresult.CUDA_SUCCESS:
        name_err, name = drv.cuGetErrorName(err)
        label = name.decode() if name_err == drv.CUresult.CUDA_SUCCESS and name else str(err)
        raise KernelLaunchError(f"{what} failed: {label}")
    return values[0] if len(values) == 1 else tuple(values) or None


def arch_fits(arch: str | None, capability: tuple[int, int]) -> bool:
    """Whether a cubin for ``arch`` (``sm_90``, ``sm_90a``) runs on ``capability``.

    Cubins run on the same major version at an equal or newer minor one;
    ``a``/``f`` (architecture-specific) cubins only on their exact version.
    """
    if arch is None:
        return True
    m = _ARCH.match(arch)
    if not m:
        return False
    major, minor, suffix = int(m.group(1)), int(m.group(2)), m.group(3)
    if suffix:
        return (major, minor) == tuple(capability)
    return major == capability[0] and capability[1] >= minor


class CudaLauncher:
    """Launches ``entry.entry`` from the verified cubin on the tensors' device."""

    target = "cuda"

    def __init__(self, entry: VariantEntry, root: Path):
        self.entry = entry
        self.path = Path(root) / entry.artifact
        self._image = read_artifact(entry, Path(root))
        try:
            kernels = _KERNELS.get(entry.sha256) or _KERNELS.setdefault(entry.sha256, cubin_kernels(self._image))
        except ValueError:
            kernels = None  # entry_problems names what is unreadable
        problems = entry_problems(self._image, entry, kernels)
        if problems:
            raise ArtifactError(f"{self.path}: {'; '.join(problems)} ({entry.key})")
        self._slots = param_slots(entry)
        self._per_device: dict[int, tuple[object, object, object]] = {}  # index -> (ctx, module, function)
        self._packed: dict[tuple, tuple] = {}
        self._grids: dict[tuple[int, ...], int] = {}  # (B, V, C, W) -> blocks (V, C, W: 0 where not read)
        self._env = {"W": entry.width, "BT": entry.block_table_width or 0, "NS": entry.num_splits or 0, "V": 0, "C": 0}
        names = expression_names(entry.grid)
        # what the grid reads from the tensors: V, C, and W for a variant of every width
        self._grid_reads = tuple(
            (dim, read)
            for dim, read in (("V", vocab_of), ("C", chunks_of), ("W", width_of))
            if dim in names and (dim != "W" or entry.fixed_width is None)
        )

    def _load(self, index: int):
        import torch

        cap = torch.cuda.get_device_capability(index)
        if not arch_fits(self.entry.arch, cap):
            raise ArtifactError(
                f"{self.path}: cubin built for {self.entry.arch} cannot run on "
                f"{torch.cuda.get_device_name(index)} (sm_{cap[0]}{cap[1]}); "
                f"rebuild with `specgen build --target cuda --arch sm_{cap[0]}{cap[1]}`"
            )
        drv = _driver()
        check(drv.cuInit(0), "cuInit")
        with torch.cuda.device(index):
            torch.cuda.init()
            torch.cuda.current_stream(index)  # makes torch create the primary context
            ctx = self._context(drv, index)
            module = _MODULES.get((index, self.entry.sha256))
            if module is None:  # variants that share a cubin share its module
                module = check(drv.cuModuleLoadData(self._image), f"cuModuleLoadData({self.path.name})")
                _MODULES[(index, self.entry.sha256)] = module
            fn = check(
                drv.cuModuleGetFunction(module, self.entry.entry.encode()), f"cuModuleGetFunction({self.entry.entry})"
            )
        self._per_device[index] = (ctx, module, fn)
        return self._per_device[index]

    @staticmethod
    def _context(drv, index: int):
        ctx = check(drv.cuCtxGetCurrent(), "cuCtxGetCurrent")
        if ctx is None or int(ctx) == 0:
            dev = check(drv.cuDeviceGet(index), "cuDeviceGet")
            ctx = check(drv.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
            check(drv.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
        return ctx

    def _pack(self, tensors: Sequence, batch: int) -> int:
        ptrs = _values(self._slots, self.entry.args, tensors, batch)  # B, V, C and W among them: the cache's key
        packed = self._packed.get(ptrs)
        if packed is None:
            values = [ctypes.c_int32(v) if _int32(s) else ctypes.c_void_p(v) for s, v in zip(self._slots, ptrs)]
            array = (ctypes.c_void_p * len(values))(*(ctypes.addressof(v) for v in values))
            if len(self._packed) >= _PACK_CACHE_SIZE:
                self._packed.clear()
            packed = self._packed[ptrs] = (values, array, ctypes.addressof(array))
        return packed[2]

    def launch(self, tensors: Sequence, batch: int) -> None:
        """Enqueue the kernel on the current stream of the tensors' device."""
        import torch

        device = tensors[0].device
        index = device.index if device.index is not None else torch.cuda.current_device()
        ctx, _, fn = self._per_device.get(index) or self._load(index)
        drv = _driver()
        current = check(drv.cuCtxGetCurrent(), "cuCtxGetCurrent")
        if current is None or int(current) != int(ctx):
            check(drv.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
        dims = {dim: read(self.entry.args, tensors) or 0 for dim, read in self._grid_reads}
        at = (batch, dims.get("V", 0), dims.get("C", 0), dims.get("W", 0))
        grid = self._grids.get(at)
        if grid is None:
            env = {**self._env, **dims, "B": batch}
            grid = int(safe_eval(self.entry.grid, env, SHAPE_NAMES))
            if dims.get("C", 0) > 1:
                self._check_resident(grid, dims["C"], fn, index)
            self._grids[at] = grid
        if grid <= 0:
            return
        stream = torch.cuda.current_stream(index).cuda_stream
        check(
            drv.cuLaunchKernel(fn, grid, 1, 1, self.entry.threads, 1, 1, 0, stream, self._pack(tensors, batch), 0),
            f"cuLaunchKernel({self.entry.entry}, grid={grid}, block={self.entry.threads})",
        )

    def _check_resident(self, grid: int, chunks: int, fn, index: int) -> None:
        """Refuse a grid of ``C > 1`` blocks per row larger than what the device holds at once: a row's blocks
        wait for each other (``vocab_sums``' count), and CUDA does not promise to start blocks in order, so only
        a grid whose blocks are all resident together cannot leave a block waiting on one that never starts
        (``vocab_chunks`` picks ``C`` that way).  Checked once per grid (a cache miss), not per launch."""
        import torch

        drv = _driver()
        per_sm = check(
            drv.cuOccupancyMaxActiveBlocksPerMultiprocessor(fn, self.entry.threads, 0),
            f"cuOccupancyMaxActiveBlocksPerMultiprocessor({self.entry.entry})",
        )
        resident = int(per_sm) * torch.cuda.get_device_properties(index).multi_processor_count
        if grid > resident:
            raise ValueError(
                f"{self.entry.key}: {grid} blocks ({grid // chunks} rows x C = {chunks}) must be resident together, "
                f"and this device holds {resident} of these blocks at once ({int(per_sm)} per SM); launch it with "
                f"rows x C <= {resident}, or C = 1"
            )

    def __repr__(self) -> str:
        return f"CudaLauncher({self.entry.key}, {self.entry.arch}, {self.path})"


def _torch_npu():
    try:
        import torch_npu  # noqa: F401 - registers the "npu" device with torch
    except ImportError as exc:
        raise TargetUnavailableError(f"the ascend target needs torch_npu (pip install 'specgen[npu]'): {exc}") from None
    return torch_npu


class AscendLauncher:
    """Checks an Ascend artifact and explains why it cannot be launched here."""

    target = "ascend"

    def __init__(self, entry: VariantEntry, root: Path):
        self.entry = entry
        self.path = Path(root) / entry.artifact
        read_artifact(entry, Path(root))
        _torch_npu()
        if not self.path.name.endswith(_ASCEND_BINARIES):
            raise TargetUnavailableError(
                f"{self.path}: {entry.key} was built for ascend as Ascend C source only; compiling it "
                f"needs CANN's bisheng, which this build did not have, so it cannot be launched"
            )
        raise TargetUnavailableError(
            f"{self.path}: launching compiled Ascend kernels ({entry.key}) is not implemented in this "
            f"runtime; it has not been verified on NPU hardware"
        )

    def launch(self, tensors: Sequence, batch: int) -> None:  # pragma: no cover - __init__ refuses
        raise TargetUnavailableError(f"{self.entry.key}: ascend launch is not available")
