"""ExecutorTarget's number fields refuse booleans (the shared fields of estimators.fields)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from executor.faultlib import base_body
from executor.target import ExecutorTarget


@pytest.mark.parametrize("path, value", [(("nodes", 0, "gpus"), True), (("nodes", 0, "dram_gb"), False)])
def test_a_boolean_is_not_a_number(path, value):
    body = base_body()
    body[path[0]][path[1]][path[2]] = value
    with pytest.raises(ValidationError) as exc:
        ExecutorTarget.model_validate(body)
    err = exc.value.errors()[0]
    assert err["loc"] == path
    assert f"{str(value).lower()} is a boolean, not a number" in err["msg"]


def test_numbers_pass_unchanged():
    body = base_body()
    body["nodes"][0]["gpus"], body["nodes"][0]["dram_gb"] = 4, 512
    node = ExecutorTarget.model_validate(body).nodes[0]
    assert (node.gpus, node.dram_gb) == (4, 512.0) and isinstance(node.dram_gb, float)
