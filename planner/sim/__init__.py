"""Scenario-driven simulator runs: benchmarks (``python -m planner.sim.bench``) and the published
results reproduced (``python -m planner.sim.reproduce``). They live on the planner side because
they read scenarios; the simulator itself never imports the planner."""
