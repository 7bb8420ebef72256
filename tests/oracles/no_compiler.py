"""A machine without the compiler, for a fresh interpreter: ``python -c BLOCK + code``.

``BLOCK`` installs a ``sys.meta_path`` finder that refuses ``COMPILER`` (TileLang, jinja2, sympy,
networkx), so importing any of them fails as it does where only ``pip install specgen`` ran.
"""

from __future__ import annotations

import textwrap

__all__ = ["BLOCK", "COMPILER"]

COMPILER = ("tilelang", "jinja2", "sympy", "networkx")

BLOCK = textwrap.dedent(f"""
    import sys

    class _NoCompiler:
        names = {COMPILER!r}

        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in self.names:
                raise ImportError(f"No module named {{name!r}}", name=name)
            return None

    sys.meta_path.insert(0, _NoCompiler())
""")
