"""The executor's own input: a target cluster state (plan kind ``ExecutorTarget``).

Any planner's output is turned into this (see :mod:`executor.adapters.plans`), and a person can
write one by hand::

    kind: ExecutorTarget
    version: 1
    solver: {backend: manual, status: feasible}
    body:
      nodes:                                   # the cluster (optional when the backend reports it)
        - {name: h100-0, gpu_type: H100, gpus: 8, dram_gb: 2048}
      components:
        - name: job-a/rollout                  # <job>/<component>
          role: rollout                        # rollout | trainer | service
          gpu_type: H100
          gpus_per_worker: 1                   # rollout: the engine's TP size; trainer: 1 per rank
          dram_gb_per_worker: 40               # host DRAM each worker pins (resident weights)
          placement: {h100-0: 4}               # workers per node
          migration: workload                  # how it moves when it changes (default by role)
        - name: job-a/trainer
          role: trainer
          layout: {tp: 2, pp: 1, dp: 2}
          placement: {h100-0: 4}
          migration: p2p
          model: {hidden: 64, ffn: 256, layers: 4, vocab: 512}

Co-execution groups: a component with ``reserves: G`` holds GPUs of its nodes for group ``G``;
a component with ``group: G`` runs inside those reservations, its GPUs time-shared with the
group's other members (:mod:`executor.capacity`).
"""

from __future__ import annotations

from collections import Counter
from typing import Annotated, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, model_validator

from estimators.fields import Int, Real
from executor.state import MAX_STANDIN_PARAMS, ClusterState, Component, Layout, Node

KIND = "ExecutorTarget"


# Bounds that keep any target that validates cheap to diff and to run on the sim backend.
MAX_NODES = 16384
MAX_COMPONENTS = 4096
MAX_WORKERS_PER_NODE = 1024
MAX_WORKERS = 65536           # all components together
# the stand-in trainer model's parameters (its state is held in memory): executor.state.MAX_STANDIN_PARAMS


class _S(BaseModel):
    """Unknown keys are errors, numbers are finite and a boolean is not a number."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class NodeIn(_S):
    name: str = Field(min_length=1, max_length=200)
    gpu_type: str = Field(min_length=1, max_length=200)
    gpus: Int = Field(ge=0, le=64)
    dram_gb: Real = Field(gt=0, le=1e6)
    alive: bool = True


class LayoutIn(_S):
    tp: Int = Field(1, ge=1, le=1024)
    pp: Int = Field(1, ge=1, le=1024)
    dp: Int = Field(1, ge=1, le=MAX_WORKERS)


class ModelIn(_S):
    hidden: Int = Field(64, ge=1, le=1 << 14)
    ffn: Int = Field(256, ge=1, le=1 << 16)
    layers: Int = Field(4, ge=1, le=4096)
    vocab: Int = Field(512, ge=1, le=1 << 20)
    seed: Int = Field(0, ge=0, le=2**32 - 1)
    # the megatron trainer's attention (executor.workers.megatron_trainer); None: its defaults
    heads: Optional[Int] = Field(None, ge=1, le=1024)
    kv_heads: Optional[Int] = Field(None, ge=1, le=1024)
    head_dim: Optional[Int] = Field(None, ge=1, le=4096)
    qkv_bias: Optional[bool] = None
    tie: Optional[bool] = None

    @model_validator(mode="after")
    def _size(self):
        params = self.layers * (4 * self.hidden**2 + 2 * self.hidden * self.ffn) + 2 * self.vocab * self.hidden
        if params > MAX_STANDIN_PARAMS:
            raise ValueError(f"the stand-in model has {params:,} parameters, more than {MAX_STANDIN_PARAMS:,}")
        return self


class LaunchIn(_S):
    """An SGLang server the ``sglang`` worker starts (executor.workers.sglang_worker). The command
    is not part of a target: ``python -m sglang.launch_server``, or ``$RL_PLANNER_SGLANG_CMD``
    (a JSON list) on the worker's machine."""

    model_path: str = Field(min_length=1, max_length=4096)
    gpu_ids: Optional[list[Annotated[str, Field(max_length=16)]]] = Field(None, max_length=64)
    tp: Optional[Int] = Field(None, ge=1, le=64)
    host: Optional[str] = Field(None, max_length=255)
    port: Optional[Int] = Field(None, ge=1, le=65535)
    args: Optional[list[Annotated[str, Field(max_length=4096)]]] = Field(None, max_length=256)
    deterministic: Optional[bool] = None
    startup_timeout_s: Optional[Real] = Field(None, gt=0, le=86400)
    log_dir: Optional[str] = Field(None, max_length=4096)


class EngineIn(_S):
    max_batch: Int = Field(64, ge=1, le=1 << 16)
    cache_blocks: Int = Field(4096, ge=1, le=1 << 24)
    progress_every: Int = Field(8, ge=1, le=1 << 20)
    tokens_per_tick: Int = Field(1, ge=1, le=1 << 20)
    # the sglang worker's settings (docs/integration.md); None: not used / its defaults
    url: Optional[str] = Field(None, max_length=2048)
    launch: Optional[LaunchIn] = None
    router_url: Optional[str] = Field(None, max_length=2048)
    colocated: Optional[bool] = None
    weight_sync_backend: Optional[Literal["nccl", "gloo"]] = None
    drain_grace_s: Optional[Real] = Field(None, ge=0, le=3600)
    abort_confirm_s: Optional[Real] = Field(None, gt=0, le=3600)
    timeout_s: Optional[Real] = Field(None, gt=0, le=3600)
    generate_timeout_s: Optional[Real] = Field(None, gt=0, le=86400)
    return_logprob: Optional[bool] = None
    weight_names: Optional[Literal["as_trained", "hf"]] = None


