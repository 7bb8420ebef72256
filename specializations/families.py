"""The kernel families: names, specialization keys and argument lists.

The semantics are those of ``docs/kernels.md`` (the kernel contract);
``specgen.runtime.semantics`` holds the torch implementation of each family,
the ground truth for every generated variant.  Shapes are expressions over
``B`` (batch, a run-time dimension), ``W`` (verify width), ``BT`` (block-table
width), ``NS`` (split count of the attention tiling), ``V`` (the vocabulary) and ``C``
(a block family's chunks per row), the last two run-time dimensions read from the
tensors (and ``W`` too where the key lacks it: ``family_rules``), evaluated by
``specializations.expr`` only.

Adding a family: ``register(Family(...))`` here (or from a plugin), a template
``templates/<name>.py.jinja`` (or one in a folder given to
``codegen.templates.add_template_dir``), its torch semantics in
``runtime/semantics.py`` (``register_semantics``) and its tests; nothing else
changes.  Its run-time guards are ``BASE_GUARDS`` plus what its arguments
imply, unless it lists its own ``guards``.
"""

from __future__ import annotations

from dataclasses import dataclass

from .expr import eval_shape, expression_names
from .family_rules import THREADS_PER, check_family, names_width  # noqa: F401 - THREADS_PER re-exported here
from .guard_rules import BASE_GUARDS, BLOCK_ENTRY, GUARD_RULE_NAMES, GuardRule  # noqa: F401 - re-exported here

MIN_WIDTH, MAX_WIDTH = 2, 16
DEFAULT_NUM_SPLITS = 8
DRAFT_DTYPES = ("int32", "int64")
ARG_DTYPES = ("int32", "int64", "float32")  # what a kernel argument (and the manifest's record of it) may hold


@dataclass(frozen=True, slots=True)
class ArgSpec:
    name: str
    dtype: str  # "int32", "int64" or "float32"; "draft" means the variant's draft dtype
    shape: str  # Python expression over B, W, BT, NS, V, C; a tuple for 2-D tensors
    output: bool = False


@dataclass(frozen=True, slots=True)
class Family:
    """A kernel family.

    ``threads_per`` is the launch: ``"sequence"`` runs one thread per sequence
    ``b`` (``B`` threads), ``"row"`` one per verification row ``r = b * W + j``
    (``B * W`` threads, so a thread's work does not grow with ``W``); a
    per-row family needs ``W`` in its key.  ``"block"`` runs a block of ``THREADS``
    threads per row ``r`` of ``rows`` (``"B"``, ``"B * W"``); where shapes name ``C``, one
    per chunk ``ch`` of the row's ``C`` (on ``c`` the row's block walks them).  A
    composite takes its members' launch, which they must share (never a block launch).
    A family whose key lacks ``W`` has one variant for every width; where its shapes or
    rows name ``W`` it is width-free (``width_free``): ``W`` is read from the tensors.
    """

    name: str
    key_params: tuple[str, ...]  # subset of ("W", "BT", "BS"), in key order
    args: tuple[ArgSpec, ...]
    has_draft_dtype: bool = False  # int32/int64 draft tokens are separate variants
    members: tuple[str, ...] = ()  # a composite: these families in order, one kernel (see COMPOSITES)
    guards: tuple[GuardRule, ...] | None = None  # None: what the arguments imply (see guard_rules)
    threads_per: str = "sequence"  # one of THREADS_PER
    # inputs read only at the thread's own sequence (``x[b]``, ``x[b, ...]``): in a composite launched one
    # thread per sequence, an earlier member may write them (the thread reads back what it wrote)
    own_row_inputs: tuple[str, ...] = ()
    carried: tuple[str, ...] = ()  # a composite's values passed from a member to a later one (``_composite``)
    rows: str = ""  # a block launch's rows (= blocks), over B and W: "B" or "B * W"; empty for the others
    threads: int = 0  # the threads of every variant's block; 0: the build's choice (128)

    def __post_init__(self):
        check_family(self)  # family_rules: the launch, and where the run-time dimensions are read

    @property
    def per_row(self) -> bool:
        return self.threads_per == "row"

    @property
    def uses_vocab(self) -> bool:  # an argument's shape names the vocabulary V (read from the tensors)
        return any("V" in expression_names(a.shape) for a in self.args)

    @property
    def uses_chunks(self) -> bool:  # an argument's shape names C, the blocks (chunks) that share a row
        return any("C" in expression_names(a.shape) for a in self.args)

    @property
    def width_free(self) -> bool:  # W is not in the key, yet the shapes or rows name it: read from the tensors
        return "W" not in self.key_params and names_width(self)

    @property
    def uses_num_splits(self) -> bool:
        return TILING in (self.name, *self.members)

    @property
    def guard_rules(self) -> tuple[GuardRule, ...]:
        """``BASE_GUARDS``, then the family's own rules.

        Without explicit ``guards`` the arguments decide: a ``block_table``
        argument implies ``BLOCK_ENTRY``.  A composite holds where all its
        members hold.
        """
        if self.members:
            rules: dict[str, GuardRule] = {}
            for m in self.members:
                for r in FAMILIES[m].guard_rules:
                    rules.setdefault(r.expr, r)
            return tuple(rules.values())
        own = self.guards
        if own is None:
            own = (BLOCK_ENTRY,) if any(a.name == "block_table" for a in self.args) else ()
        return BASE_GUARDS + tuple(own)

    @property
    def inputs(self) -> tuple[ArgSpec, ...]:
        return tuple(a for a in self.args if not a.output)

    @property
    def outputs(self) -> tuple[ArgSpec, ...]:
        return tuple(a for a in self.args if a.output)


