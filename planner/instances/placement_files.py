"""Numbers-only placement instance files (YAML or JSON): read once, validate, write.

Kept apart from the scenario compiler (:mod:`planner.instances.placement`) so that planning from
an instance file imports neither the estimators nor the scenario schema.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from formulation.placement.instance import PlacementInstance
from planner.errors import Problem, UserError


def read_data(path: str | Path) -> Optional[dict]:
    """The parsed mapping of a YAML/JSON file when it is a placement instance, else None."""
    import json

    p = Path(path)
    try:
        text = p.read_text()
        if p.suffix == ".json":
            data = json.loads(text)
        else:
            import yaml

            data = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except Exception:  # noqa: BLE001 - the scenario loader reports unreadable files properly
        return None
    return data if isinstance(data, dict) and ("pool_types" in data or data.get("kind") == "PlacementInstance") else None


def load_instance(path: str | Path, data: Optional[dict] = None) -> PlacementInstance:
    """A numbers-only instance file (YAML or JSON), with errors that name the field."""
    import json

    import yaml
    from pydantic import ValidationError

    p = Path(path)
    if not p.exists():
        raise UserError(Problem("", f"instance file not found: {p}", "check the path"))
    if data is None:
        try:
            text = p.read_text()
            data = json.loads(text) if p.suffix == ".json" else yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        except (OSError, ValueError, yaml.YAMLError) as exc:
            raise UserError(Problem("", f"cannot read the instance file: {exc}", "write valid YAML or JSON", source=str(p))) from None
    if not isinstance(data, dict):
        raise UserError(Problem("", "a placement instance is a mapping with pool_types and jobs",
                                "see docs/placement.md for the format", source=str(p)))
    data = {k: v for k, v in data.items() if k != "kind"}
    try:
        return PlacementInstance.model_validate(data)
    except ValidationError as exc:
        problems = []
        for err in exc.errors(include_url=False)[:10]:
            loc = ".".join(str(x) for x in err["loc"])
            bad = err.get("input")
            shown = f" (got {bad!r})" if not isinstance(bad, (dict, list)) and bad is not None else ""
            problems.append(Problem(loc, f"{err['msg']}{shown}", "see docs/placement.md for the instance format", source=str(p)))
        raise UserError(problems, title=f"{p}: invalid placement instance") from None


def is_instance_file(path: str | Path) -> bool:
    """Whether a YAML/JSON file is a numbers-only placement instance (has pool_types) rather than a scenario."""
    import json

    import yaml

    p = Path(path)
    try:
        text = p.read_text()
        data = json.loads(text) if p.suffix == ".json" else yaml.safe_load(text)
    except Exception:  # noqa: BLE001 - the scenario loader reports unreadable files properly
        return False
    return isinstance(data, dict) and ("pool_types" in data or data.get("kind") == "PlacementInstance")


def dump_instance(inst: PlacementInstance) -> str:
    import yaml

    data = {"kind": "PlacementInstance", **inst.model_dump(mode="json", exclude_defaults=False)}
    return yaml.safe_dump(data, sort_keys=False, width=120)
