"""The record of one solve that every plan carries."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Optional

from formulation.common.status import SolveStatus


@dataclass
class SolveRecord:
    backend: str
    status: SolveStatus
    objective: Optional[float] = None
    best_bound: Optional[float] = None
    wall_time_s: float = 0.0
    time_limit_s: Optional[float] = None
    warm_start: Optional[str] = None
    message: str = ""

    @property
    def gap(self) -> Optional[float]:
        """Relative gap ``|obj - bound| / max(|obj|, 1e-9)`` (minimisation or maximisation)."""
        if self.objective is None or self.best_bound is None:
            return None
        if not (math.isfinite(self.objective) and math.isfinite(self.best_bound)):
            return None
        return abs(self.objective - self.best_bound) / max(abs(self.objective), 1e-9)

    def as_dict(self) -> dict:
        d = asdict(self)
        d["status"] = self.status.value
        d["gap"] = self.gap
        return d
