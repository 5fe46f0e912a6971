"""A token bucket on the daemon's clock, with state that survives a restart.

Used to bound churn: jobs moved by optional re-optimisations per hour. Its state (tokens, last
refill time) is stored with the loop's other state in each cycle's transaction, so a restart
neither resets the budget nor replays it differently.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class TokenBucket:
    rate_per_hour: float
    capacity: float
    tokens: float
    updated_at: float

    @classmethod
    def full(cls, rate_per_hour: float, now: float) -> "TokenBucket":
        # a positive rate below one an hour still lets one move through now and then; a rate of 0
        # is no budget at all (it held one token, so ``--max-moves-per-hour 0`` let a move through)
        cap = max(1.0, rate_per_hour) if rate_per_hour > 0 else 0.0
        return cls(rate_per_hour, cap, cap, now)

    def refill(self, now: float) -> None:
        if now > self.updated_at:
            self.tokens = min(self.capacity, self.tokens + (now - self.updated_at) * self.rate_per_hour / 3600.0)
            self.updated_at = now

    def allows(self, n: float, now: float) -> bool:
        self.refill(now)
        return n <= self.tokens + 1e-9

    def take(self, n: float, now: float) -> None:
        self.refill(now)
        self.tokens = max(0.0, self.tokens - n)

    def wait_s(self, n: float) -> float:
        """Clock seconds until ``n`` tokens are there (inf when n exceeds the capacity)."""
        if n > self.capacity + 1e-9 or (self.rate_per_hour <= 0 and n > self.tokens + 1e-9):
            return float("inf")
        missing = n - self.tokens
        return 0.0 if missing <= 0 else missing * 3600.0 / max(self.rate_per_hour, 1e-12)

    def state(self) -> dict:
        return {"tokens": self.tokens, "updated_at": self.updated_at}

    @classmethod
    def restore(cls, rate_per_hour: float, state: dict | None, now: float) -> "TokenBucket":
        b = cls.full(rate_per_hour, now)
        if state:
            b.tokens = min(b.capacity, float(state.get("tokens", b.capacity)))
            b.updated_at = float(state.get("updated_at", now))
        return b
