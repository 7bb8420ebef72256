"""One rank of the hybrid target's tensor-parallel tests, started by test_tp_hybrid.py through ``launch``.

Reads a job (``argv[1]``, JSON), builds the ``qwen3.5-tiny`` hybrid from its
seed, splits it over the two ranks (gloo) and writes ``out_<rank>.pt`` beside
the job:

* ``layer``: one Gated DeltaNet layer, whole and split, over the same rows
  twice (from the zero state, then from the written slots): the split
  layer's all-reduced outputs and its pool, to be compared with the whole;
* ``runs``: every engine case's tokens and, after every step, each linear
  layer's committed ``(state, window)`` of this rank's heads (the rank check
  compares the ranks' step state after every step as well).
"""

import copy
import json
import sys
from pathlib import Path

import torch

from specgen.engine import AcceptanceMix
from specgen.engine.draft_kinds import DRAFT_KINDS
from specgen.engine.rank_check import RankCheck
from specgen.models.gated_deltanet import LinearStatePool
from specgen.models.qwen3_5 import Qwen35Model
from specgen.models.tp import shard_head, shard_layer, shard_model
from specgen.parallel.group import init_tensor_parallel
from specgen.runtime.library import load_library

sys.path.insert(0, str(Path(__file__).parents[1]))  # tests/: the oracles, as conftest.py puts them for pytest
from oracles.hybrid_reference import CommittedStates  # noqa: E402

PRESET = "qwen3.5-tiny"


def pool_for(layer, slots: int) -> LinearStatePool:
    return LinearStatePool(1, slots, layer.value_heads, layer.key_dim, layer.value_dim, layer.conv_dim, layer.kernel)


def layer_case(tp) -> dict:
    """A linear layer's outputs and pool, whole and split, over 3 sequences of 4 rows, twice."""
    full = Qwen35Model.create(PRESET, seed=0).layers[0]
    whole, split = full.linear_attn, shard_layer(copy.deepcopy(full), tp).linear_attn
    g = torch.Generator().manual_seed(5)
    b, r = 3, 4
    x = torch.randn(b * r, full.input_layernorm.weight.shape[0], generator=g)
    rows = torch.arange(b * r).view(b, r)
    out = {}
    for name, layer in (("whole", whole), ("split", split)):
        pool = pool_for(layer, 2 * b * r)
        first = layer(x, rows, torch.full((b,), -1), torch.arange(b * r), pool, 0)
        # continue from each sequence's row-1 and row-3 states, into the other half of the pool
        second = layer(x.flip(0), rows, torch.tensor([1, 7, 11]), torch.arange(b * r) + b * r, pool, 0)
        out[name] = {"outputs": [first, second], "state": pool.recurrent[0].clone(), "window": pool.conv[0].clone()}
    return out


def run_case(model, heads, lib, case, tp) -> dict:
    kind = DRAFT_KINDS[case["kind"]]
    draft = heads[(case["kind"], case.get("draft_tp", 1))]
    mix = None
    if case["p"] is not None:
        mix = AcceptanceMix(case["p"], torch.tensor(case["oracle"]), model.config.vocab_size, seed=case["batch"])
    eng = kind.engine(
        model,
        draft,
        mode=case["mode"],
        width=case["depth"] + 1,
        batch=case["batch"],
        block_size=16,
        block_table_width=8,
        library=lib,
        acceptance=mix,
        compile_backend="eager",
        rank_check=RankCheck(tp, 1),
    )
    eng.observer = committed = CommittedStates()
    try:
        res = eng.run(case["prompts"], max_new_tokens=case["new"])
        return {"outputs": res.outputs, "stats": res.runtime_stats, "committed": committed.steps}
    finally:
        eng.close()


def main() -> None:
    job = json.loads(Path(sys.argv[1]).read_text())
    torch.set_num_threads(1)
    tp = init_tensor_parallel(2, "cpu")
    lib = load_library(job["kernels"])
    out = {"layer": layer_case(tp), "runs": []}
    model = shard_model(Qwen35Model.create(PRESET, seed=0), tp)
    heads = {(k, 1): DRAFT_KINDS[k].create(model, seed=1) for k in ("mtp", "dflash")}
    heads["mtp", 2] = shard_head(DRAFT_KINDS["mtp"].create(model, seed=1), tp)
    for case in job["cases"]:
        out["runs"].append(run_case(model, heads, lib, case, tp))
    torch.save(out, Path(sys.argv[1]).with_name(f"out_{tp.rank}.pt"))
    tp.close()


if __name__ == "__main__":
    main()
