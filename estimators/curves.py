"""Concave piecewise-linear throughput curves, fitted from profile points and refined online.

A component's throughput as a function of its GPUs, ``f(g)``, is modelled as concave and
non-decreasing (diminishing returns: DynaRL's "dynamic" components such as rollout) or linear
("static" components such as a trainer whose step time scales with data parallelism). Concavity
is what lets the reallocation MILP maximise ``min_s f_s(g_s)`` with the curve written as the
minimum of its segments' lines (no binaries for the curve itself).

Fitting (:func:`fit_concave`): breakpoints at the distinct profiled ``g`` (plus 0, where f = 0);
values by least squares subject to concavity and monotonicity — the slopes between consecutive
breakpoints must be non-increasing and non-negative — solved as a weighted isotonic regression on
the slopes (pool-adjacent-violators), which is exact for one point per breakpoint.

Online refinement (:class:`OnlineCurve`): recursive least squares (RLS, forgetting factor λ) on
the curve's values at the breakpoints, with the observation written as a linear interpolation
between the two neighbouring breakpoints (hat-function basis); after every update the values are
re-projected onto concave and non-decreasing. Every prediction before an update is logged with
its realised value so the prediction error (MAPE, and the last residuals) can be reported.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


def _pava_nonincreasing(y: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Weighted least-squares fit of a non-increasing sequence (pool adjacent violators)."""
    vals: list[float] = []
    wts: list[float] = []
    cnt: list[int] = []
    for yi, wi in zip(y, w):
        vals.append(float(yi))
        wts.append(float(wi))
        cnt.append(1)
        while len(vals) > 1 and vals[-2] < vals[-1]:
            v2, w2, c2 = vals.pop(), wts.pop(), cnt.pop()
            v1, w1, c1 = vals.pop(), wts.pop(), cnt.pop()
            wt = w1 + w2
            vals.append((v1 * w1 + v2 * w2) / wt)
            wts.append(wt)
            cnt.append(c1 + c2)
    out = []
    for v, c in zip(vals, cnt):
        out.extend([v] * c)
    return np.asarray(out)


def project_concave(xs: np.ndarray, ys: np.ndarray, y0: float = 0.0) -> np.ndarray:
    """Closest (in slope space) concave, non-decreasing values on breakpoints ``xs`` starting at ``y0``."""
    xs = np.asarray(xs, dtype=float)
    ys = np.asarray(ys, dtype=float)
    xfull = np.concatenate([[0.0], xs]) if xs[0] > 0 else xs
    yfull = np.concatenate([[y0], ys]) if xs[0] > 0 else ys.copy()
    dx = np.diff(xfull)
    slopes = np.diff(yfull) / dx
    slopes = np.maximum(0.0, _pava_nonincreasing(slopes, dx))
    fitted = yfull[0] + np.concatenate([[0.0], np.cumsum(slopes * dx)])
    return fitted[1:] if xs[0] > 0 else fitted


@dataclass
class ConcaveCurve:
    """Concave, non-decreasing piecewise-linear ``f(x)`` through ``(xs[i], ys[i])``, ``f(0) = 0``."""

    xs: np.ndarray
    ys: np.ndarray
    extrapolate: bool = False  # beyond the last breakpoint: flat (False) or last slope (True)

    def __post_init__(self) -> None:
        self.xs = np.asarray(self.xs, dtype=float)
        self.ys = np.asarray(self.ys, dtype=float)

    def __call__(self, x):
        x = np.asarray(x, dtype=float)
        xs = np.concatenate([[0.0], self.xs])
        ys = np.concatenate([[0.0], self.ys])
        y = np.interp(x, xs, ys)
        if self.extrapolate and len(xs) >= 2:
            slope = (ys[-1] - ys[-2]) / (xs[-1] - xs[-2])
            y = np.where(x > xs[-1], ys[-1] + slope * (x - xs[-1]), y)
        return y

    def segments(self) -> list[tuple[float, float]]:
        """(slope, intercept) of each piece: ``f(x) = min_k slope_k x + intercept_k`` on [0, xs[-1]]."""
        xs = np.concatenate([[0.0], self.xs])
        ys = np.concatenate([[0.0], self.ys])
        out = []
        for i in range(len(xs) - 1):
            s = (ys[i + 1] - ys[i]) / (xs[i + 1] - xs[i])
            out.append((float(s), float(ys[i] - s * xs[i])))
        return out

    def is_concave(self, tol: float = 1e-9) -> bool:
        s = [a for a, _ in self.segments()]
        return all(s[i + 1] <= s[i] + tol * max(1.0, abs(s[i])) for i in range(len(s) - 1)) and all(v >= -tol for v in s)

    def to_dict(self) -> dict:
        return {"gpus": self.xs.tolist(), "throughput": self.ys.tolist()}


