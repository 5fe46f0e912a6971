"""Megatron-style sharded checkpoints (dist_checkpointing conventions, the distributed optimizer's
sharded Adam state) through torch.distributed.checkpoint, resharded on load."""

from __future__ import annotations

import json

import pytest
import torch

from executor.adapters import megatron
from executor.state import Layout
from executor.workers.model import ModelSpec, owned_params, param_specs, shard_shape
from executor.workers.trainer import TrainerRank, train_in_process

SPEC = ModelSpec(hidden=16, ffn=32, layers=4, vocab=32, seed=5)


def _coord(*a):
    return True if a[0] != "lease" else 1


def _trained(layout):
    ranks = [TrainerRank(f"w{r}", 1, "c", vars(layout), r, vars(SPEC), _coord) for r in range(layout.world)]
    train_in_process(ranks, range(2))
    return ranks


def _want(ranks, old, new, r):
    """Oracle: the in-memory reshard of the same state (independently tested for tiling)."""
    from executor.migrations import reshard

    want = reshard.empty_shards(SPEC, new, r)
    reshard.apply_local([p for p in reshard.plan(SPEC, old, new) if p.dst == r], {t.rank: t.shards for t in ranks}, {r: want})
    return want


@pytest.mark.parametrize("old,new", [(Layout(2, 2, 2), Layout(4, 1, 1)), (Layout(4, 1, 1), Layout(1, 2, 3)),
                                     (Layout(1, 1, 4), Layout(2, 2, 1))])
@pytest.mark.parametrize("dist_opt", [True, False], ids=["distributed-optimizer", "replicated-adam"])
def test_save_then_load_into_another_layout_is_bit_identical(tmp_path, old, new, dist_opt):
    ranks = _trained(old)
    wrote = [megatron.save(t.shards, t.step_no, SPEC, old, t.rank, tmp_path, distributed_optimizer=dist_opt) for t in ranks]
    if dist_opt:
        assert sum(wrote) == old.world  # every DP rank writes its range of the Adam moments
    else:
        assert sum(wrote) == old.world // old.dp  # DP replicas > 0 write nothing
    for r in range(new.world):
        want = _want(ranks, old, new, r)
        got, step = megatron.load(tmp_path, new, r)
        assert step == 2
        assert got.keys() == want.keys()
        for n in got:
            for k in got[n]:
                assert torch.equal(got[n][k], want[n][k]), (r, n, k)


def test_the_distributed_optimizer_shards_adam_state_over_dp_without_overlap_or_gap():
    """Each DP rank of a (stage, TP index) owns a disjoint range of its shards' flattened moments;
    together they cover every element once, and the ranges are near-equal (one contiguous buffer
    split in dp equal parts, the last one short by the padding)."""
    lay = Layout(2, 2, 3)
    for pp_i in range(lay.pp):
        for tp_i in range(lay.tp):
            group = [lay.rank_of(pp_i, d, tp_i) for d in range(lay.dp)]
            params = owned_params(SPEC, lay, group[0])
            cover = {p.name: torch.zeros(torch.Size(shard_shape(p, lay)).numel(), dtype=torch.int32) for p in params}
            owned = []
            for r in group:
                rng = megatron.dist_opt_ranges(SPEC, lay, r)
                owned.append(sum(e - s for s, e in rng.values()))
                for n, (s, e) in rng.items():
                    cover[n][s:e] += 1
            assert all(bool((c == 1).all()) for c in cover.values()), (pp_i, tp_i)
            assert max(owned) - min(owned) < lay.dp, owned


