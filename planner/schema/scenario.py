"""Scenario: cluster, GPU types, jobs, SLOs and solver options. Units are in field names.

A scenario YAML looks like::

    name: weave-micro
    gpu_types:                      # catalogue entries (H100, H800, H20, H200) with overrides
      H20:  {price_per_gpu_hour: 1.0}
      H800: {price_per_gpu_hour: 2.0}
    cluster:
      clusters:                     # network fabrics; node groups name the one they sit in
        - {name: infer, inter_cluster_bw_gb_per_s: 100}
        - {name: train}
      node_groups:
        - {name: h20, gpu_type: H20, count: 8, gpus_per_node: 8, host_dram_gb: 2048, cluster: infer}
        - {name: h800, gpu_type: H800, count: 8, gpus_per_node: 8, host_dram_gb: 2048, cluster: train}
    jobs:
      - name: qwen7b-a
        model: qwen2.5-7b
        algorithm: grpo
        rollout: {batch_prompts: 64, group_size: 8, max_response_tokens: 8192, tp: 1, nodes: 1}
        trainer: {tp: 2, pp: 1, nodes: 1}
        slo: {ratio_to_solo: 1.5}
"""

from __future__ import annotations

from typing import Annotated, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, PositiveFloat, PositiveInt, model_validator

from planner.schema.workload import QuantileTable, ToolLatency, TraceColumn, UserDistribution  # users' own workloads

SCHEMA_VERSION = 1


