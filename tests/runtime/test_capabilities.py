"""What a model declares about itself: capabilities_of."""

from __future__ import annotations

from specgen.runtime.capabilities import SpeculativeVerifyCapabilities, capabilities_of

ON = SpeculativeVerifyCapabilities(supports_in_graph_input_update=True, block_size=16, block_table_width=8)


def test_capabilities_of():
    class Attr:
        speculative_verify_capabilities = ON

    class Method:
        def speculative_verify_capabilities(self):
            return {"supports_in_graph_input_update": True, "block_size": 32}

    assert capabilities_of(object()) == SpeculativeVerifyCapabilities()
    assert not capabilities_of(object()).supports_in_graph_input_update
    assert capabilities_of(Attr()) == ON
    got = capabilities_of(Method())
    assert got.supports_in_graph_input_update and got.block_size == 32 and got.block_table_width == 64
