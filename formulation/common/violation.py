"""What a solver-free checker reports: one violated rule, where, and why (never imports a solver)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Violation:
    rule: str
    where: str
    message: str

    def __str__(self) -> str:
        return f"{self.rule}[{self.where}]: {self.message}"
