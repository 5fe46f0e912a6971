"""Number fields the input schemas share (pydantic): an int, a float, neither of them a boolean.

To Python a boolean is an int (``True == 1``), so a plain ``int`` field takes ``true`` from YAML or
JSON as 1. A count, size or rate written as ``true``/``false`` is a mistake, never a number: these
fields refuse it, saying so.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator


def not_a_bool(v: Any) -> Any:
    """``v`` unchanged unless it is a boolean (then a ValueError for pydantic to report)."""
    if isinstance(v, bool):
        raise ValueError(f"{str(v).lower()} is a boolean, not a number")
    return v


def a_number(v: Any) -> Any:
    """``v`` unchanged unless it is a boolean or a string (then a ValueError for pydantic to report): for inputs that
    are machine-written JSON (telemetry), where a quoted number is a writer's bug, not a number."""
    v = not_a_bool(v)
    if isinstance(v, (str, bytes)):
        raise ValueError(f"{v!r} is a string, not a number: write the number without quotes")
    return v


Int = Annotated[int, BeforeValidator(not_a_bool)]
Real = Annotated[float, BeforeValidator(not_a_bool)]
NumInt = Annotated[int, BeforeValidator(a_number)]  # neither a boolean nor a string
NumReal = Annotated[float, BeforeValidator(a_number)]
