"""Donor detection: which components hold GPUs they no longer use (DynaRL's trigger).

A component is a **donor** at time ``t`` when more than ``θ`` (``theta``) of its engines have
stayed below ``U_low`` KV-cache utilisation for at least ``T`` (``hold_s``) seconds. The detector
is stateful and fed snapshots of one job in time order:

* an engine's *below-since* clock starts at the first snapshot where its utilisation is below
  ``U_low`` and is reset by any snapshot where it is at or above ``U_low`` — so a dip shorter
  than ``T`` never counts, however deep; it also resets when two snapshots are further apart
  than ``max_gap_s`` (lost telemetry: nothing shows the engine stayed low in between) and when a
  new iteration starts (the next rollout starts full);
* ``U_low`` is a fixed fraction, or (``u_low_percentile``) the given low percentile of the
  component's own per-engine utilisation samples over the last ``history_s`` seconds, excluding
  the most recent ``hold_s`` (so the dip being judged does not lower its own threshold); until
  ``min_history`` samples exist the fixed ``u_low`` is used;
* only components of the kinds in ``kinds`` are judged (KV utilisation is meaningful for
  generation engines; a trainer holds no KV cache).

Each verdict carries its evidence: engines below and for how long, the threshold used and where it
came from, the fraction, and since when the fraction has held.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from formulation.realloc.telemetry import TelemetrySnapshot


@dataclass(frozen=True)
class DonorConfig:
    theta: float = 0.5  # fraction of engines (strictly more than) that must stay low
    u_low: float = 0.2  # KV utilisation threshold (fraction of capacity)
    hold_s: float = 5.0  # T: how long they must stay low
    u_low_percentile: Optional[float] = None  # e.g. 10: U_low = 10th percentile of the component's history
    history_s: float = 600.0
    min_history: int = 20
    max_gap_s: Optional[float] = None  # snapshots further apart restart every clock
    kinds: tuple = ("rollout",)

    def __post_init__(self) -> None:
        if not 0.0 <= self.theta < 1.0:
            raise ValueError(f"theta must lie in [0, 1), got {self.theta}")
        if not 0.0 < self.u_low <= 1.0:
            raise ValueError(f"u_low must lie in (0, 1], got {self.u_low}")
        if self.hold_s < 0:
            raise ValueError(f"hold_s must be >= 0, got {self.hold_s}")
        if self.u_low_percentile is not None and not 0.0 < self.u_low_percentile < 100.0:
            raise ValueError(f"u_low_percentile must lie in (0, 100), got {self.u_low_percentile}")


@dataclass(frozen=True)
class DonorEvidence:
    component: str
    donor: bool
    engines: int
    engines_low: int  # below U_low now
    engines_low_held: int  # below U_low for at least hold_s
    fraction_held: float
    u_low: float
    u_low_source: str  # "fixed" | "p<q> of <n> samples"
    mean_kv_utilization: float
    low_since_s: Optional[float]  # earliest time from which > theta of engines have been low (None: not now)
    time_s: float
    cause: str

    def as_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class _ComponentState:
    below_since: dict = field(default_factory=dict)  # worker id -> time it went below
    history: deque = field(default_factory=deque)  # (time, utilisation)


class DonorDetector:
    """Feed snapshots of one job in time order with :meth:`observe`; read verdicts back."""

    def __init__(self, config: DonorConfig | None = None) -> None:
        self.config = config or DonorConfig()
        self._state: dict[str, _ComponentState] = {}
        self._last_time: Optional[float] = None
        self._iteration: Optional[int] = None
        self._job: Optional[str] = None

    def reset(self) -> None:
        self._state.clear()
        self._last_time = None

    def _threshold(self, st: _ComponentState, now: float) -> tuple[float, str]:
        cfg = self.config
        if cfg.u_low_percentile is None:
            return cfg.u_low, "fixed"
        cutoff = now - cfg.hold_s
        vals = [u for t, u in st.history if t <= cutoff]
        if len(vals) < cfg.min_history:
            return cfg.u_low, f"fixed (only {len(vals)} of {cfg.min_history} history samples for p{cfg.u_low_percentile:g})"
        return float(np.percentile(vals, cfg.u_low_percentile)), f"p{cfg.u_low_percentile:g} of {len(vals)} samples"

    def observe(self, snap: TelemetrySnapshot) -> list[DonorEvidence]:
        """Fold one snapshot in; return the verdict for every judged component."""
        cfg = self.config
        now = snap.time_s
        if self._job is not None and snap.job != self._job:
            raise ValueError(f"this detector follows job {self._job!r}, got a snapshot of {snap.job!r}: use one detector per job")
        self._job = snap.job
        if self._iteration is not None and snap.iteration != self._iteration:
            self.reset()
        elif self._last_time is not None and now < self._last_time:
            raise ValueError(f"snapshot time {now} is before the previous one ({self._last_time}): feed snapshots in time order")
        elif self._last_time is not None and cfg.max_gap_s is not None and now - self._last_time > cfg.max_gap_s:
            for st in self._state.values():
                st.below_since.clear()
        self._iteration = snap.iteration
        self._last_time = now
        out = []
        for comp in snap.components:
            if comp.kind not in cfg.kinds:
                continue
            st = self._state.setdefault(comp.name, _ComponentState())
            workers = snap.workers_of(comp.name)
            u_low, source = self._threshold(st, now)
            utils = {w.worker_id: w.kv_utilization for w in workers}
            st.below_since = {wid: st.below_since.get(wid, now) for wid, u in utils.items() if u < u_low}
            for u in utils.values():
                st.history.append((now, u))
            while st.history and st.history[0][0] < now - cfg.history_s:
                st.history.popleft()
            out.append(self._verdict(comp.name, utils, st, u_low, source, now))
        return out

    def _verdict(self, name: str, utils: dict, st: _ComponentState, u_low: float, source: str, now: float) -> DonorEvidence:
        cfg = self.config
        n = len(utils)
        held = sorted(now - t0 for t0 in st.below_since.values())
        n_held = sum(1 for d in held if d >= cfg.hold_s)
        frac = n_held / n if n else 0.0
        # the time from which more than theta of the engines have been low: the k-th longest clock
        need = int(np.floor(cfg.theta * n)) + 1
        since = now - sorted(held, reverse=True)[need - 1] if len(held) >= need else None
        donor = frac > cfg.theta
        mean_u = float(np.mean(list(utils.values()))) if utils else 0.0
        if donor:
            cause = (f"{n_held} of {n} engines ({frac:.0%} > θ={cfg.theta:.0%}) below U_low={u_low:.3f} "
                     f"for at least T={cfg.hold_s:g} s (since t={since:g} s)")
        elif len(st.below_since) / max(1, n) > cfg.theta:
            cause = (f"{len(st.below_since)} of {n} engines below U_low={u_low:.3f}, but only {n_held} for T={cfg.hold_s:g} s: "
                     "waiting (a transient dip does not trigger)")
        else:
            cause = f"{len(st.below_since)} of {n} engines below U_low={u_low:.3f} (need more than θ={cfg.theta:.0%})"
        return DonorEvidence(name, donor, n, len(st.below_since), n_held, frac, u_low, source, mean_u, since, now, cause)
