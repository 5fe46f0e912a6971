"""Calibrate the engine step overhead and the math-RL length scale against published rollout shapes.

    python -m simulator.calibrate [--out results/simulator] [--seeds 4]

Set-up (DynaRL's 1.5B math RL): DeepSeek-R1-Distill-Qwen-1.5B, 512 prompts x 16 responses, max
28,672 response tokens, 64 engines of one H100 each; response lengths from ServeGen client 66 (the
reasoning-heavy client) times a scale. Targets: longest decode about 260 s and about 95% of the
queries done by 150 s (DynaRL), the last 10% of the requests taking about half of the rollout
(Seer: "up to 50%"). The grid over (overhead ms per step, length scale) is scored by

    ((T - 260) / 13)^2 + ((f150 - 0.95) / 0.015)^2 + ((share - 0.5) / 0.05)^2

averaged over seeds; the table lists the grid's best points and the chosen constants
(:data:`estimators.rollout.ENGINE_STEP_OVERHEAD_MS`, :data:`estimators.rollout.MATH_RL_LENGTH_SCALE`)
with the published figures beside them.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def rollout_shape(overhead_ms: float, scale: float, seed: int, client: str = "66") -> dict:
    from estimators import gpus, models
    from estimators.lengths import LengthDistribution
    from simulator.core import EventLoop
    from simulator.models import engine_model
    from simulator.rollout import EngineSlot, RolloutStage
    from simulator.workload import WorkloadSpec, make_requests

    em = engine_model(models.preset("deepseek-r1-distill-qwen-1.5b"), gpus.get("H100"), 1, overhead_ms=overhead_ms)
    loop = EventLoop(seed)
    reqs = make_requests(WorkloadSpec(512, 16, 512, 28672, LengthDistribution("servegen", client=client, scale=scale)), loop.rng)
    st = RolloutStage(loop, em, [EngineSlot(f"h100-{i // 8}", "H100", 1) for i in range(64)])
    st.start(reqs)
    loop.run()
    ct = np.sort([r.done_s for r in reqs])
    T = float(ct[-1])
    still = [r for r in reqs if r.done_s > T / 2]
    return {"longest_s": T, "f150": float(np.mean(ct <= 150.0)), "share_last10": (T - float(np.quantile(ct, 0.9))) / T,
            "running_mid": len(still) / len(reqs), "engines_mid": len({r.engine for r in still})}


def score(m: dict) -> float:
    return ((m["longest_s"] - 260) / 13) ** 2 + ((m["f150"] - 0.95) / 0.015) ** 2 + ((m["share_last10"] - 0.5) / 0.05) ** 2


def main(argv=None) -> int:
    from estimators import rollout

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(ROOT / "results" / "simulator"))
    ap.add_argument("--seeds", type=int, default=4)
    args = ap.parse_args(argv)
    cmd = "python -m simulator.calibrate " + " ".join(argv if argv is not None else sys.argv[1:])
    grid = []
    for ov in (0.0, 2.0, 2.5, 3.0, 3.5, 4.0, 5.0):
        for sc in (0.6, 0.7, 0.75, 0.8, 0.9):
            ms = [rollout_shape(ov, sc, s) for s in range(args.seeds)]
            mean = {k: float(np.mean([m[k] for m in ms])) for k in ms[0]}
            grid.append({"overhead_ms": ov, "scale": sc, **mean, "score": float(np.mean([score(m) for m in ms]))})
    grid.sort(key=lambda g: g["score"])
    chosen = next(g for g in grid if g["overhead_ms"] == rollout.ENGINE_STEP_OVERHEAD_MS and g["scale"] == rollout.MATH_RL_LENGTH_SCALE)
    mixture = [rollout_shape(rollout.ENGINE_STEP_OVERHEAD_MS, 1.0, s, client=None) for s in range(args.seeds)]
    mix = {k: float(np.mean([m[k] for m in mixture])) for k in mixture[0]}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "calibration.json").write_text(json.dumps({"command": cmd, "grid": grid, "chosen": chosen, "mixture": mix}, indent=2) + "\n")
    L = ["# Calibration: engine step overhead and math-RL lengths", "",
         f"Command: `{cmd}`  ", f"Machine: `{' '.join(os.uname())}`, load average {os.getloadavg()[0]:.2f} "
         "(figures are simulated times: the machine's load does not change them).", "",
         "Set-up: DeepSeek-R1-Distill-Qwen-1.5B, 512 prompts x 16 responses, max 28,672 tokens, 64 single-H100 engines; "
         f"ServeGen client 66 lengths x scale; means over {args.seeds} seeds.", "",
         "| | longest decode (s) | done by 150 s | last 10% share of rollout | running at mid | engines holding at mid |",
         "|---|---:|---:|---:|---:|---:|",
         "| **published** (DynaRL; Seer) | about 260 | about 95% | up to 50% | < 30% | almost all 64 |",
         f"| **chosen**: {chosen['overhead_ms']:g} ms/step, scale {chosen['scale']:g} | {chosen['longest_s']:.0f} | "
         f"{100 * chosen['f150']:.1f}% | {100 * chosen['share_last10']:.0f}% | {100 * chosen['running_mid']:.0f}% | "
         f"{chosen['engines_mid']:.0f} |",
         f"| kernels only (0 ms), scale {chosen['scale']:g} | "
         + " | ".join(_fmt(next(g for g in grid if g["overhead_ms"] == 0.0 and g["scale"] == chosen["scale"]))) + " |",
         f"| ServeGen mixture (scale 1), {rollout.ENGINE_STEP_OVERHEAD_MS:g} ms | " + " | ".join(_fmt(mix)) + " |", "",
         "The kernel model alone cannot produce the published tail (the longest response would take well under 200 s); "
         "the production mixture's tail is too heavy for math reasoning (most requests finish early and the last 10% "
         "take most of the rollout). Best grid points (score as in `simulator/calibrate.py`):", "",
         "| overhead (ms/step) | scale | longest (s) | done by 150 s | last 10% share | score |", "|---:|---:|---:|---:|---:|---:|"]
    for g in grid[:8]:
        L.append(f"| {g['overhead_ms']:g} | {g['scale']:g} | {g['longest_s']:.0f} | {100 * g['f150']:.1f}% | "
                 f"{100 * g['share_last10']:.0f}% | {g['score']:.2f} |")
    rank = grid.index(chosen) + 1
    spread = float(np.std([rollout_shape(rollout.ENGINE_STEP_OVERHEAD_MS, rollout.MATH_RL_LENGTH_SCALE, s)["longest_s"]
                           for s in range(args.seeds)]))
    L += ["", f"The chosen point ranks {rank} of {len(grid)} here; the best points differ by less than the seed-to-seed "
          f"spread (the longest decode alone varies by {spread:.0f} s standard deviation across seeds at the chosen point), "
          "so the grid does not single out one of them; 3 ms/step and 0.75 are round values among them.", "",
          "Tests: `tests/simulator/test_calibration.py` checks the chosen constants within stated tolerances."]
    (out / "calibration.md").write_text("\n".join(L) + "\n")
    print("\n".join(L))
    return 0


def _fmt(m: dict) -> list:
    return [f"{m['longest_s']:.0f}", f"{100 * m['f150']:.1f}%", f"{100 * m['share_last10']:.0f}%",
            f"{100 * m['running_mid']:.0f}%", f"{m['engines_mid']:.0f}"]


if __name__ == "__main__":
    raise SystemExit(main())
