"""Response lengths refitted from telemetry: is the declared distribution still the one the job generates, and if
not, which base distribution reproduces what it does generate.

A job declares its response-length distribution (``WorkloadSpec.lengths``); the planner plans on it. The rollout
then shows the truth: every finished response's length. Two steps, both on those observed lengths:

* **Test** (:func:`lengths_differ`): the two-sample Kolmogorov-Smirnov statistic between the observed lengths and
  lengths drawn from the declared workload by the simulator's own generator (``sample_grouped``: base distribution
  times a per-prompt difficulty factor, clipped at ``max_response_tokens``) on seeds the runs never use. The
  samples of one GRPO group are correlated (one difficulty factor), so each sample's effective size is its number
  of *groups*, not of responses (conservative: the design effect is at most the group size). The declared
  distribution is rejected when ``D > c(alpha) sqrt((n + m) / (n m))`` with ``c(alpha) = sqrt(-ln(alpha / 2) / 2)``.
* **Refit** (:func:`refit_lengths`): the observed lengths are base x difficulty, clipped: ``log L = log B + log F``
  with ``log F ~ N(0, spread^2)`` independent of ``B``. The base's log-quantiles are the observed ones shrunk
  towards their median by ``k = sqrt(1 - spread^2 / s^2)``, ``s`` the observed robust log-spread ((p84 - p16) / 2),
  which removes the difficulty's variance and keeps the shape (skew, a second mode) of what was observed.
  Observed quantiles at the cap stay at the cap. The result is a ``table`` distribution (inverse CDF on a
  uniform grid), what :mod:`estimators.traces` makes from a user's trace.

``tests/estimators/test_length_refit.py`` draws from distributions the refit does not know (log-normal with other
sigmas, a ServeGen client, a two-mode mixture) and checks that the refit, pushed back through the generator,
is not told apart from fresh draws of the truth, while the declared one is.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from estimators.lengths import LengthDistribution, sample_grouped

REFIT_ALPHA = 1e-3  # the test's level: a correct declaration is rejected about once in a thousand boundaries
REFERENCE_SEED = 31_000  # the reference draws' seeds (the runs use 0, 1, ...; the planner's start search 20,000+)
GRID = 201  # points of the refitted inverse CDF
REFINE_PASSES = 12  # quantile-ratio corrections after the shrink
REFINE_DRAWS = 20_000


def declared_lengths(workload, n_samples: int, seed: int = REFERENCE_SEED) -> np.ndarray:
    """At least ``n_samples`` response lengths (tokens) the declared ``workload`` generates, by the simulator's own
    generator: whole iterations' worth (``n_prompts`` x ``group_size``), rows are groups."""
    dist = replace(workload.lengths, max_tokens=workload.max_response_tokens)
    per = workload.n_prompts * workload.group_size
    reps = max(1, math.ceil(n_samples / per))
    rng = np.random.default_rng(seed)
    g = max(1, workload.group_size)
    return np.concatenate([sample_grouped(dist, workload.n_prompts, g, rng, workload.prompt_spread).reshape(-1, g)
                           for _ in range(reps)]).astype(float)


def _ks(a: np.ndarray, b: np.ndarray) -> float:
    a, b = np.sort(a), np.sort(b)
    x = np.concatenate([a, b])
    return float(np.max(np.abs(np.searchsorted(a, x, side="right") / a.size - np.searchsorted(b, x, side="right") / b.size)))


def lengths_differ(observed: np.ndarray, groups: int, workload, alpha: float = REFIT_ALPHA) -> dict:
    """The test above: ``{"differ", "ks", "critical", "groups", "reference_groups", "reference_mean"}`` for ``observed``
    lengths from ``groups`` GRPO groups against the declared ``workload`` (``reference_mean``: the declared draws' mean)."""
    obs = np.asarray(observed, dtype=float).ravel()
    ref = declared_lengths(workload, max(4 * obs.size, 2000))
    if obs.size == 0 or groups < 1:
        return {"differ": False, "ks": 0.0, "critical": math.inf, "groups": int(groups), "reference_groups": 0,
                "reference_mean": float(ref.mean())}
    n, m = float(groups), float(ref.shape[0])
    crit = math.sqrt(-math.log(alpha / 2.0) / 2.0) * math.sqrt((n + m) / (n * m))
    d = _ks(obs, ref.ravel())
    return {"differ": bool(d > crit), "ks": d, "critical": crit, "groups": int(groups), "reference_groups": int(m),
            "reference_mean": float(ref.mean())}


def refit_lengths(observed: np.ndarray, spread: float, max_tokens: float) -> LengthDistribution:
    """The base distribution (``table``) that, times the difficulty factor ``exp(N(0, spread^2))`` and clipped at
    ``max_tokens``, reproduces the ``observed`` lengths (the module docstring's refit)."""
    obs = np.maximum(1.0, np.asarray(observed, dtype=float).ravel())
    if obs.size < 2:
        raise ValueError(f"refitting response lengths needs at least 2 observed lengths, got {obs.size}")
    p = np.linspace(0.0, 1.0, GRID)
    q = np.quantile(obs, p)
    lq = np.log(q)
    mid = float(np.median(np.log(obs)))
    lo, hi = np.quantile(np.log(obs), [0.1587, 0.8413])
    s = max(1e-9, (hi - lo) / 2.0)
    k = math.sqrt(max(0.05, 1.0 - spread ** 2 / s ** 2))
    base = np.exp(mid + k * (lq - mid))
    at_cap = q >= max_tokens - 0.5
    base[at_cap] = max_tokens
    base = np.maximum.accumulate(np.clip(base, 1.0, max_tokens))
    # refinement: push the base through the generator (fixed seed) and correct each quantile by the ratio of the
    # observed to the regenerated one; the shrink is exact for a log-normal base, this fixes the rest (two modes)
    rng = np.random.default_rng(REFERENCE_SEED + 1)
    u = rng.random(REFINE_DRAWS)
    f = np.exp(rng.normal(0.0, spread, size=REFINE_DRAWS)) if spread > 0 else np.ones(REFINE_DRAWS)
    f /= np.median(f)
    for _ in range(REFINE_PASSES):
        gen = np.minimum(np.interp(u, p, base) * f, max_tokens)
        ratio = q / np.maximum(1.0, np.quantile(gen, p))
        nb = np.where(at_cap, max_tokens, base * ratio)
        base = np.maximum.accumulate(np.clip(nb, 1.0, max_tokens))
    return LengthDistribution(kind="table", table=tuple(float(round(v, 1)) for v in base), max_tokens=float(max_tokens))
