"""One module per ``planner`` sub-command (see :mod:`planner.cli`)."""
