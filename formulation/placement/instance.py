"""The placement instance: plain numbers with units in field names (no scenario, no estimator).

This is also the documented numbers-only file format users bring (``docs/placement.md``;
example: ``scenarios/instances/placement-small.yaml``)::

    name: my-fleet
    move_price_per_job: 0.5            # $/h charged per job a re-optimisation moves (optional)
    pool_types:
      H20:  {gpus_per_node: 8, price_per_gpu_hour: 1.0, dram_gb: 2048, count: 8}
      H800: {gpus_per_node: 8, price_per_gpu_hour: 2.0, dram_gb: 2048, count: 8}
    jobs:
      - name: qwen7b-math
        slo_s: 926.1                   # most seconds per iteration
        rollout_s: {H20: {1: 220.1, 2: 121.7, 4: 70.3}}   # GPU type -> rollout pool nodes -> s
        train_s: {H800: {1: 242.9, 2: 124.8}}              # GPU type -> training pool nodes -> s
        sync_s: {H20: {H800: 0.08}}                        # rollout type -> training type -> s
        rollout_switch_s: {H20: {1: 1.6, 2: 1.6, 4: 1.6}}  # warm switch per rollout pool (optional, default 0)
        train_switch_s: {H800: {1: 1.9, 2: 1.0}}           # warm switch per training pool (optional, default 0)
        dram_rollout_node_gb: 15.2     # host DRAM on every rollout node of its group
        train_state_gb: 106.6          # host DRAM on the training nodes, spread evenly over them

A job may run in a group whose rollout pool is one of the (type, nodes) keys of its
``rollout_s`` table and whose training pool is one of the keys of ``train_s``. A member runs its
rollout on the nodes it is pinned to: the whole rollout pool, or (``pinned_members_max`` >= 1, the
default 8) rollout nodes of its own, a table key, beside other members on their own nodes; its
training runs on the whole training pool (``evaluate``: pinned configurations).
"""

from __future__ import annotations

from typing import Annotated, Optional

from pydantic import BaseModel, ConfigDict, Field, NonNegativeFloat, PositiveFloat, PositiveInt, model_validator


class _Strict(BaseModel):
    # allow_inf_nan=False: a lax number field would turn the text "inf" into inf; refused here,
    # in the validation itself, with the field's path
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


MAX_PRICE = 1e4  # $ per GPU-hour: far above any real price; 1e308 would overflow the bounds' arithmetic
MIN_PRICE = 1e-6  # $ per GPU-hour: a subnormal price (1e-320) overflows cost ratios (bound / cost) to inf
#: the scenario schema's bounds (``planner.schema.scenario``), for numbers-only instances: 1e308 s or
#: GB overflowed the cycle arithmetic (an SLO of 1e308 was planned and written back as 1e+308)
MAX_SECONDS = 1e8  # about 3 years: SLOs, phase times, arrivals
MAX_GB = 1e9  # host DRAM of a node or a job
MAX_MOVE_PRICE = 1e9  # $/h per moved job (the daemon prices moves up to 1e6 to forbid them)
MAX_NAME = 200  # characters of a job's name
#: nodes in one instance (each gets a name when the instance is read: checked before they are made)
MAX_INSTANCE_NODES = 131072  # 20,000 distinct jobs on a fleet of 1.5 nodes a job of each of four types: 120,000

# strict: a number, not the text of one ('926' was read as 926; true as 1). Table keys and the
# counts stay lax: a JSON instance's node counts are strings ("1"), and callers pass numpy integers
Seconds = Annotated[float, Field(gt=0, le=MAX_SECONDS, strict=True)]
Delay = Annotated[float, Field(ge=0, le=MAX_SECONDS, strict=True)]
Nodes = Annotated[int, Field(gt=0, le=MAX_INSTANCE_NODES)]
#: a GPU type's table by pool nodes: at least one entry (a type with no pool sizes gives no configuration)
PhaseTable = Annotated[dict[Nodes, Seconds], Field(min_length=1)]


class PoolType(_Strict):
    """Nodes of one GPU type that groups may use as a rollout or a training pool."""

    gpus_per_node: PositiveInt = 8
    price_per_gpu_hour: PositiveFloat = Field(ge=MIN_PRICE, le=MAX_PRICE, description="$ per GPU-hour (the scenario schema's 1e-6 to 10,000)")
    dram_gb: PositiveFloat = Field(le=MAX_GB, description="host DRAM per node")
    count: int = Field(ge=0, le=MAX_INSTANCE_NODES, description="nodes of this type available")
    node_names: Optional[list[str]] = Field(None, description="names of the nodes; default <type lowercased>-0 ... -<count-1>")

    @model_validator(mode="after")
    def _names(self):
        if self.node_names is not None:
            if len(self.node_names) != self.count:
                raise ValueError(f"node_names has {len(self.node_names)} names but count is {self.count}; give one name per node")
            if len(set(self.node_names)) != len(self.node_names):
                raise ValueError("node_names must be unique")
        return self


