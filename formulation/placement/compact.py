"""The data both compact models share: slots, big-M constants, the warm start in slot form.

Slots: one *representative* slot per placeable job ``g`` (it may hold only jobs ``j >= g`` and
exists iff job ``g`` is in it: every group is named by its smallest member, which removes the
symmetry between slots), plus one *anchor* slot per group of the current plan (it keeps that
group's nodes: its former members stay put, any other placed job that ends up anywhere but its own
anchor slot counts as moved). An anchor slot may use its group's configuration or a larger rollout
pool of the same types (Weave's extend move).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from formulation.placement.evaluate import Group, Index, Solution


@dataclass
class Slots:
    jobs: list[int]  # placeable jobs (at least one configuration alone)
    slots: list[tuple[str, object]]  # ("rep", job) or ("anchor", group id)
    configs: dict[int, list[int]]  # slot -> allowed configurations
    members: dict[int, list[int]]  # slot -> jobs allowed in it
    home: dict[int, int]  # placed job -> its anchor slot
    anchor_of: dict[int, str]
    penalty: float

    def warm_values(self, idx: Index, warm: Solution):
        """(x[(j, s)], z[(s, k)]) of a solution, or None when it does not fit the slots."""
        x, z = {}, {}
        used_anchor = {}
        for g in warm.groups:
            if g.anchor is not None:
                s = next((i for i, (kind, a) in enumerate(self.slots) if kind == "anchor" and a == g.anchor), None)
                if s is None:
                    return None
                used_anchor[s] = True
            else:
                rep = min(g.members)
                s = next((i for i, (kind, a) in enumerate(self.slots) if kind == "rep" and a == rep), None)
                if s is None:
                    return None
            if g.config not in self.configs[s]:
                return None
            z[(s, g.config)] = 1
            for j in g.members:
                if j not in self.members[s]:
                    return None
                x[(j, s)] = 1
        return x, z


def make_slots(idx: Index, cur=None, symmetry_breaking: bool = True) -> Slots:
    """Slots; ``symmetry_breaking=False`` (for the benchmark's comparison) lets any job use any
    slot and drops the representative rule, so the slots are interchangeable."""
    jobs = [j for j in range(idx.n) if len(idx.job_configs[j])]
    slots: list[tuple[str, object]] = []
    configs: dict[int, list[int]] = {}
    members: dict[int, list[int]] = {}
    home: dict[int, int] = {}
    anchor_of: dict[int, str] = {}
    for g in jobs:
        s = len(slots)
        slots.append(("rep", g) if symmetry_breaking else ("free", g))
        configs[s] = [int(k) for k in idx.job_configs[g]] if symmetry_breaking else list(range(len(idx.configs)))
        members[s] = [j for j in jobs if j >= g] if symmetry_breaking else list(jobs)
    if cur is not None:
        for grp in cur.groups:
            s = len(slots)
            slots.append(("anchor", grp.anchor))
            anchor_of[s] = grp.anchor
            c0 = idx.configs[grp.config]
            configs[s] = [k for k, c in enumerate(idx.configs) if (c.rollout_type, c.train_type, c.train_nodes) ==
                          (c0.rollout_type, c0.train_type, c0.train_nodes) and c.rollout_nodes >= c0.rollout_nodes]
            members[s] = list(jobs)
            for j in grp.members:
                home[j] = s
    penalty = idx.penalty
    return Slots(jobs, slots, configs, members, home, anchor_of, penalty)


def decode(idx: Index, sl: Slots, x_on, z_on) -> Solution:
    """Groups from the slots' 0/1 values (``x_on(j, s)``, ``z_on(s, k)``)."""
    groups = []
    placed: set[int] = set()
    for s in range(len(sl.slots)):
        ks = [k for k in sl.configs[s] if z_on(s, k)]
        mem = tuple(sorted(j for j in sl.members[s] if x_on(j, s)))
        if not ks or not mem:
            continue
        placed.update(mem)
        groups.append(Group(ks[0], mem, sl.anchor_of.get(s)))
    return Solution(groups, [j for j in range(idx.n) if j not in placed])


# seconds of CPU a variable (x_js or z_sk) takes to build, the low end measured on distinct jobs
# (20-80 jobs: Pyomo 107-282 us, CP-SAT 50-167 us): a model whose estimate does not fit the time
# left is not started (at 2,000 jobs the Pyomo build alone would take minutes and gigabytes)
BUILD_S_PER_VAR = {"highs": 1e-4, "cpsat": 4e-5}


def model_size(idx: Index, cur=None) -> int:
    """The number of x and z variables :func:`make_slots` leads to, without building the slots."""
    m = sum(1 for j in range(idx.n) if len(idx.job_configs[j]))
    size = m * (m + 1) // 2 + sum(len(idx.job_configs[j]) for j in range(idx.n))
    if cur is not None:
        size += len(cur.groups) * (m + len(idx.configs))
    return size


def too_big(idx: Index, cur, backend: str, seconds: float) -> str:
    """Why the compact model of ``backend`` cannot be built in ``seconds`` ("" when it may)."""
    size = model_size(idx, cur)
    need = size * BUILD_S_PER_VAR[backend]
    if need <= seconds:
        return ""
    return (f"the compact model has {size:,} variables (about {need:.1f} s to build, {max(0.0, seconds):.1f} s left): "
            "not built")


class BuildTimeout(Exception):
    """Building the compact model ran past the deadline (the model is too large for the limit)."""


def deadline_guard(deadline: float):
    """A callable that raises :class:`BuildTimeout` once the deadline has passed (cheap: checks the
    clock every 256 calls); the model builders call it per constraint."""
    import time

    count = [0]

    def check() -> None:
        count[0] += 1
        if count[0] & 255 == 0 and time.perf_counter() > deadline:
            raise BuildTimeout()

    return check


def big_m(idx: Index) -> dict[str, Any]:
    """Per-configuration-and-job ring weights (0 where the job may not use the configuration) and
    ``slo_max`` (a float)."""
    ok = idx.ok
    a = np.where(ok, idx.a, 0.0)
    bs = np.where(ok, idx.bs, 0.0)
    tot = np.where(ok, idx.tot, 0.0)
    return {"a": a, "bs": bs, "tot": tot, "slo_max": float(idx.slo.max()) if idx.n else 0.0}
