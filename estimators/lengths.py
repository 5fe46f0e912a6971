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
* ``table``: the user's own distribution, an inverse CDF on a uniform grid (``table``) made from a
  trace column or a quantile table by :mod:`estimators.traces`; ``scale`` applies as for ServeGen.

The shipped tables can be replaced by a calibration folder of the user's (:mod:`estimators.datadir`).

Tool-call latency comes from RollPacker's 2,001 measured code-sandbox executions
(Farrrrland/RollPacker @ bb8afa9, Apache-2.0; p50 0.031 s, p99 9.1 s, max 21 s), shipped in
``estimators/data/tool_latency.json``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from estimators import datadir


@lru_cache(maxsize=1)
def _lengths_table() -> dict:
    return datadir.read_json("lengths.json")


@lru_cache(maxsize=1)
def tool_latencies_s() -> np.ndarray:
    d = datadir.read_json("tool_latency.json")
    return np.asarray(d["seconds"], dtype=float)


def servegen_clients() -> list[str]:
    return sorted(_lengths_table()["clients"], key=int)


@dataclass(frozen=True)
class LengthDistribution:
    """Samplable response-length distribution (tokens)."""

    kind: str = "servegen"  # servegen | lognormal | fixed | table
    client: str | None = None  # servegen client id; None = the rate-weighted mixture
    scale: float = 1.0
    median_tokens: float = 1000.0
    sigma: float = 1.0
    max_tokens: float | None = None
    table: tuple[float, ...] | None = None  # kind "table": inverse CDF on a uniform grid (estimators.traces)

    def _quantile_table(self) -> np.ndarray:
        if self.kind == "table":
            return np.asarray(self.table, dtype=float)
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


DEFAULT_PROMPT_SPREAD = 0.5  # log-space spread of per-prompt difficulty in GRPO groups (see sample_grouped)


def sample_grouped(dist: LengthDistribution, n_prompts: int, group_size: int, rng: np.random.Generator,
                   prompt_spread: float = DEFAULT_PROMPT_SPREAD) -> np.ndarray:
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


@lru_cache(maxsize=64)
def grouped_quantiles(dist: LengthDistribution, prompt_spread: float = DEFAULT_PROMPT_SPREAD, points: int = 4000) -> np.ndarray:
    """A sorted, deterministic representative sample (``points`` values) of the lengths
    :func:`sample_grouped` produces: the base distribution's quantiles times the per-prompt
    difficulty factor's quantiles (log-normal, median 1), clipped and rounded the same way.

    This is the marginal length distribution a rollout manager sees over its past iterations; it
    is longer than ``dist`` alone (the factor's mean is above its median), e.g. 7.2K against 6.4K
    tokens on average for the math-RL set-up.
    """
    base = dist.quantile((np.arange(points) + 0.5) / points)
    if prompt_spread <= 0:
        return np.sort(base)
    from statistics import NormalDist

    k = 41
    z = np.array([NormalDist().inv_cdf((i + 0.5) / k) for i in range(k)])
    v = (base[:, None] * np.exp(prompt_spread * z)[None, :]).ravel()
    if dist.max_tokens is not None:
        v = np.minimum(v, dist.max_tokens)
    v = np.sort(np.maximum(1.0, np.round(v)))
    return v[((np.arange(points) + 0.5) / points * v.size).astype(int)]