def _a(name, shape, dtype="int32", out=False):
    return ArgSpec(name, dtype, shape, out)


TILING = "spec_verify_attention_tiling_update"
# The acceptance families: greedy (drafts equal to the target's argmax) and sampled (speculative
# rejection sampling); a boundary planned for a sampling batch launches the second in place of the first.
GREEDY_VERIFY, REJECTION_VERIFY = "greedy_prefix_verify", "spec_rejection_verify"
# The row remap of a serving loop (rows leaving and joining the batch between two steps).  It runs beside
# the tails' plans, not inside them: ``COMPANIONS`` names the families a build makes wherever it makes a
# boundary's plan, for engines that launch them between steps.
ROW_REMAP = "spec_batch_row_remap"


def _composite(name: str, members: tuple[str, ...], bases: dict[str, "Family"]) -> "Family":
    """One kernel doing ``members`` in order: the union of their arguments, inputs first.

    Its semantics are the composition of the members' sections of ``docs/kernels.md``,
    its key the widest member key, its launch (``threads_per``) the one all members
    share.  A member reads another's output only where the value passes within a
    thread: the reader is later, the launch is one thread per sequence, and the reader
    lists the value in ``own_row_inputs`` (a chain such as verification, then the next
    draft's inputs from the accepted count).  Such a value is an output of the composite.
    """
    fams = [bases[m] for m in members]
    if any(f.threads_per == "block" for f in fams):
        raise ValueError(f"{name}: a block family (one block per row) is never a composite's member")
    launches = {f.threads_per for f in fams}
    if len(launches) != 1:
        per = ", ".join(f"{f.name}: one thread per {f.threads_per}" for f in fams)
        raise ValueError(f"{name}: its members launch differently ({per}); one kernel has one launch")
    written: set[str] = set()
    read: set[str] = set()
    carried: dict[str, None] = {}
    for f in fams:
        for a in f.inputs:
            if a.name in written:
                if f.threads_per != "sequence" or a.name not in f.own_row_inputs:
                    raise ValueError(f"{name}: '{a.name}' is both read and written by its members")
                carried[a.name] = None
            read.add(a.name)
        for a in f.outputs:
            if a.name in written | read:
                raise ValueError(f"{name}: '{a.name}' is read or written by a member before {f.name} writes it")
            written.add(a.name)
    args: dict[str, ArgSpec] = {}
    for a in [a for f in fams for a in f.inputs if a.name not in written] + [a for f in fams for a in f.outputs]:
        args.setdefault(a.name, a)  # the first member's record of a shared name
    keys = {p for f in fams for p in f.key_params}
    return Family(
        name,
        tuple(p for p in ("W", "BT", "BS") if p in keys),
        tuple(args.values()),
        any(f.has_draft_dtype for f in fams),
        tuple(members),
        threads_per=launches.pop(),
        carried=tuple(carried),
    )


def carried_values(name: str) -> frozenset[str]:
    """The values the composite ``name`` passes from one member to a later one within a thread (see
    ``_composite``); empty for a family that is no composite."""
    return frozenset(FAMILIES[name].carried)


# the next draft's anchor (the bonus token at the new length) from the accepted count, the verified tokens and
# the lengths: what prepare_next_draft and prepare_next_block share
ANCHOR_INPUTS = (_a("accepted", "(B,)"), _a("target_tokens", "(B, W)"), _a("seq_lens", "(B,)"))
ANCHOR_OUTPUTS = (_a("next_last_token", "(B,)", out=True), _a("next_seq_lens", "(B,)", out=True))
ANCHOR_OWN_ROWS = ("accepted", "target_tokens", "seq_lens")

