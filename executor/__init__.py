"""The executor: a plan becomes ordered, capacity-safe, journaled steps on a backend.

* :mod:`executor.state` — observed and target cluster state; :mod:`executor.target` — the
  executor's own input document; :mod:`executor.adapters.plans` — from planner plan bodies;
* :mod:`executor.diff` — ``diff(observed, target)`` → units of steps with causes, or a refusal;
* :mod:`executor.steps` — step kinds and the legal-transition tables;
* :mod:`executor.controller` — carries steps out: journal (:mod:`executor.journal`), rollback,
  resume, fencing, deadlines; :mod:`executor.migrations` — workload, P2P, reboot;
* :mod:`executor.backends` — Ray and the in-process sim; :mod:`executor.workers` — the rollout
  engine, trainer rank, service and coordinator they run;
* :mod:`executor.faultlib` / :mod:`executor.bench` — fault injection and benchmarks.

See docs/executor.md.
"""
