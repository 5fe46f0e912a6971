"""Any other component (reference, reward, critic, tool agent): a worker with state to keep.

It counts the calls it served and keeps a small key/value state; a reboot must carry both over.
"""

from __future__ import annotations

from typing import Any, Callable


class ServiceWorker:
    def __init__(self, worker_id: str, epoch: int, coord: Callable[..., Any], fail_start: bool = False) -> None:
        if fail_start:
            raise MemoryError(f"{worker_id}: out of memory at start-up (injected)")
        self.id, self.epoch, self._coord = worker_id, epoch, coord
        self.kv: dict[str, Any] = {}
        self.served = 0

    def serve(self, key: str, value: Any) -> bool:
        """Take a write, only under a valid lease (a fenced worker leaves its state untouched)."""
        if not self._coord("authorize", self.id, self.epoch, f"write {key}"):
            return False
        self.kv[key] = value
        self.served += 1
        return True

    def state(self) -> dict:
        return {"kv": dict(self.kv), "served": self.served}

    def save_state(self, key: str) -> bool:
        return bool(self._coord("put_checkpoint", self.id, self.epoch, key, self.state()))

    def load_state(self, blob: dict) -> None:
        self.kv, self.served = dict(blob["kv"]), blob["served"]

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def ready(self) -> bool:
        return True
