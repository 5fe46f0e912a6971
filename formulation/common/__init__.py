from formulation.common.options import SolveOptions  # noqa: F401
from formulation.common.status import SolveStatus, from_cpsat, from_highs, from_pyomo  # noqa: F401
from formulation.common.record import SolveRecord  # noqa: F401
