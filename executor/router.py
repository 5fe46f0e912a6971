"""The rollout router: submits requests to a rollout component's serving engines by affinity."""

from __future__ import annotations

from typing import Any

from executor.migrations import affinity


def make_requests(component: str, n: int, *, prompts: int = 16, prompt_len: int = 64, min_len: int = 4, max_len: int = 48,
                  seed: int = 0, prefix: str = "q") -> list[dict]:
    """``n`` requests in GRPO groups: ``n // prompts`` samples share each prompt (and its cache)."""
    import random

    rng = random.Random(seed)
    base = [[rng.randrange(32000) for _ in range(prompt_len)] for _ in range(prompts)]
    out = []
    for i in range(n):
        out.append({"id": f"{prefix}{seed}-{i}", "component": component, "prompt": base[i % prompts], "seed": seed * 1_000_003 + i,
                    "target_len": rng.randint(min_len, max_len), "turns_done": 0, "age": 0})
    return out


def submit(backend: Any, component: str, requests: list[dict]) -> dict[str, str]:
    engines = backend.coord("active_set", component)
    if not engines:
        raise RuntimeError(f"{component} has no serving engine; apply a plan that places it first")
    scores = {e: backend.call(e, "score", [r["prompt"] for r in requests]) for e in engines}
    load = {}
    for e in engines:
        ld = backend.call(e, "load")
        load[e] = ld["pending"] + ld["running"]
    moves = affinity.assign(requests, scores, load)
    backend.coord("submit", requests, [moves[r["id"]] for r in requests])
    for e in engines:
        backend.call(e, "admit", [r for r in requests if moves[r["id"]] == e])
    return moves