def fit_concave(points: list[tuple[float, float]] | np.ndarray) -> ConcaveCurve:
    """Concave non-decreasing least-squares fit through profile points ``(gpus, throughput)``.

    Several points at the same ``gpus`` are averaged first (weight = their count).
    """
    pts = np.asarray(points, dtype=float)
    if pts.ndim != 2 or pts.shape[1] != 2 or len(pts) == 0:
        raise ValueError("points must be a non-empty list of (gpus, throughput) pairs")
    if np.any(pts[:, 0] <= 0):
        raise ValueError("profile points need gpus > 0")
    xs = np.unique(pts[:, 0])
    ys = np.array([pts[pts[:, 0] == x, 1].mean() for x in xs])
    return ConcaveCurve(xs, project_concave(xs, ys))


def linear_curve(per_gpu: float, max_gpus: float) -> ConcaveCurve:
    return ConcaveCurve(np.array([float(max_gpus)]), np.array([per_gpu * max_gpus]), extrapolate=True)


@dataclass
class OnlineCurve:
    """A :class:`ConcaveCurve` refined by recursive least squares from observed throughput."""

    curve: ConcaveCurve
    forgetting: float = 0.98
    prior_var: float = 1.0  # relative prior variance of the breakpoint values
    history: list[tuple[float, float, float]] = field(default_factory=list)  # (gpus, predicted, observed)
    _P: np.ndarray | None = None

    def __post_init__(self) -> None:
        n = len(self.curve.xs)
        scale = max(1.0, float(np.max(np.abs(self.curve.ys)))) if n else 1.0
        self._P = np.eye(n) * self.prior_var * scale**2

    def _basis(self, x: float) -> np.ndarray:
        xs = self.curve.xs
        phi = np.zeros(len(xs))
        if x <= xs[0]:
            phi[0] = x / xs[0]
        elif x >= xs[-1]:
            phi[-1] = 1.0
        else:
            i = int(np.searchsorted(xs, x)) - 1
            t = (x - xs[i]) / (xs[i + 1] - xs[i])
            phi[i], phi[i + 1] = 1.0 - t, t
        return phi

    def predict(self, x: float) -> float:
        return float(self.curve(x))

    def update(self, x: float, observed: float) -> float:
        """Fold one observation in; returns the prediction it was compared with."""
        predicted = self.predict(x)
        self.history.append((float(x), predicted, float(observed)))
        phi = self._basis(x)
        P = self._P
        lam = self.forgetting
        denom = lam + phi @ P @ phi
        gain = P @ phi / denom
        theta = self.curve.ys + gain * (observed - phi @ self.curve.ys)
        self._P = (P - np.outer(gain, phi @ P)) / lam
        self.curve = ConcaveCurve(self.curve.xs, project_concave(self.curve.xs, theta), self.curve.extrapolate)
        return predicted

    def mape(self, last: int | None = None) -> float:
        """Mean absolute percentage error of predictions made before each update."""
        h = self.history[-last:] if last else self.history
        errs = [abs(p - o) / abs(o) for _, p, o in h if abs(o) > 1e-12]
        return float(np.mean(errs)) if errs else 0.0
