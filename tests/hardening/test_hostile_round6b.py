"""Round 6 (b): four of the low-severity gaps the round-5 audits left (docs/security.md). A hand-edited
placement instance whose node-count keys are ``true`` or give one count twice (``1`` and ``"1"``),
a daemon state file whose kv values are of the wrong JSON type (``cycle: "abc"``), a plan whose
``scenario_digest`` is empty or malformed (validate-plan skipped the input check), and ``whatif``
printing the compiler's bound as the limit of a type without ``max_nodes``. Each refusal: exit 2,
the field, key or job named with its fix, no traceback, nothing written."""

from __future__ import annotations

import copy
import json
import sqlite3
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT, run_cli
from tests.hardening.test_apply_precheck import TINY, run
from tests.hardening.test_hostile_inputs import run_inprocess
from tests.hardening.test_hostile_round3 import _refused

INSTANCE = ROOT / "scenarios" / "instances" / "placement-small.yaml"
ROW = "rollout_s: {H20: {1: 220.1, 2: 117.5, 4: 71.1}}"  # the first job's (qwen7b-math) rollout table


# ------------------------------------------------------------------ 1. instance node-count keys
def _yaml_instance(tmp_path: Path, row: str) -> Path:
    text = INSTANCE.read_text()
    assert ROW in text
    path = tmp_path / "inst.yaml"
    path.write_text(text.replace(ROW, row, 1))
    return path


def _json_instance(tmp_path: Path, old: str, new: str) -> Path:
    text = json.dumps(yaml.safe_load(INSTANCE.read_text()))
    assert old in text
    path = tmp_path / "inst.json"
    path.write_text(text.replace(old, new, 1))
    return path


KEY_CASES = {
    # YAML's true was read as 1 node (the model's keys are lax)
    "yaml-true": (lambda p: _yaml_instance(p, "rollout_s: {H20: {true: 220.1, 2: 117.5, 4: 71.1}}"), "the key true", "not a node count"),
    # 1 and '1' made one entry: the last one's seconds, in silence
    "yaml-1-and-text-1": (lambda p: _yaml_instance(p, "rollout_s: {H20: {1: 220.1, '1': 300.0, 2: 117.5, 4: 71.1}}"),
                          "keys 1 and '1'", "1 node(s) twice"),
    "yaml-1.0": (lambda p: _yaml_instance(p, "rollout_s: {H20: {1.0: 220.1, 2: 117.5, 4: 71.1}}"), "the key 1.0", "not a node count"),
    "json-true": (lambda p: _json_instance(p, '"1": 220.1', '"true": 220.1'), "the key 'true'", "not a node count"),
    "json-1-and-space-1": (lambda p: _json_instance(p, '"1": 220.1', '"1": 220.1, " 1": 300.0'), "the key ' 1'", "not a node count"),
    "json-1-and-01": (lambda p: _json_instance(p, '"1": 220.1', '"1": 220.1, "01": 300.0'), "the key '01'", "not a node count"),
}


@pytest.mark.parametrize("case", sorted(KEY_CASES))
def test_an_instance_node_count_key_that_is_true_or_given_twice_is_refused(case, tmp_path):
    make, key, words = KEY_CASES[case]
    path = make(tmp_path)
    out = tmp_path / "p.yaml"
    rc, output, _cpu, rss = run_inprocess(["plan", str(path), "--time-limit", "5", "-o", str(out)])
    _refused(rc, output, rss, "jobs[0].rollout_s.H20", "job 'qwen7b-math'", "rollout_s table", key, words, "Fix:")
    assert not out.exists(), "a plan was written for a refused instance"


