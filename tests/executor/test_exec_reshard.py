"""The reshard plan and the trainer state it moves: tiling, bit-identical reassembly, checksums."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from executor.migrations import reshard
from executor.state import Layout
from executor.workers.model import STATE_KINDS, ModelSpec, check_layout, full_init, owned_params, param_specs, shard_slice
from executor.workers.trainer import TrainerRank, average_over_dp, train_in_process

SPEC = ModelSpec(hidden=16, ffn=32, layers=4, vocab=32, seed=1)
layouts = st.builds(Layout, st.sampled_from([1, 2, 4]), st.sampled_from([1, 2, 4]), st.sampled_from([1, 2, 3]))


def _coord(*a):
    return True if a[0] != "lease" else 1


def _ranks(layout: Layout, init="fresh"):
    return [TrainerRank(f"w{r}", 1, "c", vars(layout), r, vars(SPEC), _coord, init=init) for r in range(layout.world)]


def _assemble(ranks, layout):
    """Full tensors from shards, every DP replica checked to agree (an independent oracle)."""
    out = {}
    for t in ranks:
        for p in owned_params(SPEC, layout, t.rank):
            for k in STATE_KINDS:
                f = out.setdefault((p.name, k), torch.full(p.shape, float("nan")))
                region = f[shard_slice(p, layout, t.rank)]
                mine = t.shards[p.name][k]
                if not torch.isnan(region).all():
                    assert torch.equal(region, mine), f"DP replicas disagree on {p.name}.{k}"
                f[shard_slice(p, layout, t.rank)] = mine
    return out


@settings(max_examples=25, deadline=None)
@given(old=layouts, new=layouts)
def test_plan_tiles_every_new_shard_and_moves_state_bit_identically(old, new):
    if check_layout(SPEC, old) or check_layout(SPEC, new):
        return
    pieces = reshard.plan(SPEC, old, new)
    assert reshard.coverage_problems(SPEC, new, pieces) == []
    olds = _ranks(old)
    # one training step fills every state kind that moves (param changed, exp_avg and exp_avg_sq non-zero); a
    # second one (as before) added nothing the comparison sees and was a third of each example's time
    train_in_process(olds, range(1))
    for t in olds:  # a half-accumulated gradient buffer moves too
        t.compute_grads(1)
    average_over_dp(olds)
    news = _ranks(new, init="empty")
    sums = reshard.apply_local(pieces, {t.rank: t.shards for t in olds}, {t.rank: t.shards for t in news})
    assert all(a == b for a, b in sums.values())
    before, after = _assemble(olds, old), _assemble(news, new)
    assert before.keys() == after.keys()
    for k in before:
        assert not torch.isnan(after[k]).any(), f"{k} not covered"
        assert torch.equal(before[k], after[k]), k


def test_every_parameter_exists_once_with_its_init():
    lay = Layout(2, 2, 1)
    full = _assemble(_ranks(lay), lay)
    for p in param_specs(SPEC):
        assert torch.equal(full[(p.name, "param")], full_init(SPEC, p))
        assert torch.count_nonzero(full[(p.name, "exp_avg")]) == 0


def test_checksum_catches_a_flipped_bit():
    old, new = Layout(2, 1, 1), Layout(1, 1, 2)
    pieces = reshard.plan(SPEC, old, new)
    olds, news = _ranks(old), _ranks(new, init="empty")
    (s, d), pcs = next(iter(reshard.pairs(pieces).items()))
    buf = reshard.pack(olds[s].shards, pcs)
    sent = reshard.checksum(buf)
    bad = buf.clone()
    bad.view(torch.int32)[3] ^= 1  # one bit
    reshard.unpack(bad, news[d].shards, pcs)
    assert reshard.checksum(reshard.repack_dst(news[d].shards, pcs)) != sent
    reshard.unpack(buf, news[d].shards, pcs)
    assert reshard.checksum(reshard.repack_dst(news[d].shards, pcs)) == sent


def test_replicated_tensors_come_from_one_source_and_dp_sources_spread():
    pieces = reshard.plan(SPEC, Layout(2, 1, 2), Layout(1, 1, 4))
    norm = [p for p in pieces if p.name == "norm"]
    assert len(norm) == 4 and all(p.src_lo == 0 and p.src_hi == SPEC.hidden for p in norm)
    srcs = {Layout(2, 1, 2).coords(p.src)[1] for p in pieces}
    assert srcs == {0, 1}  # both old DP replicas serve copies


def test_adam_update_matches_torch_optim_adam_bit_for_bit():
    from executor.workers.trainer import adam_update

    g = torch.Generator().manual_seed(0)
    p_ref = torch.randn(64, 8, generator=g).requires_grad_(True)
    p = p_ref.detach().clone()
    m, v = torch.zeros_like(p), torch.zeros_like(p)
    opt = torch.optim.Adam([p_ref], lr=1e-3, foreach=False)
    for step in range(1, 6):
        grad = torch.randn(64, 8, generator=g)
        p_ref.grad = grad.clone()
        opt.step()
        adam_update(p, grad, m, v, step, 1e-3, (0.9, 0.999), 1e-8)
        assert torch.equal(p, p_ref.detach()), step
        assert torch.equal(m, opt.state[p_ref]["exp_avg"]) and torch.equal(v, opt.state[p_ref]["exp_avg_sq"])


def test_a_pickled_rank_comes_back_bit_identical_and_trains_on_identically():
    """The sim backend's saves pickle ranks (raw bytes per tensor): every shard, the step, the
    autograd leaf sharing its storage with the parameter Adam updates, and the next steps."""
    import pickle

    layout = Layout(2, 1, 2)
    olds = _ranks(layout)
    train_in_process(olds, range(2))
    for t in olds:  # a half-accumulated gradient buffer round-trips too
        t.compute_grads(2)
    news = [pickle.loads(pickle.dumps(t)) for t in olds]
    for a, b in zip(olds, news):
        b._coord = _coord
        assert (b.rank, b.step_no, b.layout, b.loaded) == (a.rank, a.step_no, a.layout, a.loaded)
        assert a.shards.keys() == b.shards.keys() and a.params.keys() == b.params.keys()
        for n, s in a.shards.items():
            for k, x in s.items():
                y = b.shards[n][k]
                assert y.dtype == x.dtype and y.shape == x.shape and torch.equal(x, y), (n, k)
                assert not y.requires_grad
            p = b.params[n]
            assert p.requires_grad and p.is_leaf and p.grad is None
            assert p.data_ptr() == b.shards[n]["param"].data_ptr()  # one tensor, as a fresh rank has it
    for ranks in (olds, news):
        average_over_dp(ranks)
        for t in ranks:
            assert t.apply_step(2)
        train_in_process(ranks, range(3, 5))
    assert [t.digest() for t in olds] == [t.digest() for t in news]


def test_a_trainer_saved_by_the_sim_backend_trains_on_as_if_never_saved(tmp_path):
    from executor.backends.base import observe
    from executor.backends.sim import SimBackend
    from executor.controller import Executor
    from executor.diff import diff
    from executor.journal import Journal
    from executor.state import Node
    from executor.target import ExecutorTarget, to_state

    nodes = [Node("n", "H100", 4, 512.0)]
    target = to_state(ExecutorTarget.model_validate({"nodes": [vars(n) for n in nodes], "components": [
        {"name": "j/trainer", "role": "trainer", "gpu_type": "H100", "layout": {"tp": 2, "dp": 2}, "placement": {"n": 4},
         "model": {"hidden": 8, "ffn": 8, "layers": 2, "vocab": 16}}]}))

    def start(b):
        assert Executor(b, Journal(":memory:")).apply(diff(observe(b), target).steps, "t").status == "done"

    def digests(b):
        return [b.call(w.id, "digest") for w in sorted(observe(b).components["j/trainer"].live_workers(), key=lambda w: w.index)]

    ref = SimBackend(nodes)
    start(ref)
    saved = SimBackend(nodes, state_path=tmp_path / "world")
    start(saved)
    for step in range(2):
        assert all(ref.train_step("j/trainer", step)) and all(saved.train_step("j/trainer", step))
    saved.close()
    loaded = SimBackend([], state_path=tmp_path / "world")
    assert digests(loaded) == digests(ref)
    for step in range(2, 4):
        assert all(ref.train_step("j/trainer", step)) and all(loaded.train_step("j/trainer", step))
    assert digests(loaded) == digests(ref)
    loaded.close()
