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

from typing import Annotated, Final, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from estimators.fields import Int, Real  # numbers that refuse booleans (true/false), shared

from planner.schema.workload import (  # users' own workloads; the bounds they share with the scenario
    MAX_TOKENS, MAX_TOOL_LATENCY_S, QuantileTable, ToolLatency, TraceColumn, UserDistribution)

SCHEMA_VERSION: Final = 1

# Upper bounds on every size, chosen so that anything that validates is planned, simulated and
# swept within memory and minutes (the hostile-input corpus in tests/hardening checks the edges).
MAX_NAME = 200              # characters of a name
MAX_GPU_TYPES = 64          # GPU types in a scenario
MAX_FABRICS = 64            # network fabrics
MAX_NODE_GROUPS = 256       # node groups
MAX_NODES = 4096            # nodes in one group (and GPU type maximum for capacity planning)
MAX_CLUSTER_NODES = 16384   # nodes in the whole cluster
MAX_GPUS_PER_NODE = 64
MAX_JOBS = 4096             # a fleet (the YAML node cap, 200k, allows about 8,000 plain jobs)
MAX_BATCH_PROMPTS = 65536
MAX_GROUP_SIZE = 1024
MAX_REQUESTS = 1 << 18      # batch_prompts x group_size: requests of one iteration
MAX_TURNS = 256
MAX_REQUEST_TURNS = 1 << 21  # requests x turns of one job
MAX_SAMPLED_REQUEST_TURNS = 1 << 17  # phase_time_estimate 'sampled': requests x turns of all jobs (each is simulated)
MAX_ITERATION_TOKENS = 1 << 33  # requests x max_response_tokens: e.g. 262,144 responses of 32K (more took minutes to estimate)
MAX_PARALLEL = 64           # tp, and GPUs one tensor-parallel group spans
MAX_PP = 256
MAX_DP = 65536
MAX_THREADS = 256
MAX_SECONDS = 1e8           # about 3 years: times, durations, SLOs, arrivals
MAX_TIME_LIMIT_S = 86400.0  # one day of solver time
MAX_PRICE = 1e4             # $ per GPU-hour (and per job moved)
MIN_PRICE = 1e-6            # $ per GPU-hour: a subnormal price (1e-320) overflowed the solver's cost ratios to inf
MAX_BUDGET = 1e9            # $ per hour
MAX_SEED = 2**31 - 1        # solvers take 32-bit seeds




