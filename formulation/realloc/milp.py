"""MILP for the reallocation decision: HiGHS through highspy (the fast path) and through Pyomo (reference).

Sets
    ``S`` stages; ``C_s`` candidates of stage ``s`` (0 = current); ``P`` pools (nodes);
    ``T_s`` GPU types stage ``s`` uses in any candidate; ``K_{s,t}`` segments of curve ``f_{s,t}``.
Parameters
    ``G_{s,c,p}`` GPUs of candidate ``c`` on pool ``p``; ``G_{s,c,t} = Σ_{p∈t} G_{s,c,p}``;
    ``cap_p`` GPUs of pool ``p``; ``m_{s,c}`` migration cost (pipeline units/s);
    ``(a_k, b_k)`` slope and intercept of segment ``k``: ``f_{s,t}(g) = min_k a_k g + b_k``.
Variables
    ``x_{s,c} ∈ {0,1}`` candidate ``c`` chosen for ``s``; ``h_{s,t} ≥ 0`` throughput of ``s`` on type
    ``t``; ``z ≥ 0`` pipeline throughput.
Objective
    ``max z − Σ_{s,c} m_{s,c} x_{s,c}``.
Constraints
    * ``define_choice``:     ``Σ_c x_{s,c} = 1``                                         ∀s
    * ``define_capacity``:   ``Σ_{s,c} G_{s,c,p} x_{s,c} ≤ cap_p``                        ∀p
    * ``define_curves``:     ``h_{s,t} ≤ a_k Σ_c G_{s,c,t} x_{s,c} + b_k``                ∀s,t,k
    * ``define_bottleneck``: ``z ≤ Σ_t h_{s,t}``                              ∀s in the pipeline
Linearisation
    the max-min objective is the epigraph variable ``z``; each concave curve is the minimum of its
    segments' lines, so maximising pushes ``h`` onto the curve with no binaries for the curve
    (``b_1 = 0``: a type with no GPUs gives no throughput). Because ``g`` is fixed by the chosen
    candidate, the optimum is the candidate combination's exact predicted throughput; the LP
    relaxation sees the concave envelope.

No warm start is passed: with HiGHS 1.16, a MIP solved after ``setSolution`` sometimes reported the
better objective while ``getSolution`` still returned the warm start (seen on the benchmark's
128-GPU instances; kept as a regression test), and the current allocation is a trivial incumbent
that HiGHS finds at once. The extracted choice is re-scored and must match the reported objective.
Pyomo's model is the same, built with Pyomo components; its build cost is measured
against highspy's in ``python -m formulation.realloc.bench``.
"""

from __future__ import annotations

import time

import numpy as np

from formulation.common import SolveOptions, SolveRecord, SolveStatus, from_highs, from_pyomo
from formulation.realloc.instance import ReallocInstance, Solution


def _new_highs():
    """The bare HiGHS binding: no Python callback machinery to set up per model, and no banner."""
    try:
        from highspy._core import _Highs
    except ImportError:  # a highspy without the private core module
        from highspy import Highs as _Highs
    return _Highs()


class _Rows:
    """Row-wise sparse matrix under construction, with a name per row group."""

    def __init__(self) -> None:
        self.start = [0]
        self.index: list[int] = []
        self.value: list[float] = []
        self.lower: list[float] = []
        self.upper: list[float] = []
        self.groups: list[tuple[str, int, int]] = []  # (rule name, first row, end row)

    def add(self, cols, vals, lo: float, hi: float) -> None:
        self.index.extend(cols)
        self.value.extend(vals)
        self.start.append(len(self.index))
        self.lower.append(lo)
        self.upper.append(hi)

    def group(self, name: str, fn, *args) -> None:
        first = len(self.lower)
        fn(self, *args)
        self.groups.append((name, first, len(self.lower)))


class Layout:
    """Column indices: x (per stage, per candidate), then z, then h (per stage, per type)."""

    def __init__(self, inst: ReallocInstance) -> None:
        self.x: list[list[int]] = []
        n = 0
        for st in inst.stages:
            self.x.append(list(range(n, n + len(st.candidates))))
            n += len(st.candidates)
        self.n_x = n
        self.z = n
        n += 1
        self.h: dict[tuple[int, str], int] = {}
        self.g: dict[tuple[int, str], np.ndarray] = {}  # G_{s,c,t} per candidate
        arr = inst.arrays()
        for s in range(len(inst.stages)):
            by_type = arr.by_type(s)
            for i, t in enumerate(arr.types):  # in type order
                if by_type[:, i].any():
                    self.h[(s, t)] = n
                    self.g[(s, t)] = by_type[:, i].astype(float)
                    n += 1
        self.n = n


