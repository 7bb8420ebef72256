"""Views of a graph: text, mermaid, the JSON summary."""

from textwrap import dedent

from specgen.passes import build_boundary, render_mermaid, run_pipeline, summary


def test_mermaid_has_swimlanes():
    text = render_mermaid(build_boundary("draft-to-verify", width=4, batch=1))
    assert text.startswith("sequenceDiagram") and "participant H as host" in text and "participant D as draft" in text


def test_golden_mermaid_after_the_pipeline():
    after, _ = run_pipeline(build_boundary("context-kv", width=2))
    assert (
        render_mermaid(after, "context-kv after").splitlines()
        == dedent("""\
        sequenceDiagram
            autonumber
            title context-kv after
            participant P as prepare
            participant T as target
            participant D as draft
            participant H as host
            H->>P: h2d_seq_lens
            H->>P: h2d_block_table
            H->>P: h2d_scratch_slot
            H->>P: h2d_draft_tokens
            P-->>P: event_record ev_sources
            T-->>T: event_wait ev_sources
            H->>T: replay graph: target_forward, spec_verify_context_tail_update__w2_bt64_bs128
            Note over T: boundary starts after target_replay
            T-->>T: event_record ev_dev_context_mask
            H->>T: d2h_accepted
            H->>T: d2h_target_tokens
            D-->>D: event_wait ev_dev_context_mask
            H->>D: context_kv_write
            Note over D: boundary ends at context_kv_write
            H->>H: sync_accept
            H->>H: host_commit
        """).splitlines()
    )


def test_summary_spells_each_variant_with_the_full_layout():
    after, _ = run_pipeline(build_boundary("context-kv", width=2))
    assert summary(after)["kernel_families"] == [
        {
            "family": "spec_verify_context_tail_update",
            "key": "spec_verify_context_tail_update__w2_bt64_bs128",
            "width": 2,
            "block_table_width": 64,
            "block_size": 128,
            "draft_dtype": "int32",
        },
    ]