FAMILIES: dict[str, Family] = {
    f.name: f
    for f in (
        Family(
            "spec_verify_token_update",
            ("W",),
            (_a("last_tokens", "(B,)"), _a("draft_tokens", "(B, W - 1)", "draft"), _a("tokens", "(B * W,)", out=True)),
            has_draft_dtype=True,
            threads_per="row",
        ),
        Family(
            "spec_verify_metadata_update",
            ("W", "BT", "BS"),
            (
                _a("seq_lens", "(B,)"),
                _a("block_table", "(B, BT)"),
                _a("positions", "(B * W,)", out=True),
                _a("slot_mapping", "(B * W,)", out=True),
                _a("kv_lens", "(B,)", out=True),
                _a("query_start_loc", "(B + 1,)", out=True),
            ),
            threads_per="row",
        ),
        Family(
            "spec_verify_attention_tiling_update",
            ("W", "BS"),
            (
                _a("seq_lens", "(B,)"),
                _a("row_kv_lens", "(B * W,)", out=True),
                _a("row_num_blocks", "(B * W,)", out=True),
                _a("row_last_block_len", "(B * W,)", out=True),
                _a("row_block_offsets", "(B * W + 1,)", out=True),
                _a("max_kv_len", "(1,)", out=True),
                _a("kv_split_len", "(1,)", out=True),
            ),
            guards=(
                GuardRule("max_seq_len + W <= 2147483647", "S + W fits int32: row_kv_lens and max_kv_len are int32"),
                GuardRule(
                    "batch * W * ((max_seq_len + W + BS - 1) // BS) <= 2147483647",
                    "B * W * ceil((S + W) / BS) fits int32: row_block_offsets ends with the total",
                ),
            ),
            threads_per="row",
        ),
        Family(
            "greedy_prefix_verify",
            ("W",),
            (
                _a("draft_tokens", "(B, W - 1)"),
                _a("target_tokens", "(B, W)"),
                _a("accepted", "(B,)", out=True),
                _a("next_tokens", "(B, W)", out=True),
            ),
        ),
        # Sampled verification: greedy_prefix_verify's outputs from the probabilities of the drafted
        # tokens, the acceptance uniforms and each row's token (docs/kernels.md, spec_rejection_verify).
        Family(
            REJECTION_VERIFY,
            ("W",),
            (
                _a("draft_tokens", "(B, W - 1)"),
                _a("target_tokens", "(B, W)"),
                _a("draft_probs", "(B, W - 1)", "float32"),
                _a("target_draft_probs", "(B, W - 1)", "float32"),
                _a("accept_uniforms", "(B, W - 1)", "float32"),
                _a("temperature", "(B,)", "float32"),
                _a("accepted", "(B,)", out=True),
                _a("next_tokens", "(B, W)", out=True),
            ),
        ),
        Family(
            "prepare_next_draft",
            ("W", "BT", "BS"),
            (
                *ANCHOR_INPUTS,
                _a("block_table", "(B, BT)"),
                _a("scratch_slot", "(1,)"),
                *ANCHOR_OUTPUTS,
                _a("draft_positions", "(B, 2)", out=True),
                _a("draft_slots", "(B, 2)", out=True),
                _a("hidden_rows", "(B, 2)", out=True),
            ),
            guards=(
                GuardRule(
                    "max_seq_len + W + 1 <= BT * BS",
                    "S + W + 1 <= BT * BS: the next draft position S' <= S + W has a block-table entry",
                ),
            ),
            own_row_inputs=ANCHOR_OWN_ROWS,
        ),
        Family(
            "context_kv_update",
            ("W", "BT", "BS"),
            (
                _a("accepted", "(B,)"),
                _a("seq_lens", "(B,)"),
                _a("block_table", "(B, BT)"),
                _a("context_slots", "(B * W,)", out=True),
            ),
            guards=(
                GuardRule(
                    "max_seq_len + W <= BT * BS", "S + W <= BT * BS: every accepted context row has a block-table entry"
                ),
            ),
            own_row_inputs=("accepted", "seq_lens"),
        ),
        # a block draft's next anchor: prepare_next_draft's first two outputs, without the MTP draft's two rows
        Family("prepare_next_block", ("W",), (*ANCHOR_INPUTS, *ANCHOR_OUTPUTS), own_row_inputs=ANCHOR_OWN_ROWS),
        # Serving under churn: the continuing and joining rows' step state gathered into a step's rows, and the
        # next draft's positions, slots and hidden rows recomputed from it (docs/kernels.md, spec_batch_row_remap).
        Family(
            ROW_REMAP,
            ("W", "BT", "BS"),
            (
                _a("src_rows", "(B,)"),
                _a("src_tokens", "(B * W,)"),
                _a("src_accepted", "(B,)"),
                _a("src_next_last_token", "(B,)"),
                _a("src_next_seq_lens", "(B,)"),
                _a("block_table", "(B, BT)"),
                _a("scratch_slot", "(1,)"),
                _a("tokens", "(B * W,)", out=True),
                _a("accepted", "(B,)", out=True),
                _a("next_last_token", "(B,)", out=True),
                _a("next_seq_lens", "(B,)", out=True),
                _a("draft_positions", "(B, 2)", out=True),
                _a("draft_slots", "(B, 2)", out=True),
                _a("hidden_rows", "(B, 2)", out=True),
                _a("hidden_src", "(B * W,)", out=True),
            ),
            guards=(
                GuardRule(
                    "max_seq_len + 1 <= BT * BS",
                    "S + 1 <= BT * BS: the next draft position S of every row has a block-table entry",
                ),
            ),
        ),
        Family(
            "spec_verify_linear_state_update",
            ("W",),
            (
                _a("accepted", "(B,)"),
                _a("state_slots", "(B, W)"),
                _a("state_read_slot", "(B,)", out=True),
                _a("state_write_slots", "(B * W,)", out=True),
            ),
            guards=(),
            threads_per="row",
        ),
    )
}