def test_the_switch_tables_keys_are_checked_too_and_plain_keys_still_plan(tmp_path):
    data = yaml.safe_load(INSTANCE.read_text())
    data["jobs"][1]["train_switch_s"] = {"H800": {1: 1.9, "1": 2.0}}
    (tmp_path / "sw.json").write_text(json.dumps(data).replace('"1": 2.0', '"true": 2.0'))
    rc, output, _cpu, rss = run_inprocess(["plan", str(tmp_path / "sw.json"), "--time-limit", "5", "-o", str(tmp_path / "p.yaml")])
    _refused(rc, output, rss, "jobs[1].train_switch_s.H800", "job 'qwen7b-code'", "'true'")
    # a JSON instance's keys are text ("1"): read as node counts, as before
    (tmp_path / "ok.json").write_text(json.dumps(yaml.safe_load(INSTANCE.read_text())))
    rc, output, _cpu, _rss = run_inprocess(["plan", str(tmp_path / "ok.json"), "--time-limit", "5", "-o", str(tmp_path / "p.yaml")])
    assert rc == 0, output[-2000:]


# ------------------------------------------------------------------ 2. daemon state values of the wrong JSON type
SCENARIO = ROOT / "scenarios" / "ci" / "tiny-2jobs.yaml"

KV_EDITS = [
    ("cycle", '"abc"', "a whole number >= 0"),
    ("cycle", "true", "a whole number >= 0"),
    ("telemetry_cursor", "-3", "a whole number >= 0"),
    ("clock_s", '"x"', "a number or null"),
    ("last_cycle_at", "[1]", "a number or null"),
    ("cost_usd", "true", "a number"),
    ("migration_usd", "null", "a number"),
    ("realloc_at", '{"a": "soon"}', "job name -> clock seconds"),
    ("sample_mark", '{"a": 1.5}', "job name -> iteration"),
    ("estimates", '{"ratios": {"a": {"rollout": ["x"]}}}', "ratios, factor and errors"),
    ("phase_timer", "[1]", "job name -> {iteration, rollout_end, last_time}"),
    ("phase_timer", '{"a": {"rollout_end": 1}}', "job name -> {iteration, rollout_end, last_time}"),
    ("move_budget", '"x"', "{tokens, updated_at}"),
    ("cluster", '{"at": 0}', "at, backend, nodes and components"),
]


