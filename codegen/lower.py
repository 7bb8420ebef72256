"""Lower rendered TileLang programs to target source and compile them.

TileLang is imported lazily, inside the functions that need it, so importing
``specgen.codegen`` (and the runtime) never pays for it.

    >>> from specgen.codegen.templates import render_variant
    >>> from specgen.specializations.variants import VariantSpec
    >>> low = lower(render_variant(VariantSpec("spec_verify_token_update", 4)), "c")
    >>> low.entry, low.params
    ('spec_verify_token_update_kernel', ['draft_tokens', 'last_tokens', 'tokens', 'B'])

The generated kernel's parameter order is TileLang's, not the prim_func's, so
``params`` is parsed from the entry's signature in the generated source.

With ``SPECGEN_CODEGEN_CACHE`` set to a folder, ``lower`` and ``compile_many``
keep their results there, addressed by everything they depend on (program
text, target, arch, symbol, TileLang's version and this module's source; the
source and the compiler command with the compiler's size and time stamp), and
give a result found there instead of doing the work again: the test suite
builds the same variants into many folders.  Unset (the default), nothing is
kept.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import linecache
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ..specializations.targets import TARGETS


class ToolchainMissing(RuntimeError):
    """A compiler or library the target needs is not installed here."""


class LoweringError(RuntimeError):
    """TileLang rejected the program for this target."""


class CompileError(RuntimeError):
    """The target compiler failed; the message ends with its last lines."""


@dataclass
class Lowered:
    target: str
    arch: str | None
    source: str
    entry: str
    params: list[str]  # kernel parameter names in call order; scalars "B" (batch), "V" (vocabulary), "C" (chunks)
    pointer_params: list[str]
    threads: int
    grid: str  # blocks to launch: a shape expression over B (and W, BT, NS, V, C; the runtime's env)


def source_suffix(target: str) -> str:
    return TARGETS[target].source_suffix


def artifact_suffix(target: str) -> str:
    return TARGETS[target].artifact_suffix


def _tilelang():
    try:
        import tilelang  # noqa: PLC0415 - lazy by design
    except ImportError as exc:  # pragma: no cover - tilelang is a dependency
        raise ToolchainMissing(f"tilelang is not importable: {exc}") from exc
    return tilelang


def _tvm_target(target: str, arch: str | None):
    _tilelang()  # tilelang vendors tvm: it must be imported first
    from tvm.target import Target  # noqa: PLC0415

    if target == "cuda":
        return Target({"kind": "cuda", "arch": arch or TARGETS["cuda"].default_arch})
    if target in ("c", "ascend"):
        return Target(target)
    raise ValueError(f"unknown target {target!r}")


def _program(program_text: str, target: str):
    # TileLang's parser reads the kernel's source through inspect, so the text
    # is registered with linecache under a name unique to its content.
    filename = f"<specgen-program-{hashlib.sha256(program_text.encode()).hexdigest()[:16]}>"
    linecache.cache[filename] = (len(program_text), None, program_text.splitlines(True), filename)
    namespace: dict = {"__name__": "specgen_program", "__file__": filename}
    exec(compile(program_text, filename, "exec"), namespace)  # noqa: S102 - our own render
    dialect_ascend = "tilelang.ascend.language" in program_text
    if dialect_ascend != (target == "ascend"):
        raise LoweringError(
            f"program was rendered for another target than {target!r}: "
            "render_variant(..., target=...) must match lower's target"
        )
    return namespace["program"](), namespace


CACHE_ENV = "SPECGEN_CODEGEN_CACHE"


def _cache_file(kind: str, record: dict) -> Path | None:
    """Where ``SPECGEN_CODEGEN_CACHE`` keeps the result of ``kind`` for ``record``; None when it is unset."""
    root = os.environ.get(CACHE_ENV)
    if not root:
        return None
    blob = json.dumps(dict(record, module=_module_digest()), sort_keys=True)
    return Path(root) / kind / hashlib.sha256(blob.encode()).hexdigest()


def _module_digest() -> str:
    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()


def _cache_put(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def lower(program_text: str, target: str, arch: str | None = None, symbol: str | None = None) -> Lowered:
    """Exec a rendered program and lower its prim_func for ``target`` (c, cuda, ascend).

    The entry is ``<symbol>_kernel`` (``symbol`` defaults to the family's
    name); the build names each variant after its key, so that several
    variants of one family can share a compiled artifact.
    """
    tilelang = _tilelang()  # a machine without TileLang fails here, cache or not
    cached = _cache_file(
        "lower",
        {
            "program": program_text,
            "target": target,
            "arch": arch,
            "symbol": symbol,
            "tilelang": [getattr(tilelang, "__version__", None), tilelang.__file__],
        },
    )
    if cached is not None and cached.exists():
        return Lowered(**json.loads(cached.read_text()))
    low = _lower(program_text, target, arch, symbol)
    if cached is not None:
        _cache_put(cached, json.dumps(dataclasses.asdict(low)).encode())
    return low


def _lower(program_text: str, target: str, arch: str | None, symbol: str | None) -> Lowered:
    tilelang = _tilelang()
    func, namespace = _program(program_text, target)
    if symbol is not None:
        if not re.fullmatch(r"[A-Za-z_]\w*", symbol):
            raise LoweringError(f"{symbol!r} is not a C identifier")
        func = func.with_attr("global_symbol", symbol)
    arch = arch or TARGETS[target].default_arch
    tg = _tvm_target(target, arch)
    try:
        with tg:
            art = tilelang.lower(func, target=tg)
    except Exception as exc:  # TVM raises its own error types
        raise LoweringError(
            f"tilelang could not lower {namespace['ENTRY_NAME']} for {target}: "
            f"{str(exc).strip().splitlines()[-1] if str(exc).strip() else exc!r}"
        ) from exc
    entry = f"{symbol or namespace['ENTRY_NAME']}_kernel"
    params, pointers = parse_signature(art.kernel_source, entry)
    threads = int(namespace["THREADS"])
    if namespace.get("THREADS_PER") == "block":  # one block per row (per chunk on cuda): the module's ROWS
        grid = str(namespace["ROWS"])
    else:
        grid = launch_grid(threads, int(namespace["W"]) if namespace.get("THREADS_PER") == "row" else 1)
    return Lowered(target, arch, art.kernel_source, entry, params, pointers, threads, grid)


def launch_grid(threads: int, rows_per_sequence: int = 1) -> str:
    """Blocks to launch as a Python expression over ``B``: one thread per sequence or per row.

    >>> launch_grid(128), launch_grid(128, 16)
    ('(B + 127) // 128', '(B * 16 + 127) // 128')
    """
    count = "B" if rows_per_sequence == 1 else f"B * {rows_per_sequence}"
    return f"({count} + {threads - 1}) // {threads}"


def parse_signature(source: str, entry: str) -> tuple[list[str], list[str]]:
    """Parameter names (call order) and the pointer ones of ``entry`` in ``source``."""
    match = re.search(rf"\b{re.escape(entry)}\s*\(([^)]*)\)", source)
    if match is None:
        raise LoweringError(f"entry {entry} not found in the generated source")
    params, pointers = [], []
    for decl in match.group(1).split(","):
        name = re.findall(r"[A-Za-z_]\w*", decl)[-1]
        params.append(name)
        if "*" in decl:
            pointers.append(name)
    return params, pointers


def include_dirs() -> list[str]:
    """TileLang's template headers (tl_templates/...) and the CUTLASS it vendors."""
    root = Path(_tilelang().__file__).resolve().parent
    return [str(root / "src"), str(root / "3rdparty" / "cutlass" / "include")]