def test_a_dp_rank_writes_only_its_range_of_the_moments(tmp_path):
    lay = Layout(1, 1, 4)
    ranks = _trained(lay)
    for t in ranks:
        megatron.save(t.shards, t.step_no, SPEC, lay, t.rank, tmp_path)
    total = sum(torch.Size(p.shape).numel() for p in param_specs(SPEC))
    for t in ranks:
        meta = json.loads((tmp_path / f"rank{t.rank}" / "rl_planner_meta.json").read_text())
        moments = [m for m in meta["sharded_tensors"] if m["kind"] == "exp_avg"]
        assert all(m["replica_id"] == [0, 0, 0] and "flattened_range" in m for m in moments)
        assert sum(e - s for s, e in (m["flattened_range"] for m in moments)) <= -(-total // lay.dp)
        models = [m for m in meta["sharded_tensors"] if m["kind"] == "param"]
        assert bool(models) == (t.rank == 0)  # the parameters come from DP replica 0 only
        own = megatron.own_optimizer_state(t.shards, SPEC, lay, t.rank)
        assert sum(v["exp_avg"].numel() for v in own.values()) == sum(e - s for s, e in (m["flattened_range"] for m in moments))


def test_metadata_follows_megatron_conventions():
    lay = Layout(2, 2, 2)
    metas = [m for r in range(lay.world) for m in megatron.sharded_metadata(SPEC, lay, r)]
    keys = {m["key"] for m in metas}
    assert {"decoder.layers.0.mlp.linear_fc1.weight", "embedding.word_embeddings.weight", "decoder.final_layernorm.weight",
            "optimizer.state.exp_avg.decoder.layers.3.mlp.linear_fc2.weight",
            "optimizer.state.exp_avg_sq.embedding.word_embeddings.weight"} <= keys
    for p in param_specs(SPEC):
        mine = [m for m in metas if m["name"] == p.name and m["kind"] == "param" and not any(m["replica_id"])]
        covered = sum(torch.Size(m["local_shape"]).numel() for m in mine)
        assert covered == torch.Size(p.shape).numel(), p.name  # the main replicas cover the global tensor once


def test_a_missing_rank_directory_is_named(tmp_path):
    import shutil

    lay = Layout(1, 1, 2)
    for t in _trained(lay):
        megatron.save(t.shards, t.step_no, SPEC, lay, t.rank, tmp_path)
    shutil.rmtree(tmp_path / "rank1")  # DP rank 1's range of the moments is gone
    with pytest.raises(RuntimeError, match="does not cover.*optimizer.state"):
        megatron.load(tmp_path, Layout(), 0)


def test_loading_a_missing_checkpoint_names_the_directory(tmp_path):
    with pytest.raises(FileNotFoundError, match=str(tmp_path)):
        megatron.load(tmp_path, Layout(), 0)


def test_real_megatron_sharded_tensors():
    """With megatron-core installed: real ShardedTensors, each passing Megatron's own metadata
    check; the moments flattened where that megatron-core supports it, else (0.16+) canonical."""
    pytest.importorskip("megatron.core", reason="the megatron extra is installed on GPU clusters only")
    from megatron.core.dist_checkpointing import ShardedTensor
    from megatron.core.dist_checkpointing.mapping import is_main_replica

    lay = Layout(2, 1, 2)
    ranks = _trained(lay)
    for t in ranks:
        sd = megatron.to_megatron(t.shards, SPEC, lay, t.rank)
        for v in sd.values():
            v.validate_metadata_integrity()
        _, dp_i, tp_i = lay.coords(t.rank)
        st = sd["decoder.layers.0.mlp.linear_fc1.weight"]
        assert st.global_shape == (SPEC.ffn, SPEC.hidden) and st.global_offset == (tp_i * SPEC.ffn // 2, 0)
        assert is_main_replica(st.replica_id) == (dp_i == 0)
        moments = [v for k, v in sd.items() if k.startswith("optimizer.state.exp_avg.")]
        if hasattr(ShardedTensor, "from_rank_offsets_flat"):
            assert moments and all(v.flattened_range is not None and is_main_replica(v.replica_id) for v in moments)
        else:
            assert moments and all(v.flattened_range is None and v.data.shape == v.local_shape for v in moments)
            split = [v for v in moments if "linear_fc1" in v.key]  # TP-split: written by DP rank 0 of each TP index
            assert split and all(is_main_replica(v.replica_id) == (dp_i == 0) for v in split)


def test_an_export_for_megatron_carries_the_optimizers_main_parameter_copies(tmp_path):
    """``write_checkpoint(..., main_params=True)`` adds ``optimizer.state.param.<key>`` (what Megatron's
    distributed optimizer loads its fp32 main parameters from, checked on a GPU in
    test_exec_megatron_gpu.py); read back into a TP1 x PP2 layout through DCP, each copy equals the
    parameter it copies, and a P2P checkpoint (the default) has none."""
    from executor.workers import shardstate
    from executor.workers.megatron_trainer import MegatronRank, write_checkpoint

    dims = dict(hidden=16, ffn=32, layers=2, heads=4, kv_heads=2, vocab=32, seed=3)
    tp2 = [MegatronRank(f"t{r}", 1, "c", {"tp": 2}, r, dims, _coord) for r in range(2)]
    for r in tp2:
        r.train_step(0)
    write_checkpoint([r.state() for r in tp2], str(tmp_path / "export"), main_params=True)
    write_checkpoint([r.state() for r in tp2], str(tmp_path / "p2p"))
    for rank in range(2):
        dst = MegatronRank(f"n{rank}", 1, "c", {"tp": 1, "pp": 2}, rank, dims, _coord, init="empty")
        params = {k: m for k, m in dst.chunks.items() if m["kind"] == "param"}
        copies = {"tensors": {k: torch.zeros_like(dst.tensors[k]) for k in params},
                  "chunks": {k: {**m, "fqn": "optimizer.state.param." + m["fqn"]} for k, m in params.items()}}
        shardstate.dcp_load(copies, [str(tmp_path / "export")])
        dst.load_shards([str(tmp_path / "export")])
        assert params and all(torch.equal(copies["tensors"][k], dst.tensors[k]) for k in params)
        from torch.distributed.checkpoint.api import CheckpointException  # a BaseException

        with pytest.raises(CheckpointException, match="optimizer.state.param"):
            shardstate.dcp_load(copies, [str(tmp_path / "p2p")])
