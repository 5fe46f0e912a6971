"""Group placement (Weave): co-execution groups, their pools, members and node pins at least $/h.

Sets
    J jobs; T GPU types; K configurations k = (p, n_R, q, n_T): a rollout pool of n_R nodes of
    type p and a training pool of n_T nodes of type q (the pool sizes the jobs' tables name);
    G groups (each has one configuration and a set of members).

Parameters (``instance.PlacementInstance``, units in the names)
    a_kj rollout seconds of j on k's rollout pool; b_kj training seconds on k's training pool;
    s_kj weight-sync seconds; sr_kj, st_kj warm-switch seconds of a rollout / training node
    that changes member to j (capped: sr <= b + s, st <= a; 0 in the tables by default);
    slo_j seconds per iteration; w_j host DRAM per rollout node;
    S_j training state (host DRAM over the training pool); D_p host DRAM per node of type p;
    g_p GPUs per node; price_p $ per GPU-hour; cap_p nodes of type p; mu $/h per moved job.

Decisions
    the groups: members M_g, configuration k_g, round-robin order, node pins (every member on
    every node of its group's pools in the plans the solvers build).

Objective
    min sum_g c_{k_g} + mu (#jobs moved from their current group) + P (#jobs left unplaced),
    c_k = n_R g_p price_p + n_T g_q price_q, P = 10 max_k c_k + 1.

Constraints
    slo       the cycle time of every member (``cycle.py``: the max cycle ratio of the group's
              event graph; in groups of two or more its ring arcs carry the warm switches)
              <= its SLO; on whole pools this is exactly
              max(sum_M (a + sr), sum_M (b + s + st), max_M (a + b + s)) <= min_M slo
              for |M| >= 2, and a + b + s <= slo for a lone member (no switch); the caps make
              the first form hold for |M| = 1 too, so no row depends on the group's size
    dram      sum_M w <= D_p on each rollout node; sum_M S / n_T <= D_q on each training node
    capacity  sum_g (nodes of type t in k_g) <= cap_t
    cover     every job in exactly one group (or unplaced, explained by ``explain.py``)

Linearisations are per model: ``milp.py`` (big-M rows switched by the configuration binaries,
the group's SLO limit as a variable bounded by each member's SLO), ``cpsat.py`` (enforcement
literals), ``colgen.py`` (feasibility inside the patterns, checked by pricing).

Modules: ``instance`` (the numbers), ``cycle`` (the one definition of cycle time), ``evaluate``
(configurations and the closed form), ``greedy`` (Weave's moves: baseline, warm start,
admission), ``colgen``/``master``/``pricing`` (pattern model), ``milp``, ``cpsat`` and
``compact`` (compact models), ``check`` (solver-free checker), ``plan`` (plan body), ``explain``,
``solve`` (one entry point), ``generate`` and ``bench`` (benchmark).
"""

from formulation.placement.instance import PlacementInstance, PlacementJob, PoolType  # noqa: F401
