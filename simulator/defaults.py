"""Defaults of the dynamic policy's tail trigger, one value each for every decision function and command that takes
them (``planner simulate --window-s``, ``planner realloc --decision completion --hold-s``, the simulator's threshold
baseline, the reallocation planner's and the completion decision's triggers), so that the same snapshots fire the
same trigger wherever the decision runs; and the sizes of a plan's simulation (``planner simulate --plan``,
:mod:`planner.sim.planrun`), which bound its ``--replications`` and ``--iterations``. No imports: the commands read
it while building their argument parsers."""

WINDOW_S = 4.0  # T: seconds more than theta of the rollout engines must stay below U_low before the trigger fires

# planner simulate --plan (planner.sim.planrun.simulate_plan)
PLAN_SAMPLES = 6  # simulated iterations (request-level rollouts) per member and replication
PLAN_MAX_DRAWS = 100  # seeds per member: CHECK_SEED_BASE + 1000 seed + 100 member + k, k < 100
PLAN_MAX_REPLICATIONS = PLAN_MAX_DRAWS // PLAN_SAMPLES  # 16 replications of PLAN_SAMPLES draws each
PLAN_SKIP = 4  # warm-up meta-iterations of a group left out of its cycle time
PLAN_MIN_ITERATIONS = 2 * PLAN_SKIP  # meta-iterations of a group at least: as many measured as warm-up ones
PLAN_ITERATIONS = 24  # meta-iterations of a group by default