class PlacementJob(_Strict):
    name: str = Field(min_length=1, max_length=MAX_NAME)
    slo_s: Seconds = Field(description="most seconds per iteration (the group's cycle time must not exceed it)")
    rollout_s: dict[str, PhaseTable] = Field(description="rollout seconds by GPU type and rollout pool nodes")
    train_s: dict[str, PhaseTable] = Field(description="training seconds by GPU type and training pool nodes")
    sync_s: dict[str, dict[str, Delay]] = Field(default_factory=dict,
                                                description="weight-sync seconds by rollout type and training type (default 0)")
    rollout_switch_s: dict[str, dict[Nodes, Delay]] = Field(
        default_factory=dict, description="warm-switch seconds of a rollout node by GPU type and rollout pool nodes (default 0)")
    train_switch_s: dict[str, dict[Nodes, Delay]] = Field(
        default_factory=dict, description="warm-switch seconds of a training node by GPU type and training pool nodes (default 0)")
    dram_rollout_node_gb: float = Field(0.0, ge=0.0, le=MAX_GB, strict=True, description="host DRAM the job keeps on each rollout node of its group")
    train_state_gb: float = Field(0.0, ge=0.0, le=MAX_GB, strict=True, description="host DRAM the job keeps on its training pool, spread over its nodes")
    arrival_s: float = Field(0.0, ge=0.0, le=MAX_SECONDS, strict=True, description="arrival time (the order of online admission)")

    def sync(self, rollout_type: str, train_type: str) -> float:
        return self.sync_s.get(rollout_type, {}).get(train_type, 0.0)

    def switches(self, rollout_type: str, rollout_nodes: int, train_type: str, train_nodes: int) -> tuple[float, float]:
        """(rollout, training) warm-switch seconds on these pools (0 where the tables have none)."""
        return (self.rollout_switch_s.get(rollout_type, {}).get(rollout_nodes, 0.0),
                self.train_switch_s.get(train_type, {}).get(train_nodes, 0.0))


class PlacementInstance(_Strict):
    name: str = Field("placement", max_length=MAX_NAME)
    pool_types: dict[Annotated[str, Field(min_length=1, max_length=200)], PoolType] = Field(min_length=1)
    jobs: list[PlacementJob] = Field(default_factory=list)
    move_price_per_job: NonNegativeFloat = Field(0.0, le=MAX_MOVE_PRICE, strict=True, description="$/h charged per job a re-optimisation moves")
    pinned_members_max: int = Field(8, ge=0, le=64, description=(
        "most members of a group that each keep rollout nodes of their own and share the training pool "
        "(0: every member on the whole pools)"))

    @model_validator(mode="after")
    def _refs(self):
        seen: set[str] = set()
        for i, job in enumerate(self.jobs):
            if job.name in seen:
                raise ValueError(f"jobs[{i}]: duplicate job name '{job.name}'; job names must be unique")
            seen.add(job.name)
            for key in ("rollout_s", "train_s", "rollout_switch_s", "train_switch_s"):
                for t in getattr(job, key):
                    if t not in self.pool_types:
                        raise ValueError(f"jobs[{i}] ({job.name}).{key}: GPU type '{t}' is not under pool_types "
                                         f"({', '.join(sorted(self.pool_types))}); add it there or remove it from the job")
            for a, row in job.sync_s.items():
                for b in row:
                    if a not in self.pool_types or b not in self.pool_types:
                        raise ValueError(f"jobs[{i}] ({job.name}).sync_s: '{a}' -> '{b}' names a GPU type that is not under pool_types")
        total = sum(p.count for p in self.pool_types.values())
        if total > MAX_INSTANCE_NODES:  # (before a name is made for every node)
            raise ValueError(f"pool_types: {total} nodes in all; at most {MAX_INSTANCE_NODES} are supported; lower the counts")
        names: set[str] = set()
        for t in self.pool_types:
            for n in self.node_names(t):
                if n in names:
                    raise ValueError(f"pool_types.{t}: node name '{n}' is used twice; node names must be unique across types")
                names.add(n)
        return self

    def node_names(self, gpu_type: str) -> list[str]:
        return pool_node_names(gpu_type, self.pool_types[gpu_type])

    def job_index(self) -> dict[str, int]:
        return {j.name: i for i, j in enumerate(self.jobs)}


def pool_node_names(gpu_type: str, pool: PoolType) -> list[str]:
    """The nodes of a pool type: its ``node_names``, else ``<type>-<i>`` for each of its ``count``."""
    return list(pool.node_names) if pool.node_names is not None else [f"{gpu_type.lower()}-{i}" for i in range(pool.count)]
