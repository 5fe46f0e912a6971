"""The replanning daemon: a loop of numbered phases on snapshots, a SQLite state, an HTTP API.

Modules, by what they hold:

* ``lifecycle``: job states and the table of legal transitions;
* ``store``: the SQLite state (jobs, events, telemetry, plans, decisions, lease);
* ``lease``: the one-applier lease with a fencing epoch;
* ``clock``: wall, virtual and manual clocks (injected, never read directly);
* ``config``: the daemon's settings;
* ``ports``: the four seams (place one job, re-optimise, decide a reallocation, apply a target)
  and the values that cross them; ``adapters/`` plugs planners and executors into them;
* ``estimates``: phase 2, drift of measured phase times and the predictor error;
* ``gate``: keep a change only if its gain beats its migration cost; ``ratelimit``: churn budget;
* ``cycle``: the numbered phases; ``service``: the process (loop, heartbeat, HTTP, signals);
* ``api``: the FastAPI app; ``metrics``: Prometheus; ``bench``: the load test.
"""