def define_choice(rows: _Rows, inst: ReallocInstance, lay: Layout) -> None:
    for s in range(len(inst.stages)):
        rows.add(lay.x[s], [1.0] * len(lay.x[s]), 1.0, 1.0)


def define_capacity(rows: _Rows, inst: ReallocInstance, lay: Layout) -> None:
    for p, users in inst.arrays().users():
        rows.add([lay.x[s][c] for s, c, _ in users], [float(g) for _, _, g in users], -np.inf, float(inst.pools[p].gpus))


def define_curves(rows: _Rows, inst: ReallocInstance, lay: Layout) -> None:
    for (s, t), col in lay.h.items():
        g = lay.g[(s, t)]
        nz = np.nonzero(g)[0]
        for a, b in inst.stages[s].curves[t].segments():
            # h - a * sum_c G x <= b
            rows.add([col] + [lay.x[s][c] for c in nz], [1.0] + [-a * g[c] for c in nz], -np.inf, b)


def define_bottleneck(rows: _Rows, inst: ReallocInstance, lay: Layout) -> None:
    for s in inst.pipeline_stages():
        cols = [col for (ss, _), col in lay.h.items() if ss == s]
        rows.add([lay.z] + cols, [1.0] + [-1.0] * len(cols), -np.inf, 0.0)


CONSTRAINT_GROUPS = (("choice", define_choice), ("capacity", define_capacity), ("curves", define_curves),
                     ("bottleneck", define_bottleneck))


def build(inst: ReallocInstance, options: SolveOptions | None = None):
    """The highspy model (a ``highspy.Highs`` with the LP passed) and its column layout."""
    import highspy

    opts = options or SolveOptions()
    lay = Layout(inst)
    rows = _Rows()
    for name, fn in CONSTRAINT_GROUPS:
        rows.group(name, fn, inst, lay)
    cost = np.zeros(lay.n)
    for s, st in enumerate(inst.stages):
        for c, cand in enumerate(st.candidates):
            cost[lay.x[s][c]] = -cand.migration_cost
    cost[lay.z] = 1.0
    lp = highspy.HighsLp()
    lp.num_col_ = lay.n
    lp.num_row_ = len(rows.lower)
    lp.sense_ = highspy.ObjSense.kMaximize
    lp.col_cost_ = cost
    lp.col_lower_ = np.zeros(lay.n)
    upper = np.full(lay.n, np.inf)
    upper[: lay.n_x] = 1.0
    lp.col_upper_ = upper
    lp.row_lower_ = np.asarray(rows.lower, dtype=float)
    lp.row_upper_ = np.asarray(rows.upper, dtype=float)
    lp.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
    lp.a_matrix_.num_col_ = lay.n
    lp.a_matrix_.num_row_ = len(rows.lower)
    lp.a_matrix_.start_ = np.asarray(rows.start, dtype=np.int32)
    lp.a_matrix_.index_ = np.asarray(rows.index, dtype=np.int32)
    lp.a_matrix_.value_ = np.asarray(rows.value, dtype=float)
    lp.integrality_ = [highspy.HighsVarType.kInteger] * lay.n_x + [highspy.HighsVarType.kContinuous] * (lay.n - lay.n_x)
    h = _new_highs()
    h.setOptionValue("output_flag", bool(opts.verbose))
    h.setOptionValue("time_limit", float(opts.time_limit_s))
    h.setOptionValue("mip_rel_gap", float(opts.mip_gap))
    h.setOptionValue("threads", int(opts.threads))
    h.setOptionValue("random_seed", int(opts.seed))
    h.passModel(lp)
    return h, lay, rows


