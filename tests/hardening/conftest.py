"""Fixtures the hardening tests share."""

from __future__ import annotations

import pytest
import yaml


@pytest.fixture(scope="module")
def good_plan(tmp_path_factory) -> dict:
    """A PlacementPlan document of ``scenarios/ci/tiny-2jobs.yaml``, made by ``planner plan``, as a mapping."""
    from tests.hardening.test_apply_precheck import TINY, run

    d = tmp_path_factory.mktemp("plan")
    rc, out = run(["plan", TINY, "--out", str(d / "p.yaml")])
    assert rc == 0, out
    return yaml.safe_load((d / "p.yaml").read_text())
