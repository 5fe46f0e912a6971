"""Capacity planning (what-if): placement in co-execution groups with the fleet as a decision.

Sets
    J jobs (job classes ``c``: jobs with identical tables, DRAM and SLO, ``d_c`` jobs each);
    T GPU types; K configurations k = (p, n_R, q, n_T) (a rollout pool of n_R nodes of type p,
    a training pool of n_T nodes of type q); patterns P (a configuration and class counts
    ``m_cp`` forming a feasible group, :mod:`formulation.placement.evaluate`).

Parameters (``instance.CapacityInstance``, units in the names)
    everything of the placement instance (phase seconds, SLOs, host DRAM, GPUs per node, prices);
    P_t $/h of a node of type t (GPUs per node x $ per GPU-hour); o_t nodes owned today;
    L_t the availability: the most nodes of t the fleet may have (owned + the most that can be
    bought); B an optional budget on the fleet's $/h; n_tk nodes of t in configuration k;
    c_k = sum_t P_t n_tk.

Decisions
    y_t >= 0 integer: nodes of t to buy (the fleet has o_t + y_t); lambda_p >= 0 integer: groups
    with pattern p; u_c >= 0: jobs of class c left unplaced (penalised; a served forecast has
    none).

Objective
    min  sum_t P_t o_t  +  sum_t P_t y_t  (+ Pen sum_c u_c)
    The owned nodes are paid for whether they serve jobs or not: a constant, reported as
    ``owned_cost_per_hour``; only new nodes move the cost.

Constraints (one function or master row group each)
    cover         sum_p m_cp lambda_p + u_c >= d_c                        every job in a group
    availability  sum_p n_tp lambda_p <= L_t                              (master capacity rows)
    fleet         sum_p n_tp lambda_p <= o_t + y_t                        nodes used are in the fleet
    budget        sum_t P_t (o_t + y_t) <= B                              (only with a budget)
    slo, dram     inside the patterns: cycle time (``placement/cycle.py``) of every member within
                  its SLO, resident state within each node's host DRAM

Linearisation (``master.py``)
    y_t = max(0, used_t - o_t) is written with a *credit* w_t in [0, o_t] for the owned nodes in
    use: cost sum_p c_p lambda_p - sum_t P_t w_t with w_t <= sum_p n_tp lambda_p. At an optimum
    w_t = min(o_t, used_t), so the objective is sum_t P_t max(0, used_t - o_t), the $/h of the
    nodes to buy. The budget row is sum_p c_p lambda_p - sum_t P_t w_t <= B - sum_t P_t o_t.
    A pattern's reduced cost is then c_p + (mu - rho + beta P).n_p - pi.m_p, so the placement
    pricing (:mod:`formulation.placement.pricing`) prices it unchanged.

Solution method (``patterns.py``): column generation with the placement pattern model through
its hooks (master, score, dual value, Lagrangian bound, priced configurations), lazy dominance
between configurations, a certified lower bound, optimality proven by enumeration on small
instances; ``solve.py`` adds the Solo-D and colocated deployment styles, ``explain.py`` the
minimum counts, one node fewer and the binding constraints, ``check.py`` the solver-free checker,
``plan.py`` the ``CapacityPlan`` body.
"""

from formulation.capacity.instance import CapacityInstance, ColocatedTimes  # noqa: F401
