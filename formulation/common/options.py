"""Options every solve takes, whatever the backend."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional


@dataclass
class SolveOptions:
    time_limit_s: float = 60.0  # wall clock, enforced by the caller as well as the solver
    mip_gap: float = 1e-4  # relative gap at which a MIP solve may stop
    threads: int = 1
    seed: int = 0
    warm_start: Optional[Any] = None  # a previous solution in the problem's own plan form
    warm_start_name: Optional[str] = None  # what the warm start is ("greedy", "previous-plan")
    verbose: bool = False
