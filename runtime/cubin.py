"""What a cubin says about its kernels, read on any machine: entry names, parameter layout, block size.

A cubin is an ELF file.  Each kernel is a global function symbol, and its
``.nv.info.<name>`` section holds attributes that ``ptxas`` wrote: one
``EIATTR_KPARAM_INFO`` record per parameter (ordinal, offset and size in the
parameter buffer) and ``EIATTR_MAX_THREADS`` (the ``__launch_bounds__``).
The cuda launcher checks an entry against them before the driver sees the
cubin, so a manifest that disagrees with its cubin (an entry that is not
there, parameters in another order or of another size than the launch
packs) is refused on the CPU with the file named, not by a crash on the GPU.

    >>> cubin_kernels(b"not an ELF file")
    Traceback (most recent call last):
    ...
    ValueError: not a 64-bit little-endian ELF file
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

_SHT_SYMTAB = 2
_STT_FUNC = 2
_STB_GLOBAL = 1
_EIFMT_NVAL, _EIFMT_BVAL, _EIFMT_HVAL, _EIFMT_SVAL = 1, 2, 3, 4
_EIATTR_MAX_THREADS = 0x05
_EIATTR_KPARAM_INFO = 0x17
POINTER_SIZE, BATCH_SIZE = 8, 4  # what the launcher packs: a device pointer per tensor, int32 B (and V, C, W)
# the int32 parameters: the batch, and the vocabulary and a block family's chunks per row where a shape names them,
# and the verify width of a width-free variant (its key lacks W)
SCALARS = ("B", "V", "C", "W")


@dataclass(frozen=True)
class CubinKernel:
    name: str
    params: tuple[tuple[int, int], ...]  # (offset, size) in bytes per parameter, in ordinal order
    max_threads: tuple[int, int, int] | None


def _sections(image: bytes) -> list[tuple[str, int, int, int, int]]:
    """(name, type, offset, size, link) of every section."""
    if image[:4] != b"\x7fELF" or image[4:6] != b"\x02\x01":
        raise ValueError("not a 64-bit little-endian ELF file")
    (shoff,) = struct.unpack_from("<Q", image, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", image, 0x3A)
    raw = [struct.unpack_from("<IIQQQQIIQQ", image, shoff + i * shentsize) for i in range(shnum)]
    names = raw[shstrndx][4]
    return [(_string(image, names + r[0]), r[1], r[4], r[5], r[6]) for r in raw]


def _string(image: bytes, at: int) -> str:
    return image[at : image.index(b"\0", at)].decode()


def _attributes(image: bytes, offset: int, size: int):
    """(attribute, payload) records of one ``.nv.info`` section."""
    p, end = offset, offset + size
    while p + 2 <= end:
        fmt, attr = image[p], image[p + 1]
        if fmt == _EIFMT_SVAL:
            (n,) = struct.unpack_from("<H", image, p + 2)
            yield attr, image[p + 4 : p + 4 + n]
            p += 4 + n
        elif fmt in (_EIFMT_HVAL, _EIFMT_BVAL):
            yield attr, image[p + 2 : p + 4]
            p += 4
        elif fmt == _EIFMT_NVAL:
            yield attr, b""
            p += 2
        else:
            raise ValueError(f"unknown .nv.info record format {fmt:#x} at byte {p}")


def cubin_kernels(image: bytes) -> dict[str, CubinKernel]:
    """The kernels of a cubin by name (its global function symbols), with what ``.nv.info`` says of them."""
    sections = _sections(image)
    functions = set()
    for _, kind, offset, size, link in sections:
        if kind != _SHT_SYMTAB:
            continue
        strtab = sections[link][2]
        for at in range(offset, offset + size, 24):
            name, info = struct.unpack_from("<IB", image, at)
            if info & 0xF == _STT_FUNC and info >> 4 == _STB_GLOBAL:
                functions.add(_string(image, strtab + name))
    info = {
        name[len(".nv.info.") :]: (offset, size)
        for name, _, offset, size, _ in sections
        if name.startswith(".nv.info.")
    }
    kernels = {}
    for name in sorted(functions):
        params, threads = {}, None
        for attr, payload in _attributes(image, *info[name]) if name in info else ():
            if attr == _EIATTR_KPARAM_INFO:
                _, ordinal, offset, flags = struct.unpack("<IHHI", payload[:12])
                params[ordinal] = (offset, (flags >> 18) & 0x3FFF)
            elif attr == _EIATTR_MAX_THREADS:
                threads = struct.unpack("<III", payload[:12])
        kernels[name] = CubinKernel(name, tuple(params[i] for i in sorted(params)), threads)
    return kernels


def entry_problems(image: bytes, entry, kernels: dict[str, CubinKernel] | None = None) -> list[str]:
    """How the cubin ``image`` disagrees with manifest ``entry`` (its symbol, parameters, block size).

    The launcher passes one device pointer per tensor and ``B`` (and ``V``, ``C``, ``W``) as
    int32, in the order of ``entry.params``, and launches ``entry.threads`` threads a
    block.  ``kernels`` is ``cubin_kernels(image)`` where the caller has it.
    """
    try:
        kernels = cubin_kernels(image) if kernels is None else kernels
    except (ValueError, struct.error, IndexError) as exc:
        return [f"not a readable cubin: {exc}"]
    kernel = kernels.get(entry.entry)
    if kernel is None:
        return [f"has no kernel {entry.entry!r} (it holds {', '.join(sorted(kernels)) or 'none'})"]
    problems = []
    sizes = tuple(size for _, size in kernel.params)
    want = tuple(BATCH_SIZE if p in SCALARS else POINTER_SIZE for p in entry.params)
    if sizes != want:
        problems.append(
            f"{entry.entry} takes parameters of {list(sizes)} bytes; the manifest's "
            f"{list(entry.params)} are packed as {list(want)}"
        )
    if kernel.max_threads is not None and kernel.max_threads[0] < entry.threads:
        problems.append(
            f"{entry.entry} is bounded to {kernel.max_threads[0]} threads a block; the manifest "
            f"launches {entry.threads}"
        )
    return problems
