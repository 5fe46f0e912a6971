"""The workers the executor moves: plain classes that the Ray backend runs as actors and the sim
backend runs in-process. They never trust themselves: every side effect goes through the
:class:`~executor.workers.coordinator.Coordinator` with the worker's lease epoch."""
