"""The capacity-planning instance: a placement instance whose fleet is to be decided.

Plain numbers, units in the names (no scenario, no estimator). ``placement`` is the
:class:`formulation.placement.instance.PlacementInstance` of the forecast job mix in which
``pool_types[T].count`` is the *availability*: the most nodes of type ``T`` the fleet may have
(those owned today plus the most that can be bought or rented). ``owned[T]`` of them exist today;
the fleet decision is how many more to buy, between 0 and ``count - owned``.

Owned nodes are paid for whether they serve jobs or sit idle: the fleet's hourly cost counts them
at their price (``owned_cost_per_hour``), they are always part of the fleet, and the optimiser
uses them first because using them adds nothing. Only new nodes change the cost.

``colocated`` holds, for the colocated deployment style (rollout and training time-share the same
nodes), each job's phase seconds on ``n`` nodes of one type: ``job -> type -> n -> times``.

A numbers-only file (``kind: CapacityInstance``) looks like::

    kind: CapacityInstance
    name: small-forecast
    budget_per_hour: 400            # optional: most $/h the whole fleet may cost
    owned: {H800: 2}                # nodes that exist today (default 0)
    placement:                      # a placement instance; count = availability
      pool_types:
        H20:  {gpus_per_node: 8, price_per_gpu_hour: 1.0, dram_gb: 2048, count: 16}
        H800: {gpus_per_node: 8, price_per_gpu_hour: 2.0, dram_gb: 2048, count: 16}
      jobs: [...]                   # as in docs/placement.md
    colocated:                      # optional
      qwen7b-math: {H800: {1: {rollout_s: 300.2, train_s: 240.9, sync_s: 0.4}}}
"""

from __future__ import annotations

from typing import Optional

from pydantic import BaseModel, ConfigDict, Field, NonNegativeFloat, PositiveFloat, PositiveInt, model_validator

from formulation.placement.instance import PlacementInstance, PoolType


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ColocatedTimes(_Strict):
    """One iteration of a job whose rollout and training share the same nodes, in seconds."""

    rollout_s: PositiveFloat
    train_s: PositiveFloat
    sync_s: NonNegativeFloat = 0.0

    @property
    def iteration_s(self) -> float:
        return self.rollout_s + self.train_s + self.sync_s


class CapacityInstance(_Strict):
    name: str = "capacity"
    placement: PlacementInstance = Field(description="the forecast; pool_types[T].count = most nodes of T the fleet may have")
    owned: dict[str, int] = Field(default_factory=dict, description="nodes of each type that exist today (default 0)")
    budget_per_hour: Optional[PositiveFloat] = Field(None, description="most $/h the whole fleet may cost, owned nodes included")
    colocated: dict[str, dict[str, dict[PositiveInt, ColocatedTimes]]] = Field(
        default_factory=dict, description="job -> GPU type -> nodes -> phase seconds when rollout and training share the nodes")
    unlimited: list[str] = Field(
        default_factory=list, description="GPU types bought without an availability limit (no max_nodes): their "
        "placement.pool_types[T].count is only a bound on what the forecast could use, not a limit a plan reports")

    @model_validator(mode="after")
    def _refs(self):
        pools = self.placement.pool_types
        for t, n in self.owned.items():
            if t not in pools:
                raise ValueError(f"owned.{t}: GPU type '{t}' is not under placement.pool_types ({', '.join(sorted(pools))})")
            if n < 0:
                raise ValueError(f"owned.{t}: {n} nodes; owned nodes cannot be negative")
            if n > pools[t].count:
                raise ValueError(f"owned.{t}: {n} nodes owned but placement.pool_types.{t}.count (the availability) is "
                                 f"{pools[t].count}; the availability counts the owned nodes too, raise it to at least {n}")
        for t in self.unlimited:
            if t not in pools:
                raise ValueError(f"unlimited: GPU type '{t}' is not under placement.pool_types ({', '.join(sorted(pools))})")
        names = {j.name for j in self.placement.jobs}
        for job, row in self.colocated.items():
            if job not in names:
                raise ValueError(f"colocated.{job}: no such job in placement.jobs")
            for t in row:
                if t not in pools:
                    raise ValueError(f"colocated.{job}.{t}: GPU type '{t}' is not under placement.pool_types")
        return self

    # ------------------------------------------------------------------ numbers
    @property
    def types(self) -> list[str]:
        return sorted(self.placement.pool_types)

    def owned_nodes(self, t: str) -> int:
        return int(self.owned.get(t, 0))

    def limit(self, t: str) -> int:
        """Most nodes of ``t`` the fleet may have (owned + the most that can be bought)."""
        return int(self.placement.pool_types[t].count)

    def reported_limit(self, t: str) -> Optional[int]:
        """The availability limit a plan reports for ``t``: None for a type bought without limit
        (``unlimited``), whose :meth:`limit` is only the compiler's bound on what the forecast could use."""
        return None if t in self.unlimited else self.limit(t)

    def node_price(self, t: str) -> float:
        """$/h of one node of ``t``."""
        p = self.placement.pool_types[t]
        return p.gpus_per_node * p.price_per_gpu_hour

    def owned_cost(self) -> float:
        return sum(self.node_price(t) * self.owned_nodes(t) for t in self.types)

    def fleet_cost(self, fleet: dict[str, int]) -> float:
        """$/h of a fleet (nodes per type; owned nodes are always in it)."""
        return sum(self.node_price(t) * max(int(fleet.get(t, 0)), self.owned_nodes(t)) for t in self.types)

    def fleet_of(self, used: dict[str, int]) -> dict[str, int]:
        """The fleet that serves ``used`` nodes per type: the owned nodes plus what is missing."""
        return {t: max(int(used.get(t, 0)), self.owned_nodes(t)) for t in self.types}

    def with_fleet(self, fleet: dict[str, int]) -> PlacementInstance:
        """The placement instance on a given fleet: ``fleet[T]`` nodes of each type (the first names)."""
        pools = {}
        for t, p in self.placement.pool_types.items():
            n = int(fleet.get(t, 0))
            names = self.placement.node_names(t)
            pools[t] = PoolType(gpus_per_node=p.gpus_per_node, price_per_gpu_hour=p.price_per_gpu_hour, dram_gb=p.dram_gb,
                                count=n, node_names=names[:n] if n <= len(names) else None)
        return self.placement.model_copy(update={"pool_types": pools})

    def with_limits(self, limits: dict[str, int]) -> "CapacityInstance":
        """The same question with other availability limits (names extended as ``<type>-new-<i>``)."""
        pools = {}
        for t, p in self.placement.pool_types.items():
            n = int(limits.get(t, p.count))
            names = self.placement.node_names(t)
            names = names[:n] + [f"{t.lower()}-new-{i}" for i in range(len(names), n)]
            pools[t] = p.model_copy(update={"count": n, "node_names": names})
        owned = {t: min(n, pools[t].count) for t, n in self.owned.items()}
        unlimited = [t for t in self.unlimited if t not in limits]  # (a type given a limit here has one)
        return self.model_copy(update={"placement": self.placement.model_copy(update={"pool_types": pools}), "owned": owned,
                                       "unlimited": unlimited})
