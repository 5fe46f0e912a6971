"""Megatron-style sharded checkpoints through torch.distributed.checkpoint, resharded on load."""

from __future__ import annotations

import pytest
import torch

from executor.adapters import megatron
from executor.state import Layout
from executor.workers.model import ModelSpec, param_specs
from executor.workers.trainer import TrainerRank, train_in_process

SPEC = ModelSpec(hidden=16, ffn=32, layers=4, vocab=32, seed=5)


def _coord(*a):
    return True if a[0] != "lease" else 1


def _trained(layout):
    ranks = [TrainerRank(f"w{r}", 1, "c", vars(layout), r, vars(SPEC), _coord) for r in range(layout.world)]
    train_in_process(ranks, range(2))
    return ranks


@pytest.mark.parametrize("old,new", [(Layout(2, 2, 2), Layout(4, 1, 1)), (Layout(4, 1, 1), Layout(1, 2, 3))])
def test_save_then_load_into_another_layout_is_bit_identical(tmp_path, old, new):
    from executor.migrations import reshard

    ranks = _trained(old)
    wrote = [megatron.save(t.shards, t.step_no, SPEC, old, t.rank, tmp_path) for t in ranks]
    assert sum(wrote) == old.world // old.dp  # DP replicas > 0 write nothing
    # Oracle: the in-memory reshard of the same state (independently tested for tiling).
    want = reshard.empty_shards(SPEC, new, 0)
    for r in range(new.world):
        want = reshard.empty_shards(SPEC, new, r)
        reshard.apply_local([p for p in reshard.plan(SPEC, old, new) if p.dst == r], {t.rank: t.shards for t in ranks}, {r: want})
        got, step = megatron.load(tmp_path, new, r)
        assert step == 2
        assert got.keys() == want.keys()
        for n in got:
            for k in got[n]:
                assert torch.equal(got[n][k], want[n][k]), (r, n, k)


def test_metadata_follows_megatron_conventions():
    lay = Layout(2, 2, 2)
    metas = [m for r in range(lay.world) for m in megatron.sharded_metadata(SPEC, lay, r)]
    keys = {m["key"] for m in metas}
    assert "decoder.layers.0.mlp.linear_fc1.weight" in keys and "embedding.word_embeddings.weight" in keys
    for p in param_specs(SPEC):
        mine = [m for m in metas if m["name"] == p.name and m["replica_id"] == 0]
        covered = sum(torch.Size(m["local_shape"]).numel() for m in mine)
        assert covered == torch.Size(p.shape).numel(), p.name  # replica 0 covers the global tensor once


def test_loading_a_missing_checkpoint_names_the_directory(tmp_path):
    with pytest.raises(FileNotFoundError, match=str(tmp_path)):
        megatron.load(tmp_path, Layout(), 0)


def test_real_megatron_sharded_tensors():
    pytest.importorskip("megatron.core", reason="the megatron extra is installed on GPU clusters only")
    lay = Layout(2, 1, 1)
    t = _trained(lay)[1]
    sd = megatron.to_megatron(t.shards, SPEC, lay, 1)
    st = sd["model/decoder.layers.0.mlp.linear_fc1.weight"]
    assert st.global_shape == (SPEC.ffn, SPEC.hidden) and st.global_offset == (SPEC.ffn // 2, 0)