@lru_cache(maxsize=64)
def hardest_group(dist: LengthDistribution, n_prompts: int, group_size: int,
                  prompt_spread: float = DEFAULT_PROMPT_SPREAD) -> np.ndarray:
    """Representative lengths (ascending) of the ``group_size`` responses to the hardest of
    ``n_prompts`` prompts: the base distribution's quantiles times the largest difficulty factor
    expected among ``n_prompts`` (its quantile ``1 - 0.5 / n_prompts``), clipped as
    :func:`sample_grouped` clips. A group's responses are dispatched together (verl's contiguous
    dispatch), so these ride on the engine that holds the rollout's longest request."""
    from statistics import NormalDist

    g = max(1, int(group_size))
    base = dist.quantile((np.arange(g) + 0.5) / g)
    f = float(np.exp(prompt_spread * NormalDist().inv_cdf(1.0 - 0.5 / max(1, int(n_prompts))))) if prompt_spread > 0 else 1.0
    v = base * f
    if dist.max_tokens is not None:
        v = np.minimum(v, dist.max_tokens)
    return np.sort(np.maximum(1.0, np.round(v)))


class ResidualTable:
    """Tokens a response still has to generate, given how many it has generated.

    Built on a sorted representative sample of the job's response lengths (``lengths``: e.g.
    :func:`grouped_quantiles` of its length distribution clipped at ``max_tokens``), which is what
    a rollout manager can estimate from its recent iterations; never the lengths of the requests
    now running.

    * :meth:`expected_remaining`: ``E[L - g | L > g]`` per request (the rollout's remaining work);
    * :meth:`survivors`: ``n`` representative residual lengths of requests that have generated
      ``g`` tokens each (the conditional distribution's quantiles, ascending): the spread of the
      remaining work, whose largest value bounds the rollout's remaining time;
    * :meth:`longest`: the representative lengths of the longest ``fraction`` of all responses
      (ascending): the samples a downstream stage still has to process when it has done the
      shortest ``1 - fraction`` (responses finish roughly in length order).
    """

    def __init__(self, lengths: np.ndarray, max_tokens: float) -> None:
        self.lengths = np.sort(np.asarray(lengths, dtype=float))
        self.suffix = np.concatenate([np.cumsum(self.lengths[::-1])[::-1], [0.0]])
        self.max_tokens = float(max_tokens)

    @classmethod
    def of(cls, dist: LengthDistribution, max_tokens: float, prompt_spread: float = DEFAULT_PROMPT_SPREAD) -> "ResidualTable":
        from dataclasses import replace

        return cls(grouped_quantiles(replace(dist, max_tokens=max_tokens), prompt_spread), max_tokens)

    def mean(self) -> float:
        return float(self.lengths.mean())

    def expected_remaining(self, generated) -> np.ndarray:
        g = np.asarray(generated, dtype=float)
        i = np.searchsorted(self.lengths, g, side="right")
        n = self.lengths.size - i
        with np.errstate(invalid="ignore", divide="ignore"):
            res = np.where(n > 0, self.suffix[i] / np.maximum(n, 1) - g, 0.0)
        return np.maximum(np.minimum(res, self.max_tokens - g), 1.0)

    def survivors(self, generated: float, n: int) -> np.ndarray:
        """``n`` residual lengths (ascending) of requests that have generated ``generated`` tokens."""
        n = int(max(0, n))
        if n == 0:
            return np.zeros(0)
        g = float(max(0.0, generated))
        i = int(np.searchsorted(self.lengths, g, side="right"))
        alive = self.lengths[i:] - g
        if alive.size == 0:  # past every length seen: the request runs to the cap
            return np.full(n, max(1.0, self.max_tokens - g))
        pick = ((np.arange(n) + 0.5) / n * alive.size).astype(int)
        return np.maximum(1.0, alive[pick])

    def longest(self, fraction: float) -> np.ndarray:
        """The representative lengths of the longest ``fraction`` of responses (ascending)."""
        f = min(1.0, max(0.0, float(fraction)))
        k = int(math.ceil(f * self.lengths.size - 1e-9)) if f > 0 else 0  # one sample left counts
        return self.lengths[self.lengths.size - k:] if k > 0 else np.zeros(0)


# the calibration folder changed: what was read from it is stale
datadir.on_change(_lengths_table.cache_clear, tool_latencies_s.cache_clear, grouped_quantiles.cache_clear, hardest_group.cache_clear)
