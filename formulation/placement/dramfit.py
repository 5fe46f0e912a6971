"""Host DRAM a job needs on every node it may use, against what the nodes have: the one rule.

A job parks its rollout weights on each rollout node (``dram_rollout_node_gb``) and spreads its
training state over its training pool (``train_state_gb / nodes`` per node). When no allowed
rollout type has the DRAM, or no training pool the fleet can form has it per node, no plan places
the job, whatever the other jobs do. :func:`formulation.placement.explain.explain` reports that as
an unplaced job's reason (``dram``); ``planner validate`` reports it before anything is solved
(:func:`planner.schema.checks.placeable_problems`). Plain numbers in, so that both can ask without
building an instance or any phase time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping, Optional


@dataclass(frozen=True)
class DramShort:
    """The closest the job comes to fitting, on the side that does not fit."""

    side: str  # "rollout" (per rollout node) or "training" (the training state per node of a pool)
    need_gb: float  # host DRAM per node the job needs there
    have_gb: float  # host DRAM per node of that type
    gpu_type: str
    nodes: int = 0  # training: the pool size of the closest fit (the state is spread over it)
    state_gb: float = 0.0  # training: the whole training state


def dram_short(dram_rollout_node_gb: float, train_state_gb: float, rollout_types: Iterable[str],
               train_sizes: Mapping[str, Iterable[int]], dram_gb: Mapping[str, float],
               count: Mapping[str, int]) -> Optional[DramShort]:
    """``rollout_types``: the types the job's rollout fits (its model and KV cache); ``train_sizes``:
    by type, the training pool sizes its state fits on; ``dram_gb`` and ``count``: host DRAM per node
    and nodes of each type in the fleet. ``None`` when some rollout type and some training pool the
    fleet can form both have the DRAM (or when there is no such type or pool at all: that is another
    reason, not this one)."""
    r_types = [t for t in rollout_types if t in dram_gb]
    if r_types and all(dram_rollout_node_gb > dram_gb[t] for t in r_types):
        t = max(r_types, key=lambda t: dram_gb[t])
        return DramShort("rollout", dram_rollout_node_gb, dram_gb[t], t)
    t_opts = [(t, n) for t, sizes in train_sizes.items() if t in dram_gb for n in sizes if n <= count.get(t, 0)]
    if t_opts and all(train_state_gb / n > dram_gb[t] for t, n in t_opts):
        t, n = min(t_opts, key=lambda tn: train_state_gb / tn[1] - dram_gb[tn[0]])
        return DramShort("training", train_state_gb / n, dram_gb[t], t, n, train_state_gb)
    return None