def compiler(target: str) -> str:
    """The compiler command for ``target``; ``ToolchainMissing`` says what to install."""
    if target == "c":
        for cc in ("g++", "clang++", "c++"):
            if shutil.which(cc):
                return cc
        raise ToolchainMissing("no C++ compiler (g++, clang++) on PATH: the c target needs one")
    if target == "cuda":
        if not shutil.which("nvcc"):
            raise ToolchainMissing("nvcc not found on PATH: the cuda target needs the CUDA toolkit")
        return "nvcc"
    if not shutil.which("bisheng"):
        raise ToolchainMissing("bisheng not found on PATH: compiling for ascend needs CANN's bisheng")
    return "bisheng"


def compile_command(lowered: Lowered, src: Path, out: Path) -> list[str]:
    return _command(lowered.target, lowered.arch, src, out)


def _command(target: str, arch: str | None, src: Path, out: Path) -> list[str]:
    cc = compiler(target)
    inc = [f"-I{d}" for d in include_dirs()]
    if target == "c":
        return [cc, "-x", "c++", "-O2", "-shared", "-fPIC", inc[0], "-o", str(out), str(src)]
    if target == "cuda":
        return [cc, "-cubin", f"-arch={arch}", "-std=c++17", "-w", *inc, "-o", str(out), str(src)]
    return [cc, "-xcce", "-O2", "-c", inc[0], "-o", str(out), str(src)]  # unverified: no CANN here


def batchable(target: str) -> bool:
    """Whether variants of ``target`` can share one artifact (one shared library, one cubin)."""
    return target in ("c", "cuda")


def compile_artifact(lowered: Lowered, out_path: str | Path) -> list[str]:
    """Write the source beside ``out_path`` and compile it; returns the command used."""
    return compile_many([lowered], out_path)


def compile_many(lowered: list[Lowered], out_path: str | Path) -> list[str]:
    """Compile the sources of ``lowered`` (one target and arch, distinct entries) into one artifact.

    One compiler run makes one shared library (c) or one cubin (cuda) whose
    entries are those of ``lowered``; the combined source is written beside
    ``out_path``.  Returns the command used.
    """
    first = lowered[0]
    if len(lowered) > 1 and not batchable(first.target):
        raise ValueError(f"target {first.target!r} builds one variant per artifact")
    if len({(low.target, low.arch) for low in lowered}) != 1 or len({low.entry for low in lowered}) != len(lowered):
        raise ValueError("compile_many needs one target and arch and distinct entries")
    out = Path(out_path)
    src = out.with_suffix(source_suffix(first.target))
    src.write_text("\n".join(low.source for low in lowered), encoding="utf-8")
    cmd = _command(first.target, first.arch, src, out)
    cached = _cache_file("compile", _compile_record(cmd, src, out))
    if cached is not None and cached.exists():
        _cache_put(out, cached.read_bytes())
        return cmd
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0 or not out.exists() or out.stat().st_size == 0:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-15:])
        raise CompileError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{tail}")
    if cached is not None:
        _cache_put(cached, out.read_bytes())
    return cmd


def _compile_record(cmd: list[str], src: Path, out: Path) -> dict:
    """What a compiler run's artifact depends on: the command (its paths as placeholders), the compiler
    (resolved path, size, time stamp) and the source."""
    exe = shutil.which(cmd[0]) or cmd[0]
    try:
        st = os.stat(exe)
        stamp = [exe, st.st_size, st.st_mtime_ns]
    except OSError:
        stamp = [exe]
    args = ["<out>" if a == str(out) else "<src>" if a == str(src) else a for a in cmd[1:]]
    return {"compiler": stamp, "args": args, "source": src.read_text(encoding="utf-8")}