def solve(inst: ReallocInstance, options: SolveOptions | None = None) -> tuple[Solution, SolveRecord]:
    opts = options or SolveOptions()
    t0 = time.perf_counter()
    h, lay, _ = build(inst, opts)
    h.run()
    info = h.getInfo()
    model_status = h.modelStatusToString(h.getModelStatus())
    has = info.primal_solution_status == 2  # kSolutionStatusFeasible
    status = _highs_status(h, has)
    choice = [0] * len(inst.stages)
    obj = bound = None
    if status.has_solution:
        x = np.asarray(h.getSolution().col_value)
        choice = [int(np.argmax(x[lay.x[s]])) for s in range(len(inst.stages))]
        obj = float(info.objective_function_value)
        bound = float(info.mip_dual_bound)
        if abs(inst.objective(choice) - obj) > 1e-6 * max(1.0, abs(obj)):
            # never act on a solution vector that does not match the reported objective
            status = SolveStatus.ERROR
            model_status += f" but its solution vector scores {inst.objective(choice):.9g}, not {obj:.9g}"
            choice = [0] * len(inst.stages)
    rec = SolveRecord("highs", status, obj, bound, time.perf_counter() - t0, opts.time_limit_s, None, f"HiGHS {model_status}")
    return Solution(choice, obj, bound), rec


def _highs_status(h, has_incumbent: bool) -> SolveStatus:
    import highspy

    ms = h.getModelStatus()
    name = next((n for n, v in highspy.HighsModelStatus.__members__.items() if v == ms), "kUnknown")
    return from_highs(name, has_incumbent)


# ------------------------------------------------------------------------------ Pyomo reference
def build_pyomo(inst: ReallocInstance):
    """The same model with Pyomo components (reference; slower to build, see the benchmark)."""
    import pyomo.environ as pyo

    lay = Layout(inst)
    m = pyo.ConcreteModel("realloc")
    m.SC = pyo.Set(initialize=[(s, c) for s, st in enumerate(inst.stages) for c in range(len(st.candidates))], dimen=2)
    m.ST = pyo.Set(initialize=list(lay.h), dimen=2)
    m.x = pyo.Var(m.SC, domain=pyo.Binary)
    m.h = pyo.Var(m.ST, domain=pyo.NonNegativeReals)
    m.z = pyo.Var(domain=pyo.NonNegativeReals)
    m.obj = pyo.Objective(expr=m.z - sum(inst.stages[s].candidates[c].migration_cost * m.x[s, c] for s, c in m.SC),
                          sense=pyo.maximize)
    m.choice = pyo.Constraint(range(len(inst.stages)),
                              rule=lambda m, s: sum(m.x[s, c] for c in range(len(inst.stages[s].candidates))) == 1)
    users = {inst.pools[p].name: u for p, u in inst.arrays().users()}
    m.capacity = pyo.Constraint(list(users), rule=lambda m, p: sum(g * m.x[s, c] for s, c, g in users[p]) <= inst.pool(p).gpus)
    segs = [(s, t, k) for (s, t) in lay.h for k in range(len(inst.stages[s].curves[t].segments()))]

    def curve_rule(m, s, t, k):
        a, b = inst.stages[s].curves[t].segments()[k]
        g = lay.g[(s, t)]
        return m.h[s, t] <= a * sum(float(g[c]) * m.x[s, c] for c in np.nonzero(g)[0]) + b

    m.SEG = pyo.Set(initialize=segs, dimen=3)
    m.curves = pyo.Constraint(m.SEG, rule=curve_rule)
    m.bottleneck = pyo.Constraint(inst.pipeline_stages(),
                                  rule=lambda m, s: m.z <= sum(m.h[ss, t] for ss, t in lay.h if ss == s))
    return m


def solve_pyomo(inst: ReallocInstance, options: SolveOptions | None = None) -> tuple[Solution, SolveRecord]:
    import pyomo.environ as pyo

    opts = options or SolveOptions()
    t0 = time.perf_counter()
    m = build_pyomo(inst)
    from pyomo.contrib.appsi.solvers import Highs

    solver = Highs()
    solver.config.time_limit = opts.time_limit_s
    solver.config.mip_gap = opts.mip_gap
    solver.config.load_solution = False
    res = solver.solve(m)
    has = res.best_feasible_objective is not None
    status = from_pyomo(res.termination_condition.name, has)
    choice = [0] * len(inst.stages)
    obj = bound = None
    if has:
        res.solution_loader.load_vars()
        choice = [max(range(len(st.candidates)), key=lambda c: pyo.value(m.x[s, c])) for s, st in enumerate(inst.stages)]
        obj = float(res.best_feasible_objective)
        bound = float(res.best_objective_bound) if res.best_objective_bound is not None else None
    rec = SolveRecord("pyomo-highs", status, obj, bound, time.perf_counter() - t0, opts.time_limit_s, None,
                      res.termination_condition.name)
    return Solution(choice, obj, bound), rec
