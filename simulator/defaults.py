"""Defaults of the dynamic policy's tail trigger, one value each for every decision function and command that takes
them (``planner simulate --window-s``, ``planner realloc --decision completion --hold-s``, the simulator's threshold
baseline, the reallocation planner's and the completion decision's triggers), so that the same snapshots fire the
same trigger wherever the decision runs. No imports: the commands read it while building their argument parsers."""

WINDOW_S = 4.0  # T: seconds more than theta of the rollout engines must stay below U_low before the trigger fires
