"""Scenario → estimator inputs: resolved GPU types, models, job profiles, per-job estimates."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from estimators import gpus as gpu_catalogue
from estimators import hfconfig
from estimators.gpus import GPUSpec
from estimators.lengths import LengthDistribution
from estimators.models import ModelDims
from estimators.phases import JobProfile, PoolShape, fits_rollout, fits_training, host_dram_gb
from planner.schema.scenario import FixedLengths, JobSpec, LognormalLengths, NodeGroupSpec, Scenario, ServegenLengths
from simulator.phasetimes import QUANTILES, rollout_s, sync_s, train_s  # the one phase-time model (the simulator's)


def resolve_gpu_types(scenario: Scenario) -> dict[str, GPUSpec]:
    """Catalogue entries for every type the scenario names, with its overrides applied.

    Assumes :mod:`planner.schema.checks` accepted the names.
    """
    out: dict[str, GPUSpec] = {}
    names = set(scenario.gpu_types) | {g.gpu_type for g in scenario.cluster.node_groups}
    for name in sorted(names):
        spec = scenario.gpu_types.get(name)
        base = (spec.base if spec and spec.base else name)
        canon = gpu_catalogue.canonical_name(base)
        if canon is None:
            from planner.errors import Problem, UserError

            raise UserError(Problem(f"gpu_types.{name}.base" if spec and spec.base else f"gpu_types.{name}", f"unknown GPU type '{base}'",
                                    "use a GPU type of the catalogue, or define it under gpu_types with a catalogue type as 'base:'"))
        over = spec.model_dump(exclude={"base", "max_nodes"}, exclude_none=True) if spec else {}
        g = gpu_catalogue.get(canon, over)
        from dataclasses import replace

        out[name] = replace(g, name=name)
    return out


def resolve_model(job: JobSpec) -> ModelDims:
    if isinstance(job.model, str):
        return hfconfig.resolve(job.model)
    m = job.model
    return ModelDims(
        name=m.name, hidden_size=m.hidden_size, num_layers=m.num_layers, num_heads=m.num_heads,
        num_kv_heads=m.num_kv_heads, intermediate_size=m.intermediate_size, vocab_size=m.vocab_size,
        head_dim=m.head_dim or 0, tie_embeddings=m.tie_embeddings, qkv_bias=m.qkv_bias,
    )


def length_distribution(job: JobSpec) -> LengthDistribution:
    rl = job.rollout.response_lengths
    if isinstance(rl, ServegenLengths):
        return LengthDistribution("servegen", client=rl.client, scale=rl.scale)
    if isinstance(rl, LognormalLengths):
        return LengthDistribution("lognormal", median_tokens=rl.median_tokens, sigma=rl.sigma)
    if isinstance(rl, FixedLengths):
        return LengthDistribution("fixed", median_tokens=float(rl.tokens))
    from planner.schema.workload import table_of

    return LengthDistribution("table", table=table_of(rl))  # the user's trace column or quantile table


def _user_table(spec, latency: bool = False):
    """The inverse-CDF grid of a user's trace column or quantile table; None for anything else. ``latency``: a
    tool latency table, refused past MAX_TOOL_LATENCY_S (:func:`planner.schema.workload.tool_latency_table`)."""
    from planner.schema.workload import QuantileTable, TraceColumn, table_of, tool_latency_table

    if not isinstance(spec, (TraceColumn, QuantileTable)):
        return None
    return tool_latency_table(spec) if latency else table_of(spec)


def job_profile(job: JobSpec, seed: int = 0) -> JobProfile:
    r, t = job.rollout, job.trainer
    tools = r.tools
    return JobProfile(
        name=job.name,
        model=resolve_model(job),
        batch_prompts=r.batch_prompts,
        group_size=r.group_size,
        prompt_tokens=r.prompt_tokens,
        max_response_tokens=r.max_response_tokens,
        lengths=length_distribution(job),
        turns=r.turns,
        tool_latency_fixed_s=(tools.fixed_latency_s if tools and tools.latency == "fixed" else None),
        tool_latency_table=_user_table(tools.latency if tools else None, latency=True),
        prompt_table=_user_table(r.prompt_lengths),
        observation_tokens=(tools.observation_tokens if tools else 0),
        rollout_tp=r.tp,
        trainer_tp=t.tp,
        trainer_pp=t.pp,
        trainer_dp=t.dp,
        train_mfu=t.mfu,
        has_critic="critic" in (job.components or []),
        has_reference="reference" in (job.components or []),
        weight_sync=job.weight_sync,
        seed=seed,
    )


@dataclass
class ClusterView:
    """Node groups by GPU type, and the link figures the estimators need."""

    scenario: Scenario
    gpu_types: dict[str, GPUSpec]

    @cached_property
    def groups_by_type(self) -> dict[str, list[NodeGroupSpec]]:
        out: dict[str, list[NodeGroupSpec]] = {}
        for g in self.scenario.cluster.node_groups:
            out.setdefault(g.gpu_type, []).append(g)
        return out

    def nodes_of(self, gpu_type: str) -> int:
        return sum(g.count for g in self.groups_by_type.get(gpu_type, []))

    def gpus_per_node(self, gpu_type: str) -> int:
        groups = self.groups_by_type.get(gpu_type, [])
        return groups[0].gpus_per_node if groups else 8

    def dram_gb(self, gpu_type: str) -> float:
        groups = self.groups_by_type.get(gpu_type, [])
        return min(g.host_dram_gb for g in groups) if groups else 0.0

    def cluster_of(self, gpu_type: str) -> str:
        groups = self.groups_by_type.get(gpu_type, [])
        return groups[0].cluster if groups else "default"

    def inter_cluster_bw(self, type_a: str, type_b: str) -> float | None:
        ca, cb = self.cluster_of(type_a), self.cluster_of(type_b)
        if ca == cb:
            return None
        bws = [c.inter_cluster_bw_gb_per_s for c in self.scenario.cluster.clusters
               if c.name in (ca, cb) and c.inter_cluster_bw_gb_per_s is not None]
        return min(bws) if bws else None

    def types(self) -> list[str]:
        return sorted(self.groups_by_type)

    def node_names(self, gpu_type: str) -> list[str]:
        """Node names of a type, deterministic: ``<node group>-<i>`` for each node group in order."""
        return [f"{g.name}-{i}" for g in self.groups_by_type.get(gpu_type, []) for i in range(g.count)]

    def pool(self, gpu_type: str, nodes: int) -> PoolShape:
        return PoolShape(self.gpu_types[gpu_type], nodes, self.gpus_per_node(gpu_type))


@dataclass
class JobEstimate:
    """What the estimators say about one job in this cluster (seconds, GB)."""

    name: str
    profile: JobProfile
    rollout_nodes: int
    train_nodes: int
    rollout_s: dict[str, float]  # by rollout GPU type, at the job's own rollout nodes
    train_s: dict[str, float]  # by training GPU type, at the job's own training nodes
    sync_s: dict[tuple[str, str], float]  # by (rollout type, training type)
    dram_rollout_node_gb: float
    dram_train_node_gb: float
    rollout_types: list[str]  # allowed and the model fits
    train_types: list[str]
    best: tuple[str, str] | None = None
    solo_iteration_s: float = float("inf")
    slo_s: float = float("inf")
    notes: list[str] = field(default_factory=list)


def estimate_job(job: JobSpec, view: ClusterView, mode: str = "conservative", seed: int = 0,
                 phase_times: bool = True, stop=None) -> JobEstimate:
    """``phase_times=False``: only what fits where (types, host DRAM); the phase times, solo time
    and SLO stay empty/infinite (they run the request-level model, seconds for a large batch).
    ``stop``: asked before each simulated iteration (:class:`simulator.phasetimes.PastDeadline` when true)."""
    prof = job_profile(job, seed)
    r_nodes, t_nodes = job.rollout.nodes, job.trainer.nodes
    allowed_r = job.rollout.gpu_types or view.types()
    allowed_t = job.trainer.gpu_types or view.types()
    rollout_types = [t for t in allowed_r if t in view.gpu_types and t in view.groups_by_type and fits_rollout(prof, view.gpu_types[t])]
    train_types = [t for t in allowed_t if t in view.gpu_types and t in view.groups_by_type and fits_training(prof, view.pool(t, t_nodes))]
    if not phase_times:
        d_r, d_t = host_dram_gb(prof, t_nodes)
        return JobEstimate(job.name, prof, r_nodes, t_nodes, {}, {}, {}, d_r, d_t, rollout_types, train_types)
    r_s = {t: rollout_s(prof, view.pool(t, r_nodes), mode, stop=stop) for t in rollout_types}
    t_s = {t: train_s(prof, view.pool(t, t_nodes), mode, stop=stop) for t in train_types}
    s_s = {(a, b): sync_s(prof, view.pool(a, r_nodes), view.pool(b, t_nodes), view.inter_cluster_bw(a, b))
           for a in rollout_types for b in train_types}
    d_r, d_t = host_dram_gb(prof, t_nodes)
    est = JobEstimate(job.name, prof, r_nodes, t_nodes, r_s, t_s, s_s, d_r, d_t, rollout_types, train_types)
    best = None
    for (a, b), s in s_s.items():
        total = r_s[a] + t_s[b] + s
        if best is None or total < best[0]:
            best = (total, a, b)
    if best:
        est.solo_iteration_s, est.best = best[0], (best[1], best[2])
        est.slo_s = job.slo.target_s(best[0])
        if mode in QUANTILES and job.slo.iteration_s is None:
            # a quantile plans with headroom on the same SLO: ratio x the expected (mean) solo iteration
            a, b = best[1], best[2]
            solo_mean = (rollout_s(prof, view.pool(a, r_nodes), "sampled", stop=stop)
                         + train_s(prof, view.pool(b, t_nodes), "sampled", stop=stop) + s_s[(a, b)])
            est.slo_s = job.slo.target_s(solo_mean)
    return est