# Composite families: chains of update families on one stream that the fuse-chain pass turns
# into a single launch.  spec_verify_head_update is the whole head of the verify graph.
# spec_verify_hybrid_head_update is the same head for a target with linear-attention state (its slot
# indices join the chain); listed first, it is the one fuse-chain takes where both could apply.
LINEAR_STATE = "spec_verify_linear_state_update"
HEAD_MEMBERS = ("spec_verify_token_update", "spec_verify_metadata_update", TILING)
# The tails after the forward: verification, then what the next draft reads (its positions and slots, or a
# block draft's context slots), one launch; the accepted count passes within each sequence's thread.
NEXT_DRAFT, CONTEXT_KV_UPDATE, NEXT_BLOCK = "prepare_next_draft", "context_kv_update", "prepare_next_block"
TAIL_COMPOSITES: dict[str, tuple[str, ...]] = {
    "spec_verify_tail_update": (GREEDY_VERIFY, NEXT_DRAFT),
    "spec_verify_context_tail_update": (GREEDY_VERIFY, NEXT_BLOCK, CONTEXT_KV_UPDATE),
    "spec_rejection_tail_update": (REJECTION_VERIFY, NEXT_DRAFT),
    "spec_rejection_context_tail_update": (REJECTION_VERIFY, NEXT_BLOCK, CONTEXT_KV_UPDATE),
}
COMPOSITES: dict[str, tuple[str, ...]] = {
    "spec_verify_hybrid_head_update": (*HEAD_MEMBERS, LINEAR_STATE),
    "spec_verify_head_update": HEAD_MEMBERS,
    **TAIL_COMPOSITES,
}
FAMILIES.update({name: _composite(name, members, FAMILIES) for name, members in COMPOSITES.items()})

# Families built with a boundary's plan though no plan step launches them: the row remap moves what the tails
# leave for the next draft (accepted, next_last_token, next_seq_lens, the verify tokens) between the rows of two
# steps, at the tails' layouts.
COMPANIONS: dict[str, tuple[str, ...]] = {
    tail: (ROW_REMAP,) for tail in ("verify-to-draft", "context-kv", "verify-to-draft-sampled", "context-kv-sampled")
}


def register(family: Family) -> Family:
    """Add ``family`` to ``FAMILIES`` (a composite's members must be registered first)."""
    if family.name in FAMILIES:
        raise ValueError(f"kernel family {family.name!r} is already registered")
    if family.members:
        family = _composite(family.name, family.members, FAMILIES)
        COMPOSITES[family.name] = family.members
    FAMILIES[family.name] = family
    return family


def unregister(name: str) -> None:
    """Remove a family added by ``register`` (tests of plugin families clean up with it)."""
    FAMILIES.pop(name, None)
    COMPOSITES.pop(name, None)


def shape_of(
    arg: ArgSpec, B: int, W: int, BT: int | None = None, NS: int = DEFAULT_NUM_SPLITS, **run: int | None
) -> tuple[int, ...]:
    """``run``: the run-time ``V`` and ``C`` (``eval_shape``'s keywords), where the shape names them."""
    return eval_shape(arg.shape, B=B, W=W, BT=BT, NS=NS, **run)
