"""The completion decision with the start split searched for the dynamic policy
(``CompletionPlannerDecision(start_search="dynamic")``, trainer cap off) on the nine ``reproduce
dynarl-math`` set-ups, seed 0, 2 iterations, as that reproduction runs its dynamic policy; one JSON
line per set-up (mean iteration seconds, moves per iteration, the start chosen).

``python -m benchmarks.realloc.dynamic_start [INDEX ...] [--workers N]`` (indices into
``planner.sim.repro_dynarl.setups()``; all nine by default). Measures what the default would give if
the dynamic start search were made the default; it is not (``results/realloc/dynamic-start-search.md``).
"""

from __future__ import annotations

import argparse
import json
import time
from concurrent.futures import ProcessPoolExecutor


def one(i: int) -> dict:
    from planner.instances.completion import CompletionPlannerDecision as C
    from planner.sim.repro_dynarl import setups
    from planner.sim.repro_jobs import _job_setup, _policy, _run_job, _summary

    defaults = list(C.__init__.__defaults__ or ())
    assert defaults[-2:] in (["static", False], ["dynamic", False]), defaults[-2:]
    defaults[-2] = "dynamic"
    C.__init__.__defaults__ = tuple(defaults)  # start_search="dynamic" for the decision _policy builds
    scenario, label, lengths = setups()[i]
    t0 = time.time()
    sc, setup = _job_setup(scenario, None, lengths)
    keep: list = []
    ms = _run_job(setup, lambda: _policy({"name": "dynamic", "decision": "completion"}, sc), 1, 2, keep)
    out = _summary(ms, 2)
    out.update(label=label, start=keep[0][0].decision.start, wall_s=time.time() - t0)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.realloc.dynamic_start", description=__doc__)
    ap.add_argument("setups", nargs="*", type=int, help="indices into repro_dynarl.setups() (default: all nine)")
    ap.add_argument("--workers", type=int, default=2)
    a = ap.parse_args(argv)
    with ProcessPoolExecutor(a.workers) as ex:
        for r in ex.map(one, a.setups or range(9)):
            print(json.dumps(r), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
