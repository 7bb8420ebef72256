"""The build folder's ``__init__.py``: the folder becomes an importable package of its variants."""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

import jinja2

from ..runtime.manifest import parse_manifest


def render_package_init(manifest: dict) -> str:
    """Source of the build folder's ``__init__.py`` (templates/kernel_package.py.jinja), after validating
    ``manifest``."""
    parsed = parse_manifest(manifest, Path("manifest.json"))
    text = files("specgen.templates").joinpath("kernel_package.py.jinja").read_text(encoding="utf-8")
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True, autoescape=False)
    return env.from_string(text).render(
        specgen_version=parsed.specgen_version,
        tilelang_version=parsed.tilelang_version or "unknown",
        targets=list(parsed.targets),
        keys=sorted({e.key for e in parsed.variants}),
    )
