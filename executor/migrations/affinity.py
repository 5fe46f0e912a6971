"""Where a handed-over request goes: the kept engine with the most of its prompt cached.

Score of engine ``e`` for request ``r``: the cached prefix length of ``r``'s prompt on ``e``
(tokens that need no prefill). Ties go to the engine with the least load (requests already
there plus those assigned so far), then to the lower engine id. An engine whose load would
exceed ``cap`` (default: an even share plus one batch) is skipped unless all are full, so one
hot prefix cannot pile every request on one engine.

Requests are placed in priority order (after DynaRL's multi-turn policy): more tool calls done
first, then longer cached prefix, then older, so late turns land before their cache is evicted.
"""

from __future__ import annotations

import math
from typing import Optional


def priority_key(req: dict, best_prefix: int) -> tuple:
    return (-req.get("turns_done", 0), -best_prefix, -req.get("age", 0), req["id"])


def assign(requests: list[dict], scores: dict[str, list[int]], load: dict[str, int],
           cap: Optional[int] = None, batch: int = 64) -> dict[str, str]:
    """request id -> engine id. ``scores[e][i]`` is engine e's cached prefix of requests[i]."""
    engines = sorted(scores)
    if not engines:
        raise ValueError("no engine to hand requests to")
    load = {e: load.get(e, 0) for e in engines}
    if cap is None:
        cap = math.ceil((sum(load.values()) + len(requests)) / len(engines)) + batch
    best = [max(scores[e][i] for e in engines) for i in range(len(requests))]
    order = sorted(range(len(requests)), key=lambda i: priority_key(requests[i], best[i]))
    out: dict[str, str] = {}
    for i in order:
        open_ = [e for e in engines if load[e] < cap] or engines
        e = min(open_, key=lambda e: (-scores[e][i], load[e], e))
        out[requests[i]["id"]] = e
        load[e] += 1
    return out
