"""Write Weave-like multi-job trace scenarios (beside the Pollux-derived ones of generate_traces.py).

    python scenarios/generate_weave_traces.py [--jobs 200] [--days 14] [--seed 7]

The job mix follows what Weave reports of its production RL post-training jobs (Weave, section
"Workload characterisation" and the evaluation's production trace):

* models of **3B-32B** parameters (here Qwen2.5 3B, 7B, 14B, 32B, weights 4:3:2:1, smaller jobs
  more common);
* response limits of **4K-32K** tokens (``max_response_tokens`` drawn in {4096, 8192, 16384,
  32768}; a limit is doubled while no batch gives the rollout/training ratio below, so with these
  models the drawn jobs end at 16K and 32K);
* **multi-turn** rollouts (2-4 turns with tool calls for 60% of the jobs) that take **3-4x** the
  training phase: the generator checks each drawn job's solo phases with the project's own phase
  model (:mod:`simulator.phasetimes`, sampled lengths) and redraws the batch until the rollout is
  3-4x training and both phases last **50-900 s** (Weave: phases of tens of seconds to ~15 min);
* SLOs of **1-2x** each job's solo runtime (``ratio_to_solo`` uniform in [1.0, 2.0]) on the
  conservative solo iteration (``solver.phase_time_estimate: conservative``, every response at its
  limit: these batches are too large for ``sampled``, which simulates every request of every job
  at compile time; the simulated iterations are shorter, see the reproductions);
* arrivals over **two weeks** (Poisson with a diurnal rate, busier by day) and durations from a
  log-normal (median 12 h, sigma 0.8, at most 4 days), **200 jobs**.

The cluster is the Weave evaluation's kind: H20 nodes for rollout, H800 nodes for training (1 and
2 $/GPU-h in the Pollux scenarios' prices). ``weave-like-200-2w`` is the full trace;
``weave-like-60`` its first 60 arrivals (the reproductions' size: every policy simulated on it
in minutes). The outputs are committed; this script documents how they were made, and
``--check`` verifies that the committed scenarios still satisfy the bounds above.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

# model: (weight, rollout tp, rollout nodes, trainer tp, trainer nodes)
MODELS = {
    "qwen2.5-3b": (4, 1, 1, 2, 1),
    "qwen2.5-7b": (3, 1, 1, 2, 1),
    "qwen2.5-14b": (2, 2, 1, 4, 1),
    "qwen2.5-32b": (1, 4, 2, 8, 2),
}
RESPONSE_LIMITS = (4096, 8192, 16384, 32768)
PHASE_S = (50.0, 900.0)  # each solo phase within (Weave's phase lengths)
ROLLOUT_OVER_TRAIN = (3.0, 4.0)  # multi-turn rollouts 3-4x training (Weave)
SLO_RATIO = (1.0, 2.0)
MULTI_TURN_SHARE = 0.6

from scenarios.generate_traces import HEADER  # noqa: E402  (the Pollux traces' two-pool fleet: one header for both)


def solo_phases(job: dict) -> tuple[float, float]:
    """(rollout, training) seconds of the job on its own pools, expected (sampled lengths)."""
    from planner.instances.common import ClusterView, estimate_job, resolve_gpu_types
    from planner.schema.scenario import Scenario

    sc = Scenario.model_validate({"name": "probe", **HEADER, "jobs": [job], "solver": {"phase_time_estimate": "sampled"}})
    view = ClusterView(sc, resolve_gpu_types(sc))
    est = estimate_job(sc.jobs[0], view, "sampled")
    return float(est.rollout_s["H20"]), float(est.train_s["H800"])


BATCHES = (16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024)


def _job(i: int, model: str, turns: int, limit: int, batch: int, slo: float, arrival_s: float, duration_s: float) -> dict:
    _, rtp, rn, ttp, tn = MODELS[model]
    job: dict = {
        "name": f"{model.split('-')[1]}-{i:03d}",
        "model": model,
        "rollout": {"batch_prompts": batch, "group_size": 8, "max_response_tokens": limit, "tp": rtp, "nodes": rn,
                    "gpu_types": ["H20"]},
        "trainer": {"tp": ttp, "nodes": tn, "gpu_types": ["H800"]},
        "slo": {"ratio_to_solo": slo},
        "arrival_s": round(arrival_s, 1),
        "duration_s": round(duration_s, 0),
    }
    if turns > 1:
        job["rollout"]["turns"] = turns
    return job


def draw_job(i: int, rng: random.Random, arrival_s: float, duration_s: float, probe=solo_phases, cache=None) -> dict:
    """A job of a drawn model, turns and response limit whose batch is the largest with the rollout
    3-4x training and both phases within 50-900 s (the limit doubles, up to 32K, when no batch
    fits; ``_solo`` is None when none does)."""
    cache = {} if cache is None else cache
    names = list(MODELS)
    model = rng.choices(names, weights=[MODELS[m][0] for m in names])[0]
    turns = rng.choice([2, 3, 4]) if rng.random() < MULTI_TURN_SHARE else 1
    limit = rng.choice(RESPONSE_LIMITS)
    slo = round(rng.uniform(*SLO_RATIO), 2)

    def phases(lim: int, batch: int) -> tuple[float, float]:
        key = (model, turns, lim, batch)
        if key not in cache:
            cache[key] = probe(_job(i, model, turns, lim, batch, slo, arrival_s, duration_s))
        return cache[key]

    for lim in [x for x in RESPONSE_LIMITS if x >= limit]:
        best = None
        for batch in BATCHES:  # training grows with the batch faster than the rollout: the ratio falls
            a, b = phases(lim, batch)
            if a > PHASE_S[1] or a / b < ROLLOUT_OVER_TRAIN[0]:
                break
            if b >= PHASE_S[0] and a / b <= ROLLOUT_OVER_TRAIN[1]:
                best = (batch, a, b)
        if best:
            job = _job(i, model, turns, lim, best[0], slo, arrival_s, duration_s)
            job["_solo"] = (round(best[1], 1), round(best[2], 1))
            return job
    job = _job(i, model, turns, limit, 128, slo, arrival_s, duration_s)
    job["_solo"] = None
    return job


def arrivals(n: int, days: float, rng: random.Random) -> list[float]:
    """``n`` arrival times over ``days`` with a diurnal rate (twice as busy at 14:00 as at 02:00):
    uniform draws thinned by the rate, sorted."""
    out: list[float] = []
    span = days * 86400.0
    while len(out) < n:
        t = rng.uniform(0.0, span)
        hour = (t / 3600.0) % 24.0
        if rng.random() < (1.0 + 0.5 * math.cos((hour - 14.0) / 24.0 * 2 * math.pi)) / 1.5:
            out.append(t)
    return sorted(out)


def build(n: int, days: float, seed: int, probe=solo_phases) -> list[dict]:
    rng = random.Random(seed)
    times = arrivals(n, days, rng)
    jobs: list[dict] = []
    cache: dict = {}
    for i, t in enumerate(times):
        dur = min(4 * 86400.0, 12 * 3600.0 * math.exp(rng.gauss(0.0, 0.8)))
        job = draw_job(i, rng, t, dur, probe, cache)
        while job["_solo"] is None:  # a model/turns/limit no batch fits: draw again (counted in the report)
            job = draw_job(i, rng, t, dur, probe, cache)
            job["_redrawn"] = True
        jobs.append(job)
    return jobs


def write(path: Path, name: str, description: str, jobs: list[dict]) -> None:
    clean = [{k: v for k, v in j.items() if not k.startswith("_")} for j in jobs]
    doc = {"name": name, "description": description, **HEADER, "jobs": clean,
           "solver": {"time_limit_s": 60, "phase_time_estimate": "conservative"}}
    text = "# Generated by scenarios/generate_weave_traces.py (Weave's published job mix). Do not edit by hand.\n"
    path.write_text(text + yaml.safe_dump(doc, sort_keys=False, width=120))
    print(f"wrote {path} ({len(jobs)} jobs)")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=200)
    ap.add_argument("--days", type=float, default=14.0)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args(argv)
    jobs = build(args.jobs, args.days, args.seed)
    misses = [j["name"] for j in jobs if j.get("_redrawn")]
    solo = [j["_solo"] for j in jobs if j["_solo"]]
    print(f"{len(jobs)} jobs; phases rollout {min(a for a, _ in solo):.0f}-{max(a for a, _ in solo):.0f} s, training "
          f"{min(b for _, b in solo):.0f}-{max(b for _, b in solo):.0f} s, rollout/training "
          f"{min(a / b for a, b in solo):.2f}-{max(a / b for a, b in solo):.2f}; drawn again (no batch fit the first draw): {len(misses)}")
    desc = (f"{{n}} GRPO jobs after Weave's production mix (3B-32B, 4K-32K response limits, 60% multi-turn, rollout 3-4x "
            f"training, phases 50-900 s), Poisson diurnal arrivals over {args.days:g} days, SLOs 1-2x the conservative solo iteration; "
            "H20 rollout + H800 training.")
    write(HERE / "weave-like-200-2w.yaml", "weave-like-200-2w", desc.format(n=len(jobs)), jobs)
    write(HERE / "weave-like-60.yaml", "weave-like-60", desc.format(n=60) + " The first 60 arrivals of weave-like-200-2w.",
          jobs[:60])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