class Strict(BaseModel):
    """Base: unknown keys are errors (catches typos), values are validated on assignment, numbers
    are finite (no NaN or infinity) and a boolean is not a number (``count: true`` is refused)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, populate_by_name=True, allow_inf_nan=False)


# --------------------------------------------------------------------------------------- GPUs
class GPUTypeSpec(Strict):
    """A GPU type: a catalogue entry with overrides, or a new type derived from one (``base``)."""

    base: Optional[str] = Field(None, max_length=MAX_NAME,
                                description="catalogue type this one derives from (for new names); default: the name itself")
    price_per_gpu_hour: Optional[Real] = Field(None, ge=MIN_PRICE, le=MAX_PRICE, description="rental or amortised price, $ per GPU-hour")
    hbm_gb: Optional[Real] = Field(None, ge=1.0, le=1e5, description="GPU memory (HBM) per GPU, GB; default: the catalogue's")
    hbm_bw_tb_per_s: Optional[Real] = Field(None, ge=0.01, le=1e3, description="HBM bandwidth per GPU, TB/s; default: the catalogue's")
    bf16_tflops: Optional[Real] = Field(None, ge=0.1, le=1e6, description="dense BF16 peak per GPU, TFLOP/s; default: the catalogue's")
    nvlink_gb_per_s: Optional[Real] = Field(None, ge=0.1, le=1e6, description="bidirectional NVLink bandwidth per GPU, GB/s")
    inter_node_bw_gb_per_s: Optional[Real] = Field(None, ge=0.01, le=1e6, description="NIC bandwidth per GPU, one direction, GB/s")
    pcie_gb_per_s: Optional[Real] = Field(None, ge=0.01, le=1e6, description="host<->GPU PCIe bandwidth per GPU, GB/s")
    max_nodes: Optional[Int] = Field(None, ge=0, le=MAX_NODES,
                                     description="capacity planning: most nodes of this type that can be bought or rented")


# ------------------------------------------------------------------------------------ cluster
class FabricSpec(Strict):
    """A network fabric (a cluster): nodes in one fabric talk over their NICs."""

    name: str = Field(min_length=1, max_length=MAX_NAME, description="the fabric's name; node groups refer to it")
    inter_cluster_bw_gb_per_s: Optional[Real] = Field(
        None, ge=0.01, le=1e6, description="bandwidth of this cluster's link to the other clusters, GB/s (None: not a bottleneck)")


class NodeGroupSpec(Strict):
    """``count`` identical nodes."""

    name: str = Field(min_length=1, max_length=MAX_NAME, description="the group's name (unique)")
    gpu_type: str = Field(min_length=1, max_length=MAX_NAME, description="a catalogue GPU type or one defined under gpu_types")
    count: Int = Field(ge=0, le=MAX_NODES, description="nodes in the group (for capacity planning: nodes that exist today)")
    gpus_per_node: Int = Field(8, gt=0, le=MAX_GPUS_PER_NODE, description="GPUs in each node")
    host_dram_gb: Real = Field(2048.0, ge=1.0, le=1e6, description="host DRAM per node, GB (parked weights and optimizer state)")
    cluster: str = Field("default", max_length=MAX_NAME, description="the network fabric (cluster.clusters) the nodes sit in")


class ClusterSpec(Strict):
    """The nodes: node groups in one or more network fabrics."""

    clusters: list[FabricSpec] = Field(default_factory=lambda: [FabricSpec(name="default")], min_length=1, max_length=MAX_FABRICS,
                                       description="network fabrics; default: one named 'default'")
    node_groups: list[NodeGroupSpec] = Field(min_length=1, max_length=MAX_NODE_GROUPS, description=(
        "groups of identical nodes; the groups of one GPU type agree on gpus_per_node, host_dram_gb and cluster "
        "(a different node: a GPU type of its own, with base:)"))

    @model_validator(mode="after")
    def _total(self):
        total = sum(g.count for g in self.node_groups)
        if total > MAX_CLUSTER_NODES:
            raise ValueError(f"the node groups hold {total} nodes; at most {MAX_CLUSTER_NODES} are supported")
        return self


# --------------------------------------------------------------------------------------- jobs
class ModelSpec(Strict):
    """Explicit model dimensions (Hugging Face config names)."""

    name: str = Field("custom", max_length=MAX_NAME, description="a label for reports")
    hidden_size: Int = Field(gt=0, le=1 << 16, description="hidden (model) dimension")
    num_layers: Int = Field(gt=0, le=1024, description="transformer layers")
    num_heads: Int = Field(gt=0, le=1024, description="attention (query) heads")
    num_kv_heads: Int = Field(gt=0, le=1024, description="key/value heads (GQA); equal to num_heads for MHA")
    intermediate_size: Int = Field(gt=0, le=1 << 20, description="MLP intermediate dimension")
    vocab_size: Int = Field(gt=0, le=1 << 22, description="vocabulary size")
    head_dim: Optional[Int] = Field(None, gt=0, le=4096, description="per-head dimension; default hidden_size / num_heads")
    tie_embeddings: bool = Field(False, description="input and output embeddings share weights")
    qkv_bias: bool = Field(False, description="the QKV projections have a bias")

    @model_validator(mode="after")
    def _heads(self):
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads ({self.num_heads}) must be a multiple of num_kv_heads ({self.num_kv_heads})")
        if self.head_dim is None and self.hidden_size % self.num_heads:
            raise ValueError(f"hidden_size ({self.hidden_size}) is not divisible by num_heads ({self.num_heads}); set head_dim")
        return self


class ServegenLengths(Strict):
    source: Literal["servegen"] = Field("servegen", description="measured DeepSeek-R1 response lengths (ServeGen)")
    client: Optional[str] = Field(None, max_length=MAX_NAME, description="ServeGen DeepSeek-R1 client id; default: the rate-weighted mixture")
    scale: Real = Field(1.0, ge=1e-3, le=1e3, description="multiplies every length (harder tasks reason longer)")


class LognormalLengths(Strict):
    source: Literal["lognormal"] = Field(description="log-normal response lengths")
    median_tokens: Real = Field(ge=1.0, le=MAX_TOKENS, description="median response length, tokens")
    sigma: Real = Field(1.0, gt=0.0, le=10.0, description="standard deviation of the log of the length")


class FixedLengths(Strict):
    source: Literal["fixed"] = Field(description="every response has the same length")
    tokens: Int = Field(gt=0, le=MAX_TOKENS, description="response length, tokens")


ResponseLengths = Annotated[Union[ServegenLengths, LognormalLengths, FixedLengths, TraceColumn, QuantileTable], Field(discriminator="source")]


def _some_types(v):
    """``gpu_types: []`` allows no type: it was read as every type of the cluster, in silence (an outside audit)."""
    if v is not None and len(v) == 0:
        raise ValueError("an empty list allows no GPU type; leave gpu_types out to allow every type in the cluster, "
                         "or list the allowed types")
    return v


class ToolSpec(Strict):
    """Tools of an agentic job: one call between consecutive turns."""

    latency: ToolLatency = Field(
        "rollpacker", description="measured RollPacker tool latencies, fixed_latency_s, or the user's own (trace column or quantile table)")
    fixed_latency_s: Real = Field(1.0, gt=0.0, le=MAX_TOOL_LATENCY_S, description="seconds per tool call when latency is 'fixed'")
    observation_tokens: Int = Field(256, ge=0, le=MAX_TOKENS, description="tokens the tool result appends to the context")


class RolloutSpec(Strict):
    batch_prompts: Int = Field(gt=0, le=MAX_BATCH_PROMPTS, description="prompts per iteration")
    group_size: Int = Field(1, gt=0, le=MAX_GROUP_SIZE, description="responses sampled per prompt (GRPO group)")
    prompt_tokens: Int = Field(512, gt=0, le=MAX_TOKENS, description="tokens of one prompt")
    max_response_tokens: Int = Field(gt=0, le=MAX_TOKENS, description="longest response, tokens (the generation cap)")
    response_lengths: ResponseLengths = Field(default_factory=ServegenLengths, description="distribution of response lengths")
    prompt_lengths: Optional[Annotated[UserDistribution, Field(discriminator="source")]] = Field(
        None, description="the user's prompt lengths (trace column or quantile table); prompt_tokens defaults to their mean")
    turns: Int = Field(1, gt=0, le=MAX_TURNS, description="generation turns per request (agentic: > 1, with tool calls between)")
    tools: Optional[ToolSpec] = Field(None, description="tool calls between turns; default for turns > 1: ToolSpec()")
    tp: Int = Field(1, gt=0, le=MAX_PARALLEL, description="tensor parallelism of one rollout engine")
    nodes: Int = Field(1, gt=0, le=MAX_NODES, description="rollout nodes the job needs (the group's rollout pool may be larger)")
    gpu_types: Optional[list[Annotated[str, Field(max_length=MAX_NAME)]]] = Field(
        None, max_length=MAX_GPU_TYPES, description="allowed rollout GPU types; default: every type in the cluster")
    _gpu_types = field_validator("gpu_types")(_some_types)

    @model_validator(mode="after")
    def _sizes(self):
        requests = self.batch_prompts * self.group_size
        if requests > MAX_REQUESTS:
            raise ValueError(f"batch_prompts x group_size = {requests} requests per iteration; at most {MAX_REQUESTS} are supported")
        if requests * self.turns > MAX_REQUEST_TURNS:
            raise ValueError(f"batch_prompts x group_size x turns = {requests * self.turns}; at most {MAX_REQUEST_TURNS} are supported")
        if requests * self.max_response_tokens > MAX_ITERATION_TOKENS:
            raise ValueError(f"batch_prompts x group_size x max_response_tokens = {requests * self.max_response_tokens:,} response "
                             f"tokens per iteration; at most {MAX_ITERATION_TOKENS:,} are supported (lower one of them)")
        return self

    @model_validator(mode="after")
    def _agentic(self):
        if self.turns > 1 and self.tools is None:
            self.tools = ToolSpec()
        return self


class TrainerSpec(Strict):
    tp: Int = Field(1, gt=0, le=MAX_PARALLEL, description="tensor parallelism of training (inside a node)")
    pp: Int = Field(1, gt=0, le=MAX_PP, description="pipeline parallelism of training")
    dp: Optional[Int] = Field(None, gt=0, le=MAX_DP, description="data parallelism; default: fill the training nodes")
    nodes: Int = Field(1, gt=0, le=MAX_NODES, description="training nodes the job needs")
    mfu: Real = Field(0.35, ge=0.001, le=1.0, description="model FLOPs utilisation of training")
    gpu_types: Optional[list[Annotated[str, Field(max_length=MAX_NAME)]]] = Field(
        None, max_length=MAX_GPU_TYPES, description="allowed training GPU types; default: every type in the cluster")
    _gpu_types = field_validator("gpu_types")(_some_types)


class SLOSpec(Strict):
    """Exactly one of ``iteration_s`` (seconds per iteration) or ``ratio_to_solo``."""

    iteration_s: Optional[Real] = Field(None, gt=0.0, le=MAX_SECONDS, description="most seconds per training iteration")
    ratio_to_solo: Optional[Real] = Field(None, ge=1.0, le=1e3, description="SLO as a multiple of the job's solo iteration time")

    @model_validator(mode="after")
    def _one(self):
        if (self.iteration_s is None) == (self.ratio_to_solo is None):
            raise ValueError("give exactly one of iteration_s or ratio_to_solo")
        return self

    def target_s(self, solo_s: float) -> float:
        """The SLO in seconds per iteration: ``iteration_s``, else ``ratio_to_solo`` x ``solo_s``."""
        if self.iteration_s is not None:
            return self.iteration_s
        assert self.ratio_to_solo is not None  # the validator above: exactly one of the two is given
        return self.ratio_to_solo * solo_s


Component = Literal["rollout", "reference", "reward", "critic", "tool_agent", "trainer"]
DEFAULT_COMPONENTS = {
    "grpo": ["rollout", "reference", "reward", "trainer"],
    "ppo": ["rollout", "reference", "critic", "reward", "trainer"],
}


class JobSpec(Strict):
    name: str = Field(min_length=1, max_length=MAX_NAME, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$", description="the job's name (unique)")
    model: Union[Annotated[str, Field(max_length=MAX_NAME)], ModelSpec] = Field(
        description="a preset name (e.g. qwen2.5-7b) or explicit dimensions")
    algorithm: Literal["grpo", "ppo"] = Field("grpo", description="RL algorithm (sets the default components)")
    components: Optional[list[Component]] = Field(None, max_length=16, description="the job's components; default: the algorithm's")
    rollout: RolloutSpec = Field(description="generation: batch, lengths, turns and engine parallelism")
    trainer: TrainerSpec = Field(default_factory=TrainerSpec, description="training parallelism and efficiency")
    slo: SLOSpec = Field(default_factory=lambda: SLOSpec(ratio_to_solo=2.0), description="iteration-time SLO; default ratio_to_solo: 2")
    arrival_s: Real = Field(0.0, ge=0.0, le=MAX_SECONDS, description="arrival time in a trace")
    duration_s: Optional[Real] = Field(None, gt=0.0, le=MAX_SECONDS, description="how long the job runs once admitted (traces)")
    weight_sync: Literal["flat", "scatter_broadcast"] = Field("scatter_broadcast", description="how new weights reach the rollout engines")

    @field_validator("components")
    @classmethod
    def _components_given(cls, v):
        """A job always runs a rollout and a trainer (they are planned and applied whatever the list
        says), each component once: ``components: []`` or ``[trainer]`` was accepted and the job
        planned with both (an outside audit)."""
        if v is None:
            return v
        twice = sorted({c for c in v if v.count(c) > 1})
        if twice:
            raise ValueError(f"lists {', '.join(twice)} more than once; name each component once")
        missing = [c for c in ("rollout", "trainer") if c not in v]
        if missing:
            raise ValueError(f"has no {' and no '.join(missing)}: every job runs a rollout and a trainer; add "
                             f"{' and '.join(missing)}, or leave components out for the algorithm's default")
        return v

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
    backend: Literal["auto", "fast", "colgen", "highs", "cpsat", "greedy"] = Field("auto",
        description="placement solver, as planner plan --backend; auto picks by problem size")
    time_limit_s: Real = Field(60.0, gt=0.0, le=MAX_TIME_LIMIT_S, description="solver wall-clock limit, seconds")
    mip_gap: Real = Field(1e-4, ge=0.0, le=1.0, description="relative optimality gap at which the solver stops")
    threads: Int = Field(1, gt=0, le=MAX_THREADS, description="solver threads")
    seed: Int = Field(0, ge=0, le=MAX_SEED, description="solver random seed")
    phase_time_estimate: Literal["conservative", "sampled", "p90", "p99", "max"] = Field(
        "conservative", description="phase times from the maximum response length (conservative = max: Weave's SLO bound), "
                                    "the mean over sampled lengths (sampled), or a quantile of them (p90, p99); ratio SLOs are "
                                    "on the mean for sampled and the quantiles, on the bound for conservative")
    move_price_per_job: Real = Field(0.0, ge=0.0, le=MAX_PRICE, description="$/h charged per job a re-optimisation moves")


class Scenario(Strict):
    version: Literal[1] = Field(SCHEMA_VERSION, description="scenario format version")
    name: str = Field(min_length=1, max_length=MAX_NAME, description="the scenario's name (in plans and reports)")
    description: str = Field("", max_length=100_000, description="free text")
    gpu_types: dict[Annotated[str, Field(min_length=1, max_length=MAX_NAME)], GPUTypeSpec] = Field(
        default_factory=dict, max_length=MAX_GPU_TYPES, description="GPU types by name: catalogue overrides (prices) and derived types")
    cluster: ClusterSpec = Field(description="the nodes and network fabrics")
    jobs: list[JobSpec] = Field(default_factory=list, max_length=MAX_JOBS, description="the RL post-training jobs")
    solver: SolverSpec = Field(default_factory=SolverSpec, description="solver options")
    budget_per_hour: Optional[Real] = Field(None, gt=0.0, le=MAX_BUDGET, description="capacity planning: most $/h the fleet may cost")
    calibration: Optional[str] = Field(None, max_length=4096, description="folder written by 'python -m estimators.calibrate --out' "
                                       "(relative to the scenario file) that the estimators read instead of the shipped tables")

    @model_validator(mode="after")
    def _sampled_work(self):
        if self.solver.phase_time_estimate in ("sampled", "p90", "p99"):
            total = sum(j.rollout.batch_prompts * j.rollout.group_size * j.rollout.turns for j in self.jobs)
            if total > MAX_SAMPLED_REQUEST_TURNS:
                raise ValueError(f"solver.phase_time_estimate '{self.solver.phase_time_estimate}' simulates every request: the jobs' "
                                 f"batch_prompts x group_size x turns add up to {total}, more than {MAX_SAMPLED_REQUEST_TURNS}; "
                                 "use 'conservative' or smaller batches")
        return self
