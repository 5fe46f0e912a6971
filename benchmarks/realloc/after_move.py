"""The completion decision's prediction after its move, against the simulation, on one set-up and start split.

    python -m benchmarks.realloc.after_move dynarl/math-32b-128gpu.yaml 108,12,8 [--seed 0] [--every 20]

One iteration of the dynamic policy from the given start (``rollout,reference,trainer`` GPUs; the start search is
skipped): each committed move with its predicted time to the end of training and the simulated one, then every
``--every`` seconds after the first move the predicted ends of the rollout, log-prob inference and training against
the simulated iteration's end and rollout end. What ``results/reproductions/dynarl-math.md``'s after-move column
summarises, stage by stage.
"""

from __future__ import annotations

import argparse


def main(argv=None) -> int:
    import numpy as np

    from formulation.realloc.completion import predict
    from planner.instances.completion import CompletionPlannerDecision
    from planner.sim.repro_jobs import _job_setup
    from simulator.job import JobSim
    from simulator.policies import Policy

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("scenario", help="a scenario under scenarios/, e.g. dynarl/math-32b-128gpu.yaml")
    ap.add_argument("start", help="rollout,reference,trainer GPUs, e.g. 108,12,8")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--every", type=float, default=20.0)
    args = ap.parse_args(argv)
    a = tuple(int(x) for x in args.start.split(","))
    sc, setup = _job_setup(args.scenario)
    dec = CompletionPlannerDecision(sc, choose_start=False, setup=setup)
    dec.start_split(setup)
    log: list = []
    nxt = [0.0]

    def decision(snap, ctx):
        out = dec(snap, ctx)
        if ctx.iteration == 0 and dec.committed and not ctx.at_boundary and ctx.time_s >= nxt[0]:
            nxt[0] = ctx.time_s + args.every
            st = dec._state(ctx, snap)
            p = predict(st, *[np.array([v]) for v in st.current])
            log.append((ctx.time_s, st.current, *(ctx.time_s + float(p[k][0]) for k in ("rollout_s", "reference_s", "completion_s"))))
        return out

    decision.wants_remaining_tokens = True  # type: ignore[attr-defined]
    pol = Policy("dynamic", rollout_gpus=a[0], reference_gpus=a[1], trainer_gpus=a[2], decision=decision)
    it = JobSim(setup, pol, seed=args.seed, iterations=1).run().iterations[0]
    print(f"{args.scenario} from {args.start}, seed {args.seed}: iteration end {it.end_s:.0f} s, rollout end {it.rollout_end_s:.0f} s")
    for r in dec.records:
        if r["committed"] and r["iteration"] == 0:
            left = it.end_s - it.start_s - r["time_s"]
            print(f"move at {r['time_s']:.0f} s {r['current']} -> {r['target']}: predicted {r['completion_s']:.0f} s to go, simulated "
                  f"{left:.0f} s ({r['completion_s'] / left - 1:+.1%})")
    for t, cur, R, F, C in log:
        print(f"t={t:6.0f} s at {cur}: rollout ends {R:6.0f} (simulated {it.rollout_end_s:6.0f}), log-probs {F:6.0f}, "
              f"training {C:6.0f} (simulated {it.end_s:6.0f}, {(C - t) / (it.end_s - t) - 1:+.1%} of what is left)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
