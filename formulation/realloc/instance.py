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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Callable, Optional

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

    @cached_property
    def _points(self) -> tuple[np.ndarray, np.ndarray]:
        return np.array((0.0,) + tuple(self.gpus)), np.array((0.0,) + tuple(self.throughput))

    def values(self, g: np.ndarray) -> np.ndarray:
        """``f`` at every element of ``g`` (the same arithmetic as :meth:`__call__`, element by element)."""
        xs, ys = self._points
        g = np.asarray(g, dtype=float)
        out = np.interp(g, xs, ys)
        if self.extrapolate:
            beyond = g > xs[-1]
            if beyond.any():
                slope = (ys[-1] - ys[-2]) / (xs[-1] - xs[-2])
                out[beyond] = ys[-1] + slope * (g[beyond] - xs[-1])
        return out

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


class LazyMoves(Sequence):
    """A candidate's migration steps, planned on first use.

    The objective needs only a candidate's duration (its cost); the steps themselves are read for
    the chosen candidates (checker, plan body), so the candidate generator plans them lazily. Reads
    like the tuple it stands for (and compares equal to it).
    """

    __slots__ = ("_plan", "_moves")

    def __init__(self, plan: Callable[[], tuple]) -> None:
        self._plan: Optional[Callable[[], tuple]] = plan
        self._moves: Optional[tuple] = None

    def _get(self) -> tuple:
        if self._moves is None:
            plan = self._plan
            assert plan is not None  # dropped only once the moves are planned
            self._moves = tuple(plan())
            self._plan = None
        return self._moves

    def __getitem__(self, i):
        return self._get()[i]

    def __len__(self) -> int:
        return len(self._get())

    def __iter__(self):
        return iter(self._get())

    def __eq__(self, other) -> bool:
        return self._get() == (other._get() if isinstance(other, LazyMoves) else other)

    __hash__ = None  # type: ignore[assignment]  # unhashable like a list: it compares equal to tuples by value

    def __repr__(self) -> str:
        return repr(self._get()) if self._moves is not None else "LazyMoves(<not planned yet>)"


class LazyAlloc(Mapping):
    """A candidate's GPUs per pool, read from its row of the stage's array on first use.

    The solvers read the arrays; the dict is built for the candidates someone looks at (the
    chosen ones, the plan body). Reads like the dict it stands for (and compares equal to it).
    """

    __slots__ = ("_row", "_names", "_dict")

    def __init__(self, row: np.ndarray, names: list) -> None:
        self._row: Optional[np.ndarray] = row
        self._names = names
        self._dict: Optional[dict] = None

    def _get(self) -> dict:
        if self._dict is None:
            row = self._row
            assert row is not None  # dropped only once the dict is built
            vals = row.tolist()
            self._dict = {self._names[i]: vals[i] for i in np.flatnonzero(row).tolist()}
            self._row = None
        return self._dict

    def __getitem__(self, key):
        return self._get()[key]

    def __iter__(self):
        return iter(self._get())

    def __len__(self) -> int:
        return len(self._get())

    def __contains__(self, key) -> bool:
        return key in self._get()

    def get(self, key, default=None):
        return self._get().get(key, default)

    def keys(self):
        return self._get().keys()

    def items(self):
        return self._get().items()

    def values(self):
        return self._get().values()

    def __repr__(self) -> str:
        return repr(self._get())


