"""In-iteration GPU reallocation (DynaRL): donors, candidates, max-min throughput with migration
cost, migration kinds, and the multi-turn request priority policy of the rollout router.

Modules (see ``docs/realloc.md`` for the whole path):

* ``telemetry``  the snapshot a running job posts (per worker and per component);
* ``graph``      components as nodes (dynamic/static, interruptible, workers), dataflow edges;
* ``donors``     stateful donor detector (θ, U_low fixed or a percentile of history, T);
* ``context``    the numbers a decision needs besides the snapshot (curves, units, links);
* ``candidates`` candidate allocations per component and the numbers-only ``instance``;
* ``migrations`` Workload / P2P / Reboot steps with duration and bytes, capacity-safe order;
* ``reduce``     exact reduction before solving;
* ``bnb``        exact branch and bound on the bottleneck level (the default backend);
* ``milp`` (highspy, and Pyomo as reference), ``cpsat``, ``dp`` (exact single-pool oracle);
* ``check``      the solver-free checker; ``plan`` the ``ReallocPlan`` body;
* ``decide``     ``decide(snapshot, context, options, detector) -> Decision``, in-process;
* ``priority``   request priority queue (tool calls done, cached prefix, age bound) and FIFO;
* ``bench``      decision-latency benchmark (``python -m formulation.realloc.bench``).

Objective: maximise ``min_s f_s(g_s) − Σ_s m_s`` (pipeline throughput minus migration cost)
subject to node capacity, TP granularity and GPU-type rules; commit only when it beats the current
throughput by a margin.
"""
