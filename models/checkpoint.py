"""The safetensors file format, read and written with torch alone.

A file is an 8-byte little-endian header length, a JSON header
``{name: {"dtype": "F32", "shape": [...], "data_offsets": [begin, end]}}``
(plus an optional ``__metadata__``) and the raw little-endian tensor bytes.
``load_file`` uses the ``safetensors`` package when it is installed and this
reader otherwise, so a draft checkpoint loads on machines without it.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import torch

__all__ = ["load_file", "load_folder", "save_file"]

DTYPES = {
    "F64": torch.float64,
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "I64": torch.int64,
    "I32": torch.int32,
    "I16": torch.int16,
    "I8": torch.int8,
    "U8": torch.uint8,
    "BOOL": torch.bool,
}
NAMES = {v: k for k, v in DTYPES.items()}


def _read(path: Path) -> dict[str, torch.Tensor]:
    data = path.read_bytes()
    if len(data) < 8:
        raise ValueError(f"{path}: not a safetensors file (shorter than its header length)")
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    body = memoryview(data)[8 + n :]
    out = {}
    for name, rec in header.items():
        if name == "__metadata__":
            continue
        begin, end = rec["data_offsets"]
        dtype = DTYPES[rec["dtype"]]
        raw = torch.frombuffer(bytearray(body[begin:end]), dtype=torch.uint8)
        out[name] = raw.view(dtype).reshape(rec["shape"]).clone()
    return out


def load_file(path: str | Path) -> dict[str, torch.Tensor]:
    """Every tensor of one ``.safetensors`` file, on the CPU."""
    try:
        from safetensors.torch import load_file as st_load  # optional dependency
    except ImportError:
        return _read(Path(path))
    return st_load(str(path))


def load_folder(folder: str | Path) -> dict[str, torch.Tensor]:
    """Every tensor of every ``*.safetensors`` file in ``folder`` (a sharded checkpoint)."""
    files = sorted(Path(folder).glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"{folder}: no *.safetensors files")
    tensors: dict[str, torch.Tensor] = {}
    for f in files:
        tensors.update(load_file(f))
    return tensors


def save_file(tensors: dict[str, torch.Tensor], path: str | Path) -> None:
    """Write ``tensors`` in the safetensors format (what a checkpoint folder holds)."""
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().contiguous().cpu()
        raw = bytes(t.clone().untyped_storage()) if t.numel() else b""
        header[name] = {"dtype": NAMES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)  # the body starts 8-byte aligned
    Path(path).write_bytes(struct.pack("<Q", len(text)) + text + b"".join(blobs))