@dataclass(frozen=True)
class Candidate:
    name: str
    gpus: Mapping  # pool name -> GPUs (only pools with > 0): a dict, or a LazyAlloc read from the instance's arrays
    migration_s: float = 0.0
    migration_bytes: float = 0.0
    migration_cost: float = 0.0  # pipeline units per second subtracted from the objective
    migration_kind: str = "none"  # "none" | "workload" | "p2p" | "reboot"
    moves: Sequence = ()  # Move, in execution order (a tuple, or LazyMoves that plans them on first use)
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
    finished: bool = False  # no stage has work left: every stage keeps its current allocation, nothing to decide
    validated: bool = field(default=True, repr=False)  # False only for instances derived from a validated one

    def __post_init__(self) -> None:
        self._pool_index = {p.name: p for p in self.pools}
        self._table: Optional[list] = None
        self._thr: Optional[list] = None
        self._arrays: Optional[Arrays] = None
        if self.validated:
            self.validate()

    # --------------------------------------------------------------------------- structure
    def validate(self) -> None:
        names = [p.name for p in self.pools]
        if len(set(names)) != len(names):
            raise ValueError("pool names must be unique")
        known = set(names)
        if self.finished:
            if any(s.pipeline or len(s.candidates) != 1 for s in self.stages):
                raise ValueError("a finished instance has no pipeline stage and only the current allocations")
        elif not any(s.pipeline for s in self.stages):
            raise ValueError("an instance needs at least one pipeline stage (a component with work left)")
        for s in self.stages:
            if not s.candidates:
                raise ValueError(f"stage {s.name} has no candidate (candidate 0 must be its current allocation)")
            if s.current.migration_cost != 0 or s.current.moves:
                raise ValueError(f"stage {s.name}: candidate 0 is the current allocation and must carry no migration")
            for c in s.candidates:
                if not isinstance(c.gpus, LazyAlloc) and c.gpus.keys() - known:  # a LazyAlloc is a row over the pools
                    bad = [p for p in c.gpus if p not in known]
                    raise ValueError(f"stage {s.name} candidate {c.name} uses unknown pool(s) {bad}")
        arr = self.arrays()
        for i, s in enumerate(self.stages):
            neg = (arr.gpus[i] < 0).any(axis=1) | (arr.cost[i] < 0)
            if neg.any():
                raise ValueError(f"stage {s.name} candidate {s.candidates[int(np.argmax(neg))].name}: negative GPUs or migration cost")
            no_curve = [k for k, t in enumerate(arr.types) if t not in s.curves]
            if no_curve:
                uses = arr.by_type(i)[:, no_curve] > 0
                if uses.any():
                    c = int(np.argmax(uses.any(axis=1)))
                    missing = sorted(arr.types[k] for k, u in zip(no_curve, uses[c]) if u)
                    raise ValueError(f"stage {s.name} candidate {s.candidates[c].name} uses GPU type(s) {missing} without a throughput curve")
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
        """Sum over GPU types, in type order, of the type's curve at the candidate's GPUs of that type."""
        st = self.stages[s]
        return sum(st.curves[t](g) for t, g in sorted(self.gpus_by_type(st.candidates[c]).items()))

    def arrays(self) -> "Arrays":
        """The instance's dense numbers (computed once from the candidates unless the generator gave them)."""
        if self._arrays is None:
            col = {p.name: i for i, p in enumerate(self.pools)}
            gpus = []
            for st in self.stages:
                g = np.zeros((len(st.candidates), len(self.pools)), dtype=np.int64)
                for c, cand in enumerate(st.candidates):
                    for p, v in cand.gpus.items():
                        if v:
                            g[c, col[p]] = v
                gpus.append(g)
            self._arrays = Arrays.of(self, gpus)
        return self._arrays

    def throughput_table(self) -> list[list[float]]:
        """Predicted throughput of every stage under every candidate (computed once; treat as read-only).

        Vectorised over the candidates with the same arithmetic as :meth:`stage_throughput`
        (``Curve.values``, types added in type order), so the two agree to the last bit."""
        if self._table is None:
            self._table = [row.tolist() for row in self.throughput_arrays()]
        return self._table

    def throughput_arrays(self) -> list[np.ndarray]:
        """:meth:`throughput_table` as one array per stage."""
        if self._thr is None:
            if self._table is not None:
                self._thr = [np.asarray(row, dtype=float) for row in self._table]
            else:
                arr = self.arrays()
                self._thr = []
                for s, st in enumerate(self.stages):
                    by_type = arr.by_type(s)
                    thr = np.zeros(len(st.candidates))
                    for t in sorted(st.curves):
                        if t in arr.type_index:
                            thr += st.curves[t].values(by_type[:, arr.type_index[t]])
                    self._thr.append(thr)
        return self._thr

    def pipeline_stages(self) -> list[int]:
        return [s for s, st in enumerate(self.stages) if st.pipeline]

    def pipeline_throughput(self, choice: list[int]) -> float:
        """Minimum over the pipeline stages of their predicted throughput (read from the table once
        it is computed: the same numbers as :meth:`stage_throughput`)."""
        if self._table is not None:
            return min(self._table[s][choice[s]] for s in self.pipeline_stages())
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
class Arrays:
    """An instance's numbers as dense arrays, for the vectorised code (table, reduction, search).

    ``gpus[s]``: GPUs of every candidate of stage ``s`` on every pool (candidates x pools, columns in
    ``inst.pools`` order); ``cost[s]``: migration costs; ``cap``: GPUs per pool; ``types``: the GPU
    types in order, ``pool_type``: each pool's index in ``types``.
    """

    gpus: list
    cost: list
    cap: np.ndarray
    types: list
    pool_type: np.ndarray

    @property
    def type_index(self) -> dict:
        return {t: i for i, t in enumerate(self.types)}

    @classmethod
    def of(cls, inst: "ReallocInstance", gpus: list) -> "Arrays":
        types = sorted({p.gpu_type for p in inst.pools})
        ti = {t: i for i, t in enumerate(types)}
        return cls(gpus, [np.array([c.migration_cost for c in st.candidates], dtype=float) for st in inst.stages],
                   np.array([p.gpus for p in inst.pools], dtype=np.int64), types,
                   np.array([ti[p.gpu_type] for p in inst.pools], dtype=np.int64))

    def by_type(self, s: int) -> np.ndarray:
        """GPUs of every candidate of stage ``s`` per GPU type (candidates x types; computed once, read-only)."""
        cache = self.__dict__.setdefault("_by_type", {})
        if s not in cache:
            onehot = (self.pool_type[:, None] == np.arange(len(self.types))[None, :]).astype(np.int64)
            cache[s] = self.gpus[s] @ onehot
        return cache[s]

    def users(self) -> list[tuple[int, list[tuple[int, int, int]]]]:
        """Per pool with any user, in pool order: (pool index, [(stage, candidate, GPUs), ...] in
        stage-then-candidate order) — who could put GPUs on it."""
        parts = [np.nonzero(g) for g in self.gpus]
        if not parts:
            return []
        stage = np.concatenate([np.full(len(c), s, dtype=np.int64) for s, (c, _) in enumerate(parts)])
        cand = np.concatenate([c for c, _ in parts])
        pool = np.concatenate([p for _, p in parts])
        gpus = np.concatenate([g[c, p] for g, (c, p) in zip(self.gpus, parts)])
        order = np.argsort(pool, kind="stable")  # stable: stage-then-candidate order within a pool
        pool, stage, cand, gpus = pool[order].tolist(), stage[order].tolist(), cand[order].tolist(), gpus[order].tolist()
        out: list[tuple[int, list]] = []
        for p, s, c, g in zip(pool, stage, cand, gpus):
            if not out or out[-1][0] != p:
                out.append((p, []))
            out[-1][1].append((s, c, g))
        return out

    def subset(self, keep: list) -> "Arrays":
        """The arrays of the candidates ``keep[s]`` (indices) of every stage."""
        out = Arrays([g[k] for g, k in zip(self.gpus, keep)], [c[k] for c, k in zip(self.cost, keep)], self.cap, self.types,
                     self.pool_type)
        out.__dict__["_by_type"] = {s: bt[keep[s]] for s, bt in self.__dict__.get("_by_type", {}).items()}
        return out


@dataclass
class Solution:
    """One candidate index per stage, as a backend returns it."""

    choice: list
    objective: Optional[float] = None
    best_bound: Optional[float] = None
