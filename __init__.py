"""specgen: a compiler for the host bubbles of speculative decoding.

Pipeline boundaries become dataflow graphs (``specgen.passes``); passes hoist
token-independent work, turn host syncs into device events and fuse update
chains into kernel-family ops; ``specgen.codegen`` renders the families into
TileLang programs per specialization; ``specgen.runtime`` loads the built
variants into captured graphs without importing TileLang.
"""

__version__ = "0.1.0"
