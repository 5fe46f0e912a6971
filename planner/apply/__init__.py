"""Plans to the executor's target state, where that needs the scenario (the executor never imports
``planner``: DESIGN's dependency direction is planner → executor).

* :mod:`planner.apply.layout` — a placed job's running components (engines, trainer ranks, the
  others its algorithm has), named as its telemetry names them;
* :mod:`planner.apply.placement` — a ``PlacementPlan`` (or the daemon's placement) as an
  ``ExecutorTarget``: each group's reservations of its pool nodes, each member's components and
  resident state;
* :mod:`planner.apply.documents` — reading any plan document the executor applies, and its digest;
* :mod:`planner.apply.precheck` — the check every plan passes before it is applied (as validate-plan).

The reallocation adapter needs no scenario and stays in the executor
(:mod:`executor.adapters.plans`).
"""
