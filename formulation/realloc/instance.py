"""The reallocation instance: plain numbers only (no snapshot, no scenario, no estimator).

* **pools** ``P``: capacity units, one per node (or one per GPU type for the single-pool case),
  each with a GPU type, a cluster (network fabric) and ``gpus`` GPUs.
* **stages** ``S``: the pipeline's components. Each has, per GPU type ``t``, a concave
  piecewise-linear throughput curve ``f_{s,t}(g)`` in pipeline units per second (the instance
  compiler has already divided by the stage's work per pipeline unit, so all stages share one
  unit), and a list of **candidates** ``C_s``: allocations ``g_{s,c,p}`` (GPUs on pool ``p``)
  with the migration that reaches them from the current allocation (seconds, bytes, and its cost
  ``m_{s,c}`` in pipeline units per second). Candidate 0 is always the current allocation
  (``m = 0``).
* the stage's throughput under candidate ``c`` is ``Σ_t f_{s,t}(Σ_{p: type(p) = t} g_{s,c,p})``
  (engines of different types add their rates; synchronous stages get single-type candidates).
* ``margin``: a new allocation is committed only when its objective beats the current pipeline
  throughput by this relative margin (strictly).

Validation here is structural (indices, non-negative numbers, concave curves); feasibility of a
chosen combination is :mod:`formulation.realloc.check`'s job.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np


@dataclass(frozen=True)
class Curve:
    """Concave, non-decreasing PWL ``f(g)`` through ``(gpus[i], throughput[i])`` with ``f(0) = 0``.

    Beyond the last breakpoint the curve is flat, or continues with its last slope when
    ``extrapolate`` (linear, "static" components).
    """

    gpus: tuple[float, ...]
    throughput: tuple[float, ...]
    extrapolate: bool = False

    def __post_init__(self) -> None:
        if len(self.gpus) == 0 or len(self.gpus) != len(self.throughput):
            raise ValueError("a curve needs as many throughput values as GPU breakpoints (at least one)")
        if any(b <= a for a, b in zip((0.0,) + tuple(self.gpus), self.gpus)):
            raise ValueError(f"curve breakpoints must be positive and increasing, got {list(self.gpus)}")
        if any(v < 0 for v in self.throughput):
            raise ValueError("curve throughput values must be non-negative")

    @classmethod
    def linear(cls, per_gpu: float, up_to_gpus: float = 1.0) -> "Curve":
        return cls((float(up_to_gpus),), (float(per_gpu) * up_to_gpus,), extrapolate=True)

    def __call__(self, g: float) -> float:
        xs = (0.0,) + tuple(self.gpus)
        ys = (0.0,) + tuple(self.throughput)
        if g > xs[-1]:
            if self.extrapolate:
                slope = (ys[-1] - ys[-2]) / (xs[-1] - xs[-2])
                return float(ys[-1] + slope * (g - xs[-1]))
            return float(ys[-1])
        return float(np.interp(g, xs, ys))

    def segments(self) -> list[tuple[float, float]]:
        """(slope, intercept) lines with ``f(g) = min_k slope_k g + intercept_k`` for all ``g >= 0``.

        Includes the flat cap beyond the last breakpoint unless the curve extrapolates.
        """
        xs = (0.0,) + tuple(self.gpus)
        ys = (0.0,) + tuple(self.throughput)
        out = []
        for i in range(len(xs) - 1):
            s = (ys[i + 1] - ys[i]) / (xs[i + 1] - xs[i])
            out.append((s, ys[i] - s * xs[i]))
        if not self.extrapolate:
            out.append((0.0, ys[-1]))
        return out

    def is_concave(self, rel_tol: float = 1e-9) -> bool:
        s = [a for a, _ in self.segments()]
        scale = max(1.0, max(abs(v) for v in s))
        return all(s[i + 1] <= s[i] + rel_tol * scale for i in range(len(s) - 1)) and all(v >= -rel_tol * scale for v in s)


@dataclass(frozen=True)
class Pool:
    name: str
    gpu_type: str
    gpus: int
    cluster: str = "default"


@dataclass(frozen=True)
class Move:
    """One migration step of a stage: GPUs leaving or joining one pool."""

    kind: str  # "workload" | "p2p" | "reboot"
    pool: str
    gpus_from: int
    gpus_to: int
    duration_s: float
    bytes_moved: float
    cause: str


@dataclass(frozen=True)
class Candidate:
    name: str
    gpus: dict  # pool name -> GPUs (only pools with > 0)
    migration_s: float = 0.0
    migration_bytes: float = 0.0
    migration_cost: float = 0.0  # pipeline units per second subtracted from the objective
    migration_kind: str = "none"  # "none" | "workload" | "p2p" | "reboot"
    moves: tuple = ()  # Move, in execution order
    cause: str = ""

    @property
    def total_gpus(self) -> int:
        return int(sum(self.gpus.values()))


@dataclass
class Stage:
    name: str
    kind: str
    dynamic: bool
    interruptible: bool
    curves: dict  # gpu type -> Curve
    candidates: list  # Candidate; [0] is the current allocation
    unit_gpus: int = 1  # allocation granularity on a pool (an engine's TP, a trainer replica's TP x PP)
    single_type: bool = False  # synchronous stage: every GPU of one type
    donor: bool = False
    pipeline: bool = True  # counts in the bottleneck (False: its work this iteration is done; it only holds GPUs)
    curve_source: str = ""

    @property
    def current(self) -> Candidate:
        return self.candidates[0]


@dataclass
class ReallocInstance:
    pools: list  # Pool
    stages: list  # Stage
    margin: float = 0.05
    horizon_s: float = 60.0  # time left in the iteration, over which migration cost is spread
    job: str = ""
    time_s: float = 0.0
    notes: list = field(default_factory=list)
    unit: str = "tokens/s"  # throughput unit of the curves (see ReallocContext.unit)
    validated: bool = field(default=True, repr=False)  # False only for instances derived from a validated one

    def __post_init__(self) -> None:
        self._pool_index = {p.name: p for p in self.pools}
        self._table = None
        if self.validated:
            self.validate()

    # --------------------------------------------------------------------------- structure
    def validate(self) -> None:
        names = [p.name for p in self.pools]
        if len(set(names)) != len(names):
            raise ValueError("pool names must be unique")
        known = set(names)
        pool_type = {p.name: p.gpu_type for p in self.pools}
        if not any(s.pipeline for s in self.stages):
            raise ValueError("an instance needs at least one pipeline stage (a component with work left)")
        for s in self.stages:
            if not s.candidates:
                raise ValueError(f"stage {s.name} has no candidate (candidate 0 must be its current allocation)")
            if s.current.migration_cost != 0 or s.current.moves:
                raise ValueError(f"stage {s.name}: candidate 0 is the current allocation and must carry no migration")
            for c in s.candidates:
                bad = [p for p in c.gpus if p not in known]
                if bad:
                    raise ValueError(f"stage {s.name} candidate {c.name} uses unknown pool(s) {bad}")
                if any(v < 0 for v in c.gpus.values()) or c.migration_cost < 0:
                    raise ValueError(f"stage {s.name} candidate {c.name}: negative GPUs or migration cost")
                types = {pool_type[p] for p, v in c.gpus.items() if v > 0}
                missing = types - set(s.curves)
                if missing:
                    raise ValueError(f"stage {s.name} candidate {c.name} uses GPU type(s) {sorted(missing)} without a throughput curve")
            for t, cv in s.curves.items():
                if not cv.is_concave():
                    raise ValueError(f"stage {s.name}: curve for {t} is not concave and non-decreasing")
        if self.margin < 0:
            raise ValueError("margin must be >= 0")

    def pool(self, name: str) -> Pool:
        return self._pool_index[name]

    def gpu_types(self) -> list[str]:
        return sorted({p.gpu_type for p in self.pools})

    # ------------------------------------------------------------------------ evaluation
    def gpus_by_type(self, cand: Candidate) -> dict[str, int]:
        out: dict[str, int] = {}
        for p, v in cand.gpus.items():
            if v > 0:
                t = self.pool(p).gpu_type
                out[t] = out.get(t, 0) + int(v)
        return out

    def stage_throughput(self, s: int, c: int) -> float:
        st = self.stages[s]
        return sum(st.curves[t](g) for t, g in self.gpus_by_type(st.candidates[c]).items())

    def throughput_table(self) -> list[list[float]]:
        """Predicted throughput of every stage under every candidate (computed once; treat as read-only)."""
        if self._table is None:
            self._table = [[self.stage_throughput(s, c) for c in range(len(st.candidates))] for s, st in enumerate(self.stages)]
        return self._table

    def pipeline_stages(self) -> list[int]:
        return [s for s, st in enumerate(self.stages) if st.pipeline]

    def pipeline_throughput(self, choice: list[int]) -> float:
        """Minimum over the pipeline stages of their predicted throughput."""
        return min(self.stage_throughput(s, choice[s]) for s in self.pipeline_stages())

    def objective(self, choice: list[int]) -> float:
        """Predicted pipeline throughput of a choice (one candidate index per stage) minus migration cost."""
        thr = self.pipeline_throughput(choice)
        return thr - sum(self.stages[s].candidates[c].migration_cost for s, c in enumerate(choice))

    def current_throughput(self) -> float:
        return self.objective([0] * len(self.stages))

    def is_single_pool(self) -> bool:
        return len(self.pools) == 1

    def size(self) -> dict:
        return {"pools": len(self.pools), "stages": len(self.stages), "candidates": sum(len(s.candidates) for s in self.stages),
                "gpus": sum(p.gpus for p in self.pools), "gpu_types": len(self.gpu_types())}


@dataclass
class Solution:
    """One candidate index per stage, as a backend returns it."""

    choice: list
    objective: Optional[float] = None
    best_bound: Optional[float] = None
