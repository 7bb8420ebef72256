"""What a target model declares about its verification inputs: the one capabilities record.

The passes build a boundary's "before" graph from it (``has_linear_state``
adds recurrent-state slots, ``graph_task_update`` a host-patched graph task);
the runtime takes the captured path only when ``supports_in_graph_input_update``
is set and the block layout matches the built variants.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SpeculativeVerifyCapabilities:
    requires_causal_chunked_prefill: bool = False
    supports_in_graph_input_update: bool = False
    has_linear_state: bool = False
    graph_task_update: bool = True  # a host-patched task (e.g. causal conv) in the target graph
    block_size: int = 128
    block_table_width: int = 64
