"""The direct YAML writer (planner/yamlemit.py) against PyYAML: whatever it writes, PyYAML's safe
loader reads back as the data it was given, and as the data PyYAML's own dump of it reads back as."""

from __future__ import annotations

import math

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planner import plandoc, yamlemit

# characters that matter to YAML: indicators, quotes, escapes, line breaks, non-ASCII and beyond the BMP
TRICKY = list("abcXYZ019 _-.:/#?&*!|>'\"%@`,[]{}=~<+()$;\\\t\n\r") + ["\x00", "\x85", "\u2028", "é", "\ufeff", "😀"]
strings = st.one_of(
    st.text(alphabet=st.sampled_from(TRICKY), max_size=12),
    st.sampled_from(["yes", "No", "ON", "off", "null", "Null", "~", "", "=", "<<", "1:05", "0x1F", "0o17", "1e3", "1_000", ".inf",
                     "-.5", "2026-12-05", "2026-12-05 10:00:00", "T:job-1", "a: b", "a #b", "- x", "? x", "[x]", " lead", "trail ",
                     "a  b", "fast path", "ends:", ".", "..."]),
    st.text(max_size=20),
)
scalars = st.one_of(strings, st.integers(min_value=-(2**70), max_value=2**70), st.booleans(), st.none(),
                    st.floats(allow_nan=False))
keys = st.one_of(strings, st.text(min_size=1, max_size=5))
data = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(keys, inner, max_size=4)),
                    max_leaves=25)


def _pyyaml(d) -> str:
    return yaml.dump(d, Dumper=plandoc._Dumper, sort_keys=False, default_flow_style=False, width=100)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data)
def test_every_document_reads_back_as_its_data_and_as_pyyaml_reads_its_own(d):
    text = yamlemit.dumps(d)
    assert yaml.safe_load(text) == d, text
    assert yaml.safe_load(text) == yaml.safe_load(_pyyaml(d)), text


@pytest.mark.parametrize("s", ["yes", "null", "~", "", "=", "1:05", "0x1F", "1.5e+3", "1_000", "2026-12-05", " lead", "trail ", "a: b",
                               "a #b", "-x", "? x", "multi\nline", "😀", "\x00", "ends:", "a :b", "...", "---", "... x"])
def test_strings_yaml_would_read_otherwise_are_quoted(s):
    text = yamlemit.dumps({"k": s})
    assert text.startswith('k: "'), text
    assert yaml.safe_load(text) == {"k": s}


@pytest.mark.parametrize("s", ["fast path", "T:job-00354", "a100-0", "rl-planner 0.1.0", "needs 2695.1 GB (of DRAM), 50%; x=1"])
def test_plain_words_stay_plain(s):
    assert yamlemit.dumps({"k": s}) == f"k: {s}\n"


@pytest.mark.parametrize("x", [1e-05, 1e300, -1e-300, 0.1, 5.5, -0.0, 123456789.125, math.inf, -math.inf])
def test_floats_are_written_as_pyyaml_writes_them(x):
    assert yamlemit.dumps({"x": x}) == _pyyaml({"x": x})


def test_nested_layout_is_pyyamls_block_style():
    d = {"a": 1, "b": {"c": [1, {"d": None, "e": [[], {}]}, [2, 3]], "f": {}}, "g": [], "h": [{"i": True}]}
    assert yamlemit.dumps(d) == _pyyaml(d)


def test_what_it_cannot_write_falls_back_on_pyyaml():
    with pytest.raises(TypeError):
        yamlemit.dumps({"k": (1, 2)})
    with pytest.raises(TypeError):
        yamlemit.dumps({"x" * 129: 1})
    long_key = {"x" * 129: [1, 2]}
    assert yaml.safe_load(plandoc.dumps_yaml(long_key)) == long_key


def test_a_plan_document_reads_back_as_pyyamls(tmp_path):
    from tests.conftest import run_cli

    out = tmp_path / "p.yaml"
    r = run_cli("plan", "scenarios/weave-micro.yaml", "--out", str(out))
    assert r.returncode == 0, r.stderr
    text = out.read_text()
    d = yaml.safe_load(text)
    assert d["kind"] == "PlacementPlan" and d["body"]["groups"]
    assert yaml.safe_load(_pyyaml(d)) == d
    assert text == yamlemit.dumps(d)  # the file is this writer's
    v = run_cli("validate-plan", "scenarios/weave-micro.yaml", str(out))
    assert v.returncode == 0, v.stdout + v.stderr


@pytest.mark.parametrize("d", ["...", "---", "... x", "--- x", {"... x": 1}, {"k": "..."}, ["---"]])
def test_document_markers_read_back_at_the_top_level_and_inside(d):
    """Regression (a hypothesis example under load): the top-level string "..." was written plain, which
    PyYAML reads as the document's end (a parse error)."""
    assert yaml.safe_load(yamlemit.dumps(d)) == d