@pytest.fixture(scope="module")
def daemon_state(tmp_path_factory) -> Path:
    """A state file the daemon wrote in two virtual cycles (every kv key the loop keeps is in it)."""
    state = tmp_path_factory.mktemp("state") / "ok.sqlite"
    proc = run_cli("daemon", "--scenario", str(SCENARIO), "--state", str(state), "--clock", "virtual", "--max-cycles", "2",
                   "--listen", "127.0.0.1:0", timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    keys = {k for (k,) in sqlite3.connect(state).execute("SELECT key FROM kv")}
    assert {k for k, _v, _w in KV_EDITS} <= keys, keys
    return state


def _edited(state: Path, copy_path: Path, key: str, value: str | None) -> Path:
    src, dst = sqlite3.connect(state), sqlite3.connect(copy_path)
    src.backup(dst)
    src.close()
    if value is None:
        dst.execute("DELETE FROM kv WHERE key=?", (key,))
    else:
        dst.execute("UPDATE kv SET value=? WHERE key=?", (value, key))
    dst.commit()
    dst.close()
    return copy_path


@pytest.mark.parametrize("key,value,expected", KV_EDITS, ids=[f"{k}={v}" for k, v, _ in KV_EDITS])
def test_a_state_value_of_the_wrong_json_type_is_refused_when_the_file_is_opened(daemon_state, tmp_path, key, value, expected):
    """What the daemon's start runs on the state file (``Store.check_contents``): the file, the key,
    the expected type and the fix, not an internal error in the first cycle or a 500 from the API."""
    from planner.daemon.store import StateFileError, Store

    path = _edited(daemon_state, tmp_path / "s.sqlite", key, value)
    store = Store(path)
    with pytest.raises(StateFileError) as exc:
        store.check_contents()
    text = f"{exc.value} {exc.value.fix}"
    assert str(path) in text and f"kv value '{key}'" in text and expected in text, text
    assert "restore the state file from a copy" in text and f"DELETE FROM kv WHERE key='{key}'" in text, text


def test_the_daemon_refuses_a_hand_edited_cycle_and_starts_once_the_value_is_deleted(daemon_state, tmp_path):
    bad = _edited(daemon_state, tmp_path / "bad.sqlite", "cycle", '"abc"')
    args = ["--clock", "virtual", "--max-cycles", "3", "--listen", "127.0.0.1:0"]
    proc = run_cli("daemon", "--state", str(bad), *args, timeout=300)
    assert proc.returncode == 2, proc.stderr[-3000:]
    for words in ("--state", str(bad), "kv value 'cycle'", "a whole number >= 0", "DELETE FROM kv WHERE key='cycle'"):
        assert words in proc.stderr, (words, proc.stderr[-3000:])
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr, proc.stderr[-3000:]
    # the fix it names works: without the value the loop starts it afresh
    fixed = _edited(daemon_state, tmp_path / "fixed.sqlite", "cycle", None)
    proc = run_cli("daemon", "--state", str(fixed), *args, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]


# ------------------------------------------------------------------ 3. an empty or malformed scenario_digest
DIGESTS = {"empty": "", "short": "3f2a", "not-hex": "z" * 16, "upper": "ABCDEF0123456789", "too-long": "0" * 17}


@pytest.mark.parametrize("case", sorted(DIGESTS))
def test_validate_plan_and_apply_refuse_an_empty_or_malformed_digest(good_plan, tmp_path, case):
    d = copy.deepcopy(good_plan)
    d["scenario_digest"] = DIGESTS[case]
    plan = tmp_path / "x.yaml"
    plan.write_text(yaml.safe_dump(d, sort_keys=False))
    before = sorted(p.name for p in tmp_path.iterdir())
    rc, out = run(["validate-plan", TINY, str(plan)])
    assert rc == 2, out
    assert "scenario_digest" in out and "planner plan" in out and "Traceback" not in out, out
    # checked against this input only when asked for, and said
    rc, out = run(["validate-plan", TINY, str(plan), "--force"])
    assert rc == 0 and "note:" in out and "scenario digest" in out, out
    for dry in ([], ["--dry-run"]):
        rc, out = run(["apply", str(plan), "--scenario", TINY, "--sim-state", str(tmp_path / "s.db"), *dry])
        assert rc == 2 and "scenario_digest" in out and "planner plan" in out and "Traceback" not in out, out
    assert sorted(p.name for p in tmp_path.iterdir()) == before, "nothing written"


def test_a_plan_with_its_own_digest_still_validates(good_plan, tmp_path):
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(good_plan, sort_keys=False))
    rc, out = run(["validate-plan", TINY, str(tmp_path / "p.yaml")])
    assert rc == 0 and "note:" not in out, out


