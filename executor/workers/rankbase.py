"""What every trainer rank (``tinylm``'s :class:`~executor.workers.lm_trainer.LMTrainerRank`,
``megatron``'s :class:`~executor.workers.megatron_trainer.MegatronRank`) answers the same way:
its info, its lease epoch, readiness, and the plain-data record it is saved as (the sim backend's
state file). Each rank class keeps its own ``__setstate__`` (what it rebuilds differs)."""

from __future__ import annotations

from typing import Any


class TrainerRankBase:
    id: str
    epoch: int
    component: str
    rank: int
    layout: Any
    model: Any
    loaded: Any
    step_no: int

    def state(self) -> dict:  # pragma: no cover - each rank class defines it
        raise NotImplementedError

    def info(self) -> dict:
        return {"rank": self.rank, "step": self.step_no, "loaded": self.loaded, "layout": vars(self.layout) | {}}

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def ready(self) -> bool:
        return True

    def __getstate__(self) -> dict:
        return {"id": self.id, "epoch": self.epoch, "component": self.component, "rank": self.rank,
                "layout": vars(self.layout) | {}, "model": self.model, "loaded": self.loaded, "state": self.state()}
