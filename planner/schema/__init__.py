"""The scenario schema: one pydantic model tree is the single source of truth.

``scenario.py`` holds the models, ``loader.py`` reads YAML (with line numbers and ``include:``),
``errors.py`` turns validation errors into messages that name the field path, ``checks.py`` runs
the cross-field checks that need the estimators, and ``scenario.schema.json`` is generated from the
models (``python -m planner.schema`` rewrites it; a test fails when it drifts).
"""

from planner.schema.scenario import Scenario  # noqa: F401
from planner.schema.loader import load_scenario  # noqa: F401
