"""Discrete-event simulator of RL post-training iterations on a GPU cluster.

Two speeds:

* a **request-level** model of one job's iterations (:mod:`simulator.job`): rollout engines with
  continuous batching, KV capacity and a prefix cache (:mod:`simulator.engine`), requests with
  real response-length distributions and multi-turn tool calls (:mod:`simulator.workload`), the
  downstream log-prob inference, reward and training stages (:mod:`simulator.stages`), weight
  sync, and the policies: static partition, colocated time sharing, dynamic reallocation driven by
  a decision function fed with telemetry snapshots, request priority, long-tail consolidation;
* a **phase-level** model of many jobs (:mod:`simulator.groups`, :mod:`simulator.trace`):
  co-execution groups running round-robin meta-iterations, Solo-D and colocated baselines, warm
  and cold job switches, arrivals and departures over a multi-week trace.

Time advances by events (:mod:`simulator.core`), never by token ticks.
"""
