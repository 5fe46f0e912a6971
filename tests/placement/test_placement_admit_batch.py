"""The admission's vectorised reading of a current plan is the per-group one.

``Index.phases_at`` / ``Index.feasible_groups`` and ``Packer.add_groups`` (with ``per_pair``: no
configurations x jobs matrices) are what ``planner admit`` uses against thousands of groups; they
must give the same numbers, bit for bit, and the same moves as ``Index.feasible`` and
``Packer.add_group`` on the index's matrices.
"""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.placement.generate import generate_distinct
from formulation.placement.evaluate import Group, Index, segment_sums
from formulation.placement.fast import first_fit
from formulation.placement.greedy import Packer
from tests.placement.placement_helpers import small_instance

ARRAYS = ("gid", "rpos", "sum_a", "max_tot", "sum_bs", "max_a", "max_bs", "min_slo", "sum_w", "sum_s")


def _instances():
    yield generate_distinct(300, 1)
    yield small_instance(3, 14, capacity=(6, 6), both_types=True, switches=True)
    yield small_instance(4, 14, capacity=(6, 6), both_types=True, rollout_heavy=3.0)


def _groups(idx: Index, rng: np.random.Generator, n: int) -> tuple[list[int], list[tuple[int, ...]]]:
    ks, groups = [], []
    for t in range(n):
        k = int(rng.integers(0, len(idx.configs)))
        cand = np.flatnonzero(idx.ok[k]) if t % 3 else np.arange(idx.n)
        size = int(rng.choice([0, 1, 2, 3, 7, 8, 9, 17, 40, 130]))
        if len(cand):
            ks.append(k)
            groups.append(tuple(int(j) for j in rng.choice(cand, min(size, len(cand)), replace=False)))
    return ks, groups


def test_segment_sums_are_each_segments_own_sum():
    rng = np.random.default_rng(0)
    lens = rng.choice([1, 2, 3, 7, 8, 9, 16, 17, 129, 300], 200)
    starts = np.concatenate(([0], np.cumsum(lens)[:-1]))
    x = rng.random((3, int(lens.sum()))) * 1000
    got = segment_sums(x, starts, lens)
    want = np.array([[x[r, s:s + n].sum() for s, n in zip(starts, lens)] for r in range(3)])
    assert np.array_equal(got, want)


@pytest.mark.parametrize("which", range(3))
def test_phases_and_feasibility_per_pair_match_the_matrices(which):
    inst = list(_instances())[which]
    lazy, full = Index(inst), Index(inst)
    rng = np.random.default_rng(which)
    k = rng.integers(0, len(full.configs), 5000)
    j = rng.integers(0, full.n, 5000)
    got = lazy.phases_at(k, j)
    assert "a" not in lazy.__dict__  # computed for the pairs alone
    want = (full.a[k, j], full.bs[k, j], full.tot[k, j])
    for g, w in zip(got, want):
        assert np.array_equal(g, w) and np.array_equal(np.signbit(g), np.signbit(w))
    ks, groups = _groups(full, rng, 600)
    feas = lazy.feasible_groups(ks, groups)
    assert "a" not in lazy.__dict__
    assert list(feas) == [bool(g) and full.feasible(k_, g) for k_, g in zip(ks, groups)]
    assert feas.any() and not feas.all()


@pytest.mark.parametrize("which", range(3))
def test_add_groups_is_add_group_and_admits_the_same(which):
    inst = list(_instances())[which]
    idx = Index(inst)
    sol = first_fit(idx)[0]
    # a plan without a few jobs (the arriving ones), plus an empty group
    out = set(range(0, idx.n, 7))
    groups = [Group(g.config, tuple(m for m in g.members if m not in out), f"g{i}") for i, g in enumerate(sol.groups)]
    groups = [g for g in groups if g.members] + [Group(groups[0].config, (), "empty")]
    seq = Packer(idx)
    for g in groups:
        seq.add_group(g.config, list(g.members), g.anchor)
    batch = Packer(idx)
    batch.add_groups(groups)
    lazy_idx = Index(inst)
    lazy = Packer(lazy_idx, per_pair=True)
    lazy.add_groups(groups)
    assert "a" not in lazy_idx.__dict__
    for p in (batch, lazy):
        assert p.free == seq.free and p.groups == seq.groups and p.slots == seq.slots and p.job_group == seq.job_group
        for f, (fs, fp) in enumerate(zip(seq.families, p.families)):
            assert fs.size == fp.size
            for name in ARRAYS:
                assert np.array_equal(getattr(fs, name)[:fs.size], getattr(fp, name)[:fs.size]), (f, name)
            if p is batch:
                assert np.array_equal(fs.open[:fs.size], fp.open[:fs.size])
            else:  # no closing test: at least the rows the quickest job could join stay open
                assert not (fs.open[:fs.size] & ~fp.open[:fs.size]).any()
    # the same moves, one job after another, in all three
    for j in sorted(out)[:12]:
        moves = [p.best_move(j) for p in (seq, batch, lazy)]
        assert moves[0] == moves[1] == moves[2], j
        for p, m in zip((seq, batch, lazy), moves):
            p.apply(m)
    assert "a" not in lazy_idx.__dict__