class Strict(BaseModel):
    """Base: unknown keys are errors (catches typos), values are validated on assignment."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, populate_by_name=True)


# --------------------------------------------------------------------------------------- GPUs
class GPUTypeSpec(Strict):
    """A GPU type: a catalogue entry with overrides, or a new type derived from one (``base``)."""

    base: Optional[str] = Field(None, description="catalogue type this one derives from (for new names); default: the name itself")
    price_per_gpu_hour: Optional[PositiveFloat] = Field(None, description="rental or amortised price, $ per GPU-hour")
    hbm_gb: Optional[PositiveFloat] = None
    hbm_bw_tb_per_s: Optional[PositiveFloat] = None
    bf16_tflops: Optional[PositiveFloat] = None
    nvlink_gb_per_s: Optional[PositiveFloat] = Field(None, description="bidirectional NVLink bandwidth per GPU")
    inter_node_bw_gb_per_s: Optional[PositiveFloat] = Field(None, description="NIC bandwidth per GPU, one direction")
    pcie_gb_per_s: Optional[PositiveFloat] = None
    max_nodes: Optional[int] = Field(None, ge=0, description="capacity planning: most nodes of this type that can be bought or rented")


# ------------------------------------------------------------------------------------ cluster
class FabricSpec(Strict):
    """A network fabric (a cluster): nodes in one fabric talk over their NICs."""

    name: str = Field(min_length=1)
    inter_cluster_bw_gb_per_s: Optional[PositiveFloat] = Field(
        None, description="bandwidth of this cluster's link to the other clusters (None: not a bottleneck)")


class NodeGroupSpec(Strict):
    """``count`` identical nodes."""

    name: str = Field(min_length=1)
    gpu_type: str
    count: int = Field(ge=0, description="nodes in the group (for capacity planning: nodes that exist today)")
    gpus_per_node: PositiveInt = 8
    host_dram_gb: PositiveFloat = 2048.0
    cluster: str = "default"


class ClusterSpec(Strict):
    clusters: list[FabricSpec] = Field(default_factory=lambda: [FabricSpec(name="default")])
    node_groups: list[NodeGroupSpec] = Field(min_length=1)


# --------------------------------------------------------------------------------------- jobs
class ModelSpec(Strict):
    """Explicit model dimensions (Hugging Face config names)."""

    name: str = "custom"
    hidden_size: PositiveInt
    num_layers: PositiveInt
    num_heads: PositiveInt
    num_kv_heads: PositiveInt
    intermediate_size: PositiveInt
    vocab_size: PositiveInt
    head_dim: Optional[PositiveInt] = None
    tie_embeddings: bool = False
    qkv_bias: bool = False

    @model_validator(mode="after")
    def _heads(self):
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads ({self.num_heads}) must be a multiple of num_kv_heads ({self.num_kv_heads})")
        if self.head_dim is None and self.hidden_size % self.num_heads:
            raise ValueError(f"hidden_size ({self.hidden_size}) is not divisible by num_heads ({self.num_heads}); set head_dim")
        return self


class ServegenLengths(Strict):
    source: Literal["servegen"] = "servegen"
    client: Optional[str] = Field(None, description="ServeGen DeepSeek-R1 client id; default: the rate-weighted mixture")
    scale: PositiveFloat = Field(1.0, description="multiplies every length (harder tasks reason longer)")


class LognormalLengths(Strict):
    source: Literal["lognormal"]
    median_tokens: PositiveFloat
    sigma: PositiveFloat = 1.0


class FixedLengths(Strict):
    source: Literal["fixed"]
    tokens: PositiveInt


ResponseLengths = Annotated[Union[ServegenLengths, LognormalLengths, FixedLengths, TraceColumn, QuantileTable], Field(discriminator="source")]


class ToolSpec(Strict):
    """Tools of an agentic job: one call between consecutive turns."""

    latency: ToolLatency = "rollpacker"
    fixed_latency_s: PositiveFloat = 1.0
    observation_tokens: int = Field(256, ge=0, description="tokens the tool result appends to the context")


class RolloutSpec(Strict):
    batch_prompts: PositiveInt = Field(description="prompts per iteration")
    group_size: PositiveInt = Field(1, description="responses sampled per prompt (GRPO group)")
    prompt_tokens: PositiveInt = 512
    max_response_tokens: PositiveInt
    response_lengths: ResponseLengths = Field(default_factory=ServegenLengths)
    prompt_lengths: Optional[Annotated[UserDistribution, Field(discriminator="source")]] = Field(
        None, description="the user's prompt lengths (trace column or quantile table); prompt_tokens defaults to their mean")
    turns: PositiveInt = Field(1, description="generation turns per request (agentic: > 1, with tool calls between)")
    tools: Optional[ToolSpec] = None
    tp: PositiveInt = Field(1, description="tensor parallelism of one rollout engine")
    nodes: PositiveInt = Field(1, description="rollout nodes the job needs (the group's rollout pool may be larger)")
    gpu_types: Optional[list[str]] = Field(None, description="allowed rollout GPU types; default: every type in the cluster")

    @model_validator(mode="after")
    def _agentic(self):
        if self.turns > 1 and self.tools is None:
            self.tools = ToolSpec()
        return self


class TrainerSpec(Strict):
    tp: PositiveInt = 1
    pp: PositiveInt = 1
    dp: Optional[PositiveInt] = Field(None, description="data parallelism; default: fill the training nodes")
    nodes: PositiveInt = Field(1, description="training nodes the job needs")
    mfu: float = Field(0.35, gt=0.0, le=1.0, description="model FLOPs utilisation of training")
    gpu_types: Optional[list[str]] = Field(None, description="allowed training GPU types; default: every type in the cluster")


class SLOSpec(Strict):
    """Exactly one of ``iteration_s`` (seconds per iteration) or ``ratio_to_solo``."""

    iteration_s: Optional[PositiveFloat] = None
    ratio_to_solo: Optional[float] = Field(None, ge=1.0, description="SLO as a multiple of the job's solo iteration time")

    @model_validator(mode="after")
    def _one(self):
        if (self.iteration_s is None) == (self.ratio_to_solo is None):
            raise ValueError("give exactly one of iteration_s or ratio_to_solo")
        return self


Component = Literal["rollout", "reference", "reward", "critic", "tool_agent", "trainer"]
DEFAULT_COMPONENTS = {
    "grpo": ["rollout", "reference", "reward", "trainer"],
    "ppo": ["rollout", "reference", "critic", "reward", "trainer"],
}


class JobSpec(Strict):
    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    model: Union[str, ModelSpec] = Field(description="a preset name (e.g. qwen2.5-7b) or explicit dimensions")
    algorithm: Literal["grpo", "ppo"] = "grpo"
    components: Optional[list[Component]] = None
    rollout: RolloutSpec
    trainer: TrainerSpec = Field(default_factory=TrainerSpec)
    slo: SLOSpec = Field(default_factory=lambda: SLOSpec(ratio_to_solo=2.0))
    arrival_s: float = Field(0.0, ge=0.0, description="arrival time in a trace")
    duration_s: Optional[PositiveFloat] = Field(None, description="how long the job runs once admitted (traces)")
    weight_sync: Literal["flat", "scatter_broadcast"] = "scatter_broadcast"

    @model_validator(mode="after")
    def _components(self):
        if self.components is None:
            comps = list(DEFAULT_COMPONENTS[self.algorithm])
            if self.rollout.turns > 1:
                comps.insert(1, "tool_agent")
            self.components = comps
        return self


# ------------------------------------------------------------------------------------- solver
class SolverSpec(Strict):
    backend: Literal["auto", "highs", "cpsat"] = "auto"
    time_limit_s: PositiveFloat = 60.0
    mip_gap: float = Field(1e-4, ge=0.0, le=1.0)
    threads: PositiveInt = 1
    seed: int = 0
    phase_time_estimate: Literal["conservative", "sampled"] = Field(
        "conservative", description="rollout time from the maximum response length (Weave's SLO bound) or sampled lengths")
    move_price_per_job: float = Field(0.0, ge=0.0, description="$/h charged per job a re-optimisation moves")


class Scenario(Strict):
    version: Literal[1] = SCHEMA_VERSION
    name: str = Field(min_length=1)
    description: str = ""
    gpu_types: dict[str, GPUTypeSpec] = Field(default_factory=dict)
    cluster: ClusterSpec
    jobs: list[JobSpec] = Field(default_factory=list)
    solver: SolverSpec = Field(default_factory=SolverSpec)
    budget_per_hour: Optional[PositiveFloat] = Field(None, description="capacity planning: most $/h the fleet may cost")
    calibration: Optional[str] = Field(None, description="folder written by 'python -m estimators.calibrate --out' "
                                       "(relative to the scenario file) that the estimators read instead of the shipped tables")
