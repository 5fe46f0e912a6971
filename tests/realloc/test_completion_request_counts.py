"""A completion context whose rollout requests do not fit one iteration of the job is refused naming the field (an
outside audit: 40 copies of the 57 open requests of a 384-request job, or 200 copies of the finished samples of its
open groups, were decided on: predicted 26x and 54x longer iterations, and moves committed)."""

from __future__ import annotations

import json

import pytest

from planner.cli import main as cli_main
from tests.realloc.test_completion_context_bounds import OUT_BEFORE, _edit, fired  # noqa: F401 - the module fixture

Q = "components.rollout.requests"
PER_REQUEST = ("engine", "group", "generated", "context", "running", "prompt")


def _times(data: dict, keys, k: int) -> dict:
    reqs = data["components"]["rollout"]["requests"]
    return {f"{Q}.{a}": reqs[a] * k for a in keys}


def _run(fired, tmp_path, capsys, data: dict, refused: bool = True) -> tuple[int, str]:  # noqa: F811
    ctx = tmp_path / "ctx.json"
    ctx.write_text(json.dumps(data))
    out = tmp_path / "decision.json"
    out.write_text(OUT_BEFORE)
    capsys.readouterr()
    rc = cli_main(["realloc", str(fired["snaps"]), "--decision", "completion", "--scenario", str(fired["scenario"]),
                   "--context", str(ctx), "--hold-s", "4", "--json", "--out", str(out)])
    err = capsys.readouterr().err
    if refused:
        assert out.read_text() == OUT_BEFORE, "a refused context must leave --out as it was"
    return rc, err


CASES = {
    "open-requests-x40": (lambda d: _times(d, PER_REQUEST, 40), "context.components.rollout.requests.group",
                          "more than the rollout's pending"),
    "finished-samples-x200": (lambda d: _times(d, ("done_group", "done_length"), 200),
                              "context.components.rollout.requests.done_group", "more than the job's group_size (8)"),
    "on-their-way-x10": (lambda d: _times(d, ("pend_length",), 10), "context.components.rollout.requests.pend_length",
                         "more than the 384 requests an iteration"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_requests_past_the_iteration_exit_2_naming_the_field(fired, tmp_path, capsys, case):  # noqa: F811
    edits, field, why = CASES[case]
    rc, err = _run(fired, tmp_path, capsys, _edit(fired["data"], edits(fired["data"])))
    assert rc == 2 and "Traceback" not in err
    assert field in err and why in err and "Fix:" in err, err


def test_the_simulators_own_context_still_decides(fired, tmp_path, capsys):  # noqa: F811
    rc, err = _run(fired, tmp_path, capsys, fired["data"], refused=False)
    assert rc == 0, err
