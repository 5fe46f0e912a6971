"""A scenario is read and parsed once per command: the document kind check (planner/dockind.py)
hands the document it parsed to the scenario loader (issue 14)."""

from __future__ import annotations

import pytest

from planner import cli, safeload
from planner.dockind import SCENARIO, sniff
from planner.schema import load_scenario
from tests.conftest import SCENARIOS

TINY = str(SCENARIOS / "ci" / "tiny-2jobs.yaml")
OVERLAY = SCENARIOS / "dynarl" / "math-7b-64gpu.yaml"  # include: a base scenario


@pytest.fixture
def parsed(monkeypatch) -> list[str]:
    """The file names safeload parses YAML from, in order."""
    seen: list[str] = []
    real = safeload.parse_yaml

    def counting(text, filename="<input>", **kw):
        seen.append(filename)
        return real(text, filename, **kw)

    monkeypatch.setattr(safeload, "parse_yaml", counting)
    return seen


@pytest.mark.parametrize("argv", [["validate", TINY], ["estimate", TINY], ["plan", TINY, "--backend", "greedy"]])
def test_each_command_parses_the_scenario_once(argv, parsed, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # plan writes its default file here
    assert cli.main(argv) == 0, capsys.readouterr().err
    assert parsed.count(TINY) == 1, f"{argv[0]} parsed {TINY} {parsed.count(TINY)} times: {parsed}"


def test_the_sniffed_document_is_the_one_loaded_and_includes_are_still_read(parsed):
    found = sniff(OVERLAY)
    assert found.kind == SCENARIO and found.doc is not None
    n = len(parsed)
    sc = load_scenario(OVERLAY, parsed=found.doc)
    assert str(OVERLAY) not in parsed[n:], "the top file was parsed again"
    assert parsed[n:], "the included base scenario was not read"
    assert sc.model_dump() == load_scenario(OVERLAY).model_dump()  # the same scenario as a fresh read


def test_a_document_of_another_file_is_refused(tmp_path):
    found = sniff(TINY)
    assert found.doc is not None
    with pytest.raises(ValueError, match="not"):
        load_scenario(OVERLAY, parsed=found.doc)


def test_json_is_not_handed_on_without_line_numbers(tmp_path):
    import json

    p = tmp_path / "s.json"
    p.write_text(json.dumps(safeload.load(TINY).data))
    found = sniff(p)
    assert found.kind == SCENARIO and found.doc is None  # the loader parses it itself, as YAML, with line numbers
