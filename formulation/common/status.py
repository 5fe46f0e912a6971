"""One solver-neutral status, and one mapping table per solver (after linopy's ``constants.py``).

============  ==========================================================================
status        meaning
============  ==========================================================================
optimal       proven optimal within the requested gap
feasible      a feasible solution, stopped early (time limit, gap, interrupt): has a bound
infeasible    proven infeasible
not_solved    stopped before any feasible solution was found (time limit, interrupt)
error         the solver failed, or the model is unbounded (a modelling bug here)
============  ==========================================================================
"""

from __future__ import annotations

from enum import Enum


class SolveStatus(str, Enum):
    OPTIMAL = "optimal"
    FEASIBLE = "feasible"
    INFEASIBLE = "infeasible"
    NOT_SOLVED = "not_solved"
    ERROR = "error"

    @property
    def has_solution(self) -> bool:
        return self in (SolveStatus.OPTIMAL, SolveStatus.FEASIBLE)


# HiGHS ``HighsModelStatus`` names (highspy) → status. Time/iteration/interrupt limits map to
# FEASIBLE when an incumbent exists, NOT_SOLVED otherwise (decided by the caller: see resolve()).
HIGHS_STATUS: dict[str, SolveStatus] = {
    "kOptimal": SolveStatus.OPTIMAL,
    "kInfeasible": SolveStatus.INFEASIBLE,
    "kUnboundedOrInfeasible": SolveStatus.INFEASIBLE,
    "kUnbounded": SolveStatus.ERROR,
    "kTimeLimit": SolveStatus.FEASIBLE,
    "kIterationLimit": SolveStatus.FEASIBLE,
    "kSolutionLimit": SolveStatus.FEASIBLE,
    "kInterrupt": SolveStatus.FEASIBLE,
    "kObjectiveBound": SolveStatus.FEASIBLE,
    "kObjectiveTarget": SolveStatus.FEASIBLE,
    "kNotset": SolveStatus.ERROR,
    "kLoadError": SolveStatus.ERROR,
    "kModelError": SolveStatus.ERROR,
    "kPresolveError": SolveStatus.ERROR,
    "kSolveError": SolveStatus.ERROR,
    "kPostsolveError": SolveStatus.ERROR,
    "kModelEmpty": SolveStatus.OPTIMAL,
    "kMemoryLimit": SolveStatus.FEASIBLE,
    "kUnknown": SolveStatus.ERROR,
}

# Pyomo ``TerminationCondition`` names → status (same incumbent rule for limits).
PYOMO_STATUS: dict[str, SolveStatus] = {
    "optimal": SolveStatus.OPTIMAL,
    "globallyOptimal": SolveStatus.OPTIMAL,
    "locallyOptimal": SolveStatus.OPTIMAL,
    "convergenceCriteriaSatisfied": SolveStatus.OPTIMAL,
    "feasible": SolveStatus.FEASIBLE,
    "maxTimeLimit": SolveStatus.FEASIBLE,
    "maxIterations": SolveStatus.FEASIBLE,
    "maxEvaluations": SolveStatus.FEASIBLE,
    "minStepLength": SolveStatus.FEASIBLE,
    "userInterrupt": SolveStatus.FEASIBLE,
    "resourceInterrupt": SolveStatus.FEASIBLE,
    "iterationLimit": SolveStatus.FEASIBLE,
    "objectiveLimit": SolveStatus.FEASIBLE,
    "interrupted": SolveStatus.FEASIBLE,
    "infeasible": SolveStatus.INFEASIBLE,
    "provenInfeasible": SolveStatus.INFEASIBLE,
    "locallyInfeasible": SolveStatus.INFEASIBLE,
    "infeasibleOrUnbounded": SolveStatus.INFEASIBLE,
    "unbounded": SolveStatus.ERROR,
    "error": SolveStatus.ERROR,
    "solverFailure": SolveStatus.ERROR,
    "internalSolverError": SolveStatus.ERROR,
    "invalidProblem": SolveStatus.ERROR,
    "other": SolveStatus.ERROR,
    "unknown": SolveStatus.ERROR,
    "licensingProblems": SolveStatus.ERROR,
    "emptyModel": SolveStatus.OPTIMAL,
}

# OR-Tools CP-SAT ``CpSolverStatus`` names → status. CP-SAT reports FEASIBLE itself when a limit
# stops it with an incumbent and UNKNOWN when it has none.
CPSAT_STATUS: dict[str, SolveStatus] = {
    "OPTIMAL": SolveStatus.OPTIMAL,
    "FEASIBLE": SolveStatus.FEASIBLE,
    "INFEASIBLE": SolveStatus.INFEASIBLE,
    "MODEL_INVALID": SolveStatus.ERROR,
    "UNKNOWN": SolveStatus.NOT_SOLVED,
}


def resolve(status: SolveStatus, has_incumbent: bool) -> SolveStatus:
    """A limit-type FEASIBLE without an incumbent is NOT_SOLVED."""
    if status is SolveStatus.FEASIBLE and not has_incumbent:
        return SolveStatus.NOT_SOLVED
    return status


def from_highs(model_status_name: str, has_incumbent: bool) -> SolveStatus:
    name = model_status_name.split(".")[-1]
    return resolve(HIGHS_STATUS.get(name, SolveStatus.ERROR), has_incumbent)


def from_pyomo(termination_condition_name: str, has_incumbent: bool) -> SolveStatus:
    name = termination_condition_name.split(".")[-1]
    return resolve(PYOMO_STATUS.get(name, SolveStatus.ERROR), has_incumbent)


def from_cpsat(status_name: str) -> SolveStatus:
    return CPSAT_STATUS.get(status_name, SolveStatus.ERROR)
