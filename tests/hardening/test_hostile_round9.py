"""Round 9: the code of the last sessions from outside (plan --slo-curve, admit's own-sized joins,
realloc snapshots, the daemon's health). Each refusal: exit 2 (HTTP 4xx), the field, file or option
named, no traceback, nothing written."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from tests.hardening.test_hostile_inputs import run_inprocess
from tests.hardening.test_hostile_round3 import _refused

ROOT = Path(__file__).resolve().parents[2]
TINY_1 = ROOT / "scenarios" / "ci" / "tiny-1job.yaml"


def _two_alike(tmp_path: Path) -> Path:
    """Two jobs of one spec on two nodes, each on an SLO of its solo cycle: one is placed, the other cannot be."""
    d = yaml.safe_load(TINY_1.read_text())
    job = d["jobs"][0]
    job.pop("duration_s", None)
    job["slo"] = {"ratio_to_solo": 1.0}
    d["name"] = "two-alike"
    d["jobs"] = [{**copy.deepcopy(job), "name": "a"}, {**copy.deepcopy(job), "name": "b"}]
    p = tmp_path / "two-alike.yaml"
    p.write_text(yaml.safe_dump(d, sort_keys=False))
    return p


def test_a_refused_plan_leaves_no_slo_curve_plot(tmp_path):
    """``plan --slo-curve --slo-curve-plot PNG`` drew the curve before the unplaced job refused the
    plan (exit 2, "no plan written"): the PNG was written (an earlier one replaced) without a plan."""
    s = _two_alike(tmp_path)
    png = tmp_path / "curve.png"
    png.write_bytes(b"the previous curve")
    rc, output, _cpu, rss = run_inprocess(["plan", str(s), "--slo-curve", "--slo-curve-plot", str(png), "--time-limit", "30",
                                           "-o", str(tmp_path / "p.yaml")])
    _refused(rc, output, rss, "job b", "no plan written")
    assert png.read_bytes() == b"the previous curve"
    assert not (tmp_path / "p.yaml").exists()


@pytest.mark.parametrize("target", ["/dev/full", "/proc/curve.png"], ids=["device-full", "folder-unwritable"])
def test_an_unwritable_slo_curve_plot_is_refused_naming_the_option(target, tmp_path):
    """The curve was drawn with ``savefig(path)`` itself: a folder it cannot write into was
    ``internal error: FileNotFoundError`` / ``PermissionError`` (exit 1), and a write that fails
    (/dev/full) passed silently with exit 0. It goes through safewrite now, as --plot does."""
    if not Path(target).parent.exists():
        pytest.skip(f"no {Path(target).parent} here")
    rc, output, _cpu, rss = run_inprocess(["plan", str(TINY_1), "--slo-curve", "--slo-curve-plot", target, "--time-limit", "30",
                                           "-o", str(tmp_path / "p.yaml")])
    _refused(rc, output, rss, "--slo-curve-plot")
    assert not (tmp_path / "p.yaml").exists()


def test_the_slo_curve_plot_is_drawn_and_said(tmp_path):
    png = tmp_path / "curve.png"
    rc, output, _cpu, _rss = run_inprocess(["plan", str(TINY_1), "--slo-curve", "--slo-curve-plot", str(png), "--time-limit", "30",
                                            "-o", str(tmp_path / "p.yaml")])
    assert rc == 0, output[-2000:]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"cost-SLO curve drawn to {png}" in output
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temporary file left
