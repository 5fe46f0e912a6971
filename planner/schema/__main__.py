"""``python -m planner.schema [--check]``: write (or check) ``planner/schema/scenario.schema.json``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from planner.schema.scenario import Scenario

SCHEMA_PATH = Path(__file__).with_name("scenario.schema.json")


def generate() -> str:
    schema = Scenario.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = "https://rl-planner.dev/schema/scenario-v1.json"
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    text = generate()
    if "--check" in argv:
        if not SCHEMA_PATH.exists() or SCHEMA_PATH.read_text() != text:
            print(f"{SCHEMA_PATH} is out of date: run python -m planner.schema", file=sys.stderr)
            return 1
        return 0
    SCHEMA_PATH.write_text(text)
    print(f"wrote {SCHEMA_PATH}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
