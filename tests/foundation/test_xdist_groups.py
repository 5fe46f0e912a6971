"""The suite's grouping under pytest-xdist holds: a module's tests share one worker.

``tests/conftest.py`` marks every test with its module (or ``ray``) as its ``xdist_group``, and
``--dist loadgroup`` (pyproject.toml) sends a group to one worker, so that a module-scoped fixture
(a Ray cluster, three daemon replays) starts once. pytest-xdist 3.8 does that by appending
``@group`` to each node id through ``item._nodeid``, which pytest 9.2 no longer reads: there the
groups were silently ignored, module fixtures ran on both workers (the closed-loop replays twice,
37 s each) and two Ray clusters could run at once. pyproject.toml keeps pytest below 9.2; this test
fails if the grouping is lost again.
"""

from __future__ import annotations

import pytest


def test_a_module_is_one_xdist_group(request):
    if not getattr(request.config, "workerinput", None) or not request.config.getvalue("loadgroup"):
        pytest.skip("not under `-n N --dist loadgroup` (e.g. `-n 0`): nothing is grouped")
    nodeid = request.node.nodeid
    assert nodeid.endswith("@tests/foundation/test_xdist_groups.py"), (
        f"node id {nodeid!r} carries no xdist group: pytest-xdist's loadgroup no longer sees the markers "
        "tests/conftest.py sets (pytest 9.2 with pytest-xdist 3.8 did this); keep pytest below the version that broke it")
