"""Response-length distributions and tool-call latencies.

* ``servegen``: the ServeGen DeepSeek-R1 production output-length distribution (alibaba/ServeGen
  @ f891d11, Apache-2.0), shipped as quantile tables in ``estimators/data/lengths.json``: the
  request-rate-weighted mixture over the 37 clients in ``../shared/data/servegen-deepseek-r1``
  (p50 502, p90 1,964, p99 16,016, max 32,768 tokens; the upstream README's p50 792 / p90 3.4K is
  over all 73 clients) and one table per client. ``scale`` stretches lengths (a harder task set
  generates longer reasoning), and lengths are clipped at the job's ``max_response_tokens``
  (a clipped response is a truncated one, as in RL rollouts).
* ``lognormal``: a parametric long tail with a given median and log-space sigma.
* ``fixed``: every response the same length.

Tool-call latency comes from RollPacker's 2,001 measured code-sandbox executions
(Farrrrland/RollPacker @ bb8afa9, Apache-2.0; p50 0.031 s, p99 9.1 s, max 21 s), shipped in
``estimators/data/tool_latency.json``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

import numpy as np


@lru_cache(maxsize=1)
def _lengths_table() -> dict:
    return json.loads(resources.files("estimators").joinpath("data/lengths.json").read_text())


@lru_cache(maxsize=1)
def tool_latencies_s() -> np.ndarray:
    d = json.loads(resources.files("estimators").joinpath("data/tool_latency.json").read_text())
    return np.asarray(d["seconds"], dtype=float)


def servegen_clients() -> list[str]:
    return sorted(_lengths_table()["clients"], key=int)


@dataclass(frozen=True)
class LengthDistribution:
    """Samplable response-length distribution (tokens)."""

    kind: str = "servegen"  # servegen | lognormal | fixed
    client: str | None = None  # servegen client id; None = the rate-weighted mixture
    scale: float = 1.0
    median_tokens: float = 1000.0
    sigma: float = 1.0
    max_tokens: float | None = None

    def _quantile_table(self) -> np.ndarray:
        t = _lengths_table()
        q = t["mixture"]["output_quantiles"] if self.client is None else t["clients"][str(self.client)]["output_quantiles"]
        return np.asarray(q, dtype=float)

    def quantile(self, q) -> np.ndarray:
        q = np.asarray(q, dtype=float)
        if self.kind == "fixed":
            v = np.full_like(q, self.median_tokens)
        elif self.kind == "lognormal":
            from statistics import NormalDist

            z = np.vectorize(lambda p: NormalDist().inv_cdf(min(max(p, 1e-9), 1 - 1e-9)))(q)
            v = self.median_tokens * np.exp(self.sigma * z)
        else:
            table = self._quantile_table()
            grid = np.linspace(0.0, 1.0, len(table))
            v = np.interp(q, grid, table) * self.scale
        if self.max_tokens is not None:
            v = np.minimum(v, self.max_tokens)
        return np.maximum(1.0, np.round(v))

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        if self.kind == "fixed":
            v = np.full(n, float(self.median_tokens))
            return np.minimum(v, self.max_tokens) if self.max_tokens is not None else v
        return self.quantile(rng.random(n))

    def mean(self) -> float:
        return float(np.mean(self.quantile(np.linspace(0.0005, 0.9995, 1000))))


def sample_grouped(dist: LengthDistribution, n_prompts: int, group_size: int, rng: np.random.Generator,
                   prompt_spread: float = 0.5) -> np.ndarray:
    """Lengths for ``n_prompts`` x ``group_size`` responses (GRPO groups).

    Responses to one prompt are correlated (a hard prompt makes every sample long): each prompt
    draws a difficulty factor ``exp(N(0, prompt_spread))`` that multiplies its responses' lengths;
    the factors are divided by their median so the typical length is unchanged.
    """
    base = dist.sample(n_prompts * group_size, rng).reshape(n_prompts, group_size)
    if prompt_spread > 0:
        factor = np.exp(rng.normal(0.0, prompt_spread, size=(n_prompts, 1)))
        factor /= np.median(factor)
        base = base * factor
        if dist.max_tokens is not None:
            base = np.minimum(base, dist.max_tokens)
        base = np.maximum(1.0, np.round(base))
    return base.reshape(-1)


def sample_tool_latency_s(n: int, rng: np.random.Generator) -> np.ndarray:
    vals = tool_latencies_s()
    return vals[rng.integers(0, len(vals), size=n)]