# ------------------------------------------------------------------ 4. whatif's limit of a type without max_nodes
def test_whatif_says_no_limit_for_a_type_without_max_nodes(tmp_path):
    from tests.whatif.test_whatif_cli import TINY as FORECAST

    doc = copy.deepcopy(FORECAST)
    del doc["gpu_types"]["H800"]["max_nodes"]  # bought without limit: the compiler bounds it by 16 nodes a job
    doc["cluster"]["node_groups"][1]["count"] = 2
    (tmp_path / "f.yaml").write_text(yaml.safe_dump(doc))
    proc = run_cli("whatif", str(tmp_path / "f.yaml"), "--no-minimums", "--out", str(tmp_path / "out"), timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = {line.split(":")[0].strip(): line for line in proc.stdout.splitlines() if "node(s) (" in line}
    assert "no limit" in lines["H800"] and "limit 5" not in lines["H800"], proc.stdout  # was "limit 50" (2 owned + 3 x 16)
    assert "limit 8" in lines["H20"], proc.stdout  # a stated max_nodes is still its limit
    assert "no limit" in (tmp_path / "out" / "answer.md").read_text()


# ------------------------------------------------------------------ --mode on an instance file (session 47)
def test_mode_on_an_instance_file_is_refused_not_ignored(tmp_path):
    """An instance file holds its own phase times: `--mode p90` was silently ignored by plan,
    validate-plan and admit (a user could believe the plan was made on p90 estimates)."""
    out = tmp_path / "plan.yaml"
    rc, text, _, rss = run_inprocess(["plan", str(INSTANCE), "--mode", "p90", "--out", str(out)])
    _refused(rc, text, rss, "--mode", "instance file", "drop --mode")
    assert not out.exists()
    rc, text, _, _ = run_inprocess(["plan", str(INSTANCE), "--out", str(out)])
    assert rc == 0 and out.exists(), text[-2000:]
    for argv in (["validate-plan", str(INSTANCE), str(out), "--mode", "max"],
                 ["admit", str(INSTANCE), "--current", str(out), "--job", "qwen7b-math", "--mode", "sampled",
                  "--out", str(tmp_path / "admitted.yaml")]):
        rc, text, _, rss = run_inprocess(argv)
        _refused(rc, text, rss, "--mode", "drop --mode")
    assert not (tmp_path / "admitted.yaml").exists()
    rc, text, _, _ = run_inprocess(["validate-plan", str(INSTANCE), str(out)])
    assert rc == 0, text[-2000:]


# ------------------------------------------------------------------ a plan's free text (session 47)
def test_a_plans_free_text_is_bounded_and_never_printed_raw(tmp_path):
    """A hand-edited plan's scenario name and solver message: megabytes were printed back whole by
    `validate-plan --force` (and escape sequences raw, to the terminal); now an oversized field is
    refused naming it, and a short one is printed escaped."""
    plan = tmp_path / "plan.yaml"
    rc, text, _, _ = run_inprocess(["plan", str(INSTANCE), "--out", str(plan)])
    assert rc == 0, text[-2000:]
    doc = yaml.safe_load(plan.read_text())
    other = tmp_path / "other.yaml"  # another input (one job fewer): validate-plan needs --force, and says so in a note
    inst = yaml.safe_load(INSTANCE.read_text())
    inst["jobs"] = inst["jobs"][:-1]
    other.write_text(yaml.safe_dump(inst))
    short = tmp_path / "short.yaml"
    short.write_text(yaml.safe_dump({**doc, "scenario": "\x1b[31mred\x1b]0;title\x07"}))
    rc, text, _, _ = run_inprocess(["validate-plan", str(other), str(short), "--force"])
    assert "\x1b" not in text and "\x07" not in text and "\\x1b[31mred" in text, text[-2000:]
    for field, edit in (("scenario", {"scenario": "A" * 100_000}),
                        ("solver.message", {"solver": {**doc["solver"], "message": "B" * 1_000_000}})):
        big = tmp_path / f"big-{field}.yaml"
        big.write_text(yaml.safe_dump({**doc, **edit}))
        for argv in (["validate-plan", str(INSTANCE), str(big)], ["validate-plan", str(other), str(big), "--force"]):
            rc, text, _, rss = run_inprocess(argv)
            _refused(rc, text, rss, field, "at most")
            assert len(text) < 5000, len(text)


def test_simulate_says_when_a_plan_records_no_digest(tmp_path):
    """`simulate --plan` took an empty digest as 'the scenario did not change' without a word."""
    tiny = ROOT / "scenarios" / "ci" / "tiny-2jobs.yaml"
    plan = tmp_path / "plan.yaml"
    rc, text, _, _ = run_inprocess(["plan", str(tiny), "--out", str(plan)])
    assert rc == 0, text[-2000:]
    doc = yaml.safe_load(plan.read_text())
    bare = tmp_path / "bare.yaml"
    bare.write_text(yaml.safe_dump({**doc, "scenario_digest": ""}))
    rc, text, _, _ = run_inprocess(["simulate", "--plan", str(bare), str(tiny), "--json"])
    assert rc == 0, text[-2000:]
    notes = json.loads(text[text.index("{"):])["notes"]
    assert any("records no scenario digest" in n and "checked in full" in n for n in notes), notes
    rc, text, _, _ = run_inprocess(["simulate", "--plan", str(plan), str(tiny), "--json"])
    assert rc == 0 and not any("digest" in n for n in json.loads(text[text.index("{"):])["notes"])