class ComponentIn(_S):
    name: str = Field(min_length=1, max_length=401, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$",
                      description="<job>/<component> (each at most 200 characters)")
    role: Literal["rollout", "trainer", "service"]
    gpu_type: str = Field("", max_length=200)
    gpus_per_worker: Int = Field(1, ge=0, le=64)
    dram_gb_per_worker: Real = Field(0.0, ge=0, le=1e6)
    layout: Optional[LayoutIn] = None
    placement: dict[Annotated[str, Field(min_length=1, max_length=200)], Annotated[Int, Field(le=MAX_WORKERS_PER_NODE)]] = Field(
        min_length=1, max_length=MAX_NODES, description="node -> workers")
    migration: Optional[Literal["workload", "p2p", "reboot"]] = None
    model: Optional[ModelIn] = None
    engine: Optional[EngineIn] = None
    group: str = Field("", max_length=200, description="co-execution group this component is a member of: on nodes the group reserves, "
                                       "its workers run inside the reservation (members take turns on its GPUs)")
    reserves: str = Field("", max_length=200, description="this component is the group's reservation of its nodes' GPUs")
    keep: Optional[list[Annotated[str, Field(max_length=200)]]] = Field(None, max_length=MAX_NODES * MAX_WORKERS_PER_NODE,
                                                                         description="engines: the running workers to keep (the rest are released)")
    impl: str = Field("", max_length=200, description="worker implementation (executor.workers.registry: toy, tinylm, or one a framework "
                                      "registers); '' = toy")

    @model_validator(mode="after")
    def _shape(self):
        job, comp = self.name.split("/", 1)
        if len(job) > 200 or len(comp) > 200:
            raise ValueError("a job's and a component's name are at most 200 characters each")
        if self.impl:
            from executor.workers import registry

            if self.impl not in registry.names():
                raise ValueError(f"impl {self.impl!r} is not a registered worker implementation (registered: "
                                 f"{', '.join(registry.names())}); register it (executor.workers.registry) or pick one of those")
        if any(v < 0 for v in self.placement.values()):
            raise ValueError("placement counts must be >= 0")
        if self.role == "trainer":
            lay = self.layout or LayoutIn()
            if sum(self.placement.values()) != lay.tp * lay.pp * lay.dp:
                raise ValueError(f"placement puts {sum(self.placement.values())} ranks, layout tp*pp*dp = {lay.tp * lay.pp * lay.dp}")
        elif self.layout is not None:
            raise ValueError("layout is for trainers only")
        return self


class ExecutorTarget(_S):
    nodes: list[NodeIn] = Field(default_factory=list, max_length=MAX_NODES)
    # empty: nothing runs (applying it stops every component; with nodes, it makes an idle cluster)
    components: list[ComponentIn] = Field(default_factory=list, max_length=MAX_COMPONENTS)

    @model_validator(mode="after")
    def _unique(self):
        for what, names in (("node", [n.name for n in self.nodes]), ("component", [c.name for c in self.components])):
            dup = sorted(n for n, k in Counter(names).items() if k > 1)
            if dup:
                raise ValueError(f"duplicate {what} name(s): {', '.join(dup)}")
        workers = sum(sum(c.placement.values()) for c in self.components)
        if workers > MAX_WORKERS:
            raise ValueError(f"the components place {workers:,} workers, more than {MAX_WORKERS:,}")
        return self


def to_state(body: ExecutorTarget) -> ClusterState:
    st = ClusterState(nodes={n.name: Node(n.name, n.gpu_type, n.gpus, n.dram_gb, n.alive) for n in body.nodes})
    for c in body.components:
        lay = c.layout or LayoutIn()
        st.components[c.name] = Component(
            name=c.name, job=c.name.split("/")[0], role=c.role, gpu_type=c.gpu_type,
            layout=Layout(lay.tp, lay.pp, lay.dp), gpus_per_worker=c.gpus_per_worker, dram_gb_per_worker=c.dram_gb_per_worker,
            migration=c.migration or "", placement=dict(c.placement),
            model=c.model.model_dump(exclude_none=True) if c.model else ({} if c.role != "trainer" else ModelIn().model_dump(
                exclude_none=True)),
            engine=c.engine.model_dump(exclude_none=True) if c.engine else {}, group=c.group, reserves=c.reserves, keep=list(c.keep or []),
            impl=c.impl)
    return st


def from_state(st: ClusterState) -> dict:
    """A target body that reproduces ``st`` (what ``planner status --as-target`` writes)."""
    comps = []
    for c in sorted(st.components.values(), key=lambda c: c.name):
        d = {"name": c.name, "role": c.role, "gpu_type": c.gpu_type, "gpus_per_worker": c.gpus_per_worker,
             "dram_gb_per_worker": c.dram_gb_per_worker, "placement": c.placement_counts(), "migration": c.migration}
        if c.role == "trainer":
            d["layout"] = vars(c.layout) | {}
            d["model"] = dict(c.model) or None
        if c.engine:
            d["engine"] = dict(c.engine)
        if c.group:
            d["group"] = c.group
        if c.reserves:
            d["reserves"] = c.reserves
        if c.impl:
            d["impl"] = c.impl
        comps.append({k: v for k, v in d.items() if v is not None})
    nodes = [{"name": n.name, "gpu_type": n.gpu_type, "gpus": n.gpus, "dram_gb": n.dram_gb}
             for n in sorted(st.nodes.values(), key=lambda n: n.name)]
    return ExecutorTarget.model_validate({"nodes": nodes, "components": comps}).model_dump(mode="json", exclude_none=True)
