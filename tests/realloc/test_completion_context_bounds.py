"""Hostile reallocation contexts for ``planner realloc --decision completion``: every number finite and bounded, the
request arrays of matching lengths, every component on at least one GPU. A bad context exits 2 naming the field and
its fix, with no traceback and nothing written; a context whose prediction is not a finite time is refused too, so
the command never prints or writes NaN or inf."""

from __future__ import annotations

import copy
import json
from types import SimpleNamespace

import pytest

from planner.cli import main as cli_main
from planner.instances.completion_io import ContextError, check_against_setup, check_record, context_from_data, context_to_data
from tests.realloc.test_completion_paths import first_solve_in

OUT_BEFORE = '{"kept": "an earlier decision"}\n'


@pytest.fixture(scope="module")
def fired(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("bounds")
    seen = first_solve_in(tmp)
    scen = seen["scenario"]
    snaps = tmp / "snaps.jsonl"
    snaps.write_text("".join(json.dumps(s.model_dump(mode="json")) + "\n" for s in seen["snaps"]))
    return {"data": context_to_data(seen["ctx"]), "snaps": snaps, "scenario": scen}


def _edit(data: dict, edits: dict) -> dict:
    d = copy.deepcopy(json.loads(json.dumps(data)))
    for path, value in edits.items():
        node = d
        keys = path.split(".")
        for k in keys[:-1]:
            node = node[k]
        if value is _DROP:
            del node[keys[-1]]
        else:
            node[keys[-1]] = value
    return d


_DROP = object()
R = "components.rollout"
Q = "components.rollout.requests"

HOSTILE = {
    # the audit's cases
    "rollout-gpus-0": ({f"{R}.gpus": 0}, "context.components.rollout.gpus"),
    "done-length-mismatch": ({f"{Q}.done_length": [1.0]}, "context.components.rollout.requests.done_length"),
    "generated-1e308": ({f"{Q}.generated": [1e308] * 57}, "context.components.rollout.requests.generated[0]"),
    "pend-length-1e308": ({f"{Q}.pend_length": [1e308] * 120}, "context.components.rollout.requests.pend_length[0]"),
    "reference-queued-work-1e308": ({"components.reference.queued_work": 1e308}, "context.components.reference.queued_work"),
    # their neighbours
    "trainer-gpus-0": ({"components.trainer.gpus": 0}, "context.components.trainer.gpus"),
    "reference-gpus-0": ({"components.reference.gpus": 0}, "context.components.reference.gpus"),
    "rollout-gpus-huge": ({f"{R}.gpus": 10**9}, "context.components.rollout.gpus"),
    "pending-400-digits": ({f"{R}.pending": 10**400}, "context.components.rollout.pending"),
    "unit-0": ({f"{R}.unit_gpus": 0}, "context.components.rollout.unit_gpus"),
    "min-over-gpus": ({"components.trainer.min_gpus": 30}, "context.components.trainer.min_gpus"),
    "reference-rate-0": ({"components.reference.work_rate_per_gpu": 0}, "context.components.reference.work_rate_per_gpu"),
    "trainer-rate-tiny": ({"components.trainer.work_rate_per_gpu": 1e-300}, "context.components.trainer.work_rate_per_gpu"),
    "backlog-1e308": ({"components.reference.backlog_s": 1e308}, "context.components.reference.backlog_s"),
    "remaining-1e308": ({f"{R}.remaining_tokens": 1e308}, "context.components.rollout.remaining_tokens"),
    "generated-negative": ({f"{Q}.generated": [-1.0] * 57}, "context.components.rollout.requests.generated[0]"),
    "group-fraction": ({f"{Q}.group": [1.5] * 57}, "context.components.rollout.requests.group[0]"),
    "running-not-bool": ({f"{Q}.running": ["no"] * 57}, "context.components.rollout.requests.running[0]"),
    "engine-short": ({f"{Q}.engine": [0]}, "context.components.rollout.requests.engine"),
    "done-group-alone": ({f"{Q}.done_length": _DROP}, "context.components.rollout.requests.done_length"),
    "time-nan": ({"time_s": float("nan")}, "context.time_s"),
    "free-over-total": ({"free_gpus": 33}, "context.free_gpus"),
    "unknown-component": ({"components.evil": {"name": "evil"}}, "context.components.evil"),
    "kind-mismatch": ({f"{R}.kind": "trainer"}, "context.components.rollout.kind"),
    "initial-over-total": ({"initial.rollout": 1000}, "context.initial.rollout"),
    "at-boundary-not-bool": ({"at_boundary": "yes"}, "context.at_boundary"),
    # contradictions (a second audit): an iteration boundary for a running iteration's snapshots, GPUs that do not
    # add up, a rollout the snapshot does not show, a context from before the snapshot, a partial starting partition
    "at-boundary-mid-iteration": ({"at_boundary": True}, "context.at_boundary"),
    "gpus-held-plus-free-under-total": ({f"{R}.gpus": 10}, "context.free_gpus"),
    "free-while-every-gpu-is-held": ({"free_gpus": 20}, "context.free_gpus"),
    "rollout-gpus-not-the-snapshots": ({f"{R}.gpus": 20, "free_gpus": 8}, "context.components.rollout.gpus"),
    "time-before-the-snapshot": ({"time_s": 1.0}, "context.time_s"),
    "time-after-the-snapshot": ({"time_s": 1000.0}, "context.time_s"),
    "initial-missing-a-component": ({"initial": {"rollout": 28}}, "context.initial.reference"),
    "initial-zero": ({"initial.reference": 0}, "context.initial.reference"),
    "unit-not-the-jobs": ({"components.trainer.unit_gpus": 2}, "context.components.trainer.unit_gpus"),
}


def _run(fired, tmp_path, capsys, data: dict) -> tuple[int, str, str]:
    ctx = tmp_path / "ctx.json"
    ctx.write_text(json.dumps(data))  # NaN as the bare word NaN, as Python writes it
    out = tmp_path / "decision.json"
    out.write_text(OUT_BEFORE)
    capsys.readouterr()
    rc = cli_main(["realloc", str(fired["snaps"]), "--decision", "completion", "--scenario", str(fired["scenario"]),
                   "--context", str(ctx), "--hold-s", "4", "--json", "--out", str(out)])
    cap = capsys.readouterr()
    assert out.read_text() == OUT_BEFORE, "a refused context must leave --out as it was"
    return rc, cap.out, cap.err


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_context_exits_2_naming_the_field(fired, tmp_path, capsys, case):
    edits, field = HOSTILE[case]
    rc, out, err = _run(fired, tmp_path, capsys, _edit(fired["data"], edits))
    assert rc == 2, (case, out, err)
    assert f"--context {field}:" in err, err
    assert "Fix:" in err and "Traceback" not in err + out and "internal error" not in err, err
    assert out == "", "nothing printed on stdout"


def test_a_prediction_that_is_no_finite_time_is_refused(fired, tmp_path, capsys):
    """Every field within its bounds, together an iteration that never ends (the slowest log-prob GPU against the
    largest queue): refused, never printed or written as inf or a 20-digit time."""
    d = _edit(fired["data"], {"components.reference.work_rate_per_gpu": 1e9, "components.reference.queued_work": 1e30})
    rc, out, err = _run(fired, tmp_path, capsys, d)
    assert rc == 2, (out, err)
    assert "--context" in err and "completion" in err and "Fix: check the context's rates" in err, err
    assert "Traceback" not in err and out == ""


def test_the_good_context_still_decides_and_writes_strict_json(fired, tmp_path, capsys):
    ctx = tmp_path / "ctx.json"
    ctx.write_text(json.dumps(fired["data"]))
    out = tmp_path / "decision.json"
    rc = cli_main(["realloc", str(fired["snaps"]), "--decision", "completion", "--scenario", str(fired["scenario"]),
                   "--context", str(ctx), "--hold-s", "4", "--json", "--out", str(out)])
    assert rc == 0, capsys.readouterr().err

    def strict(name):
        raise AssertionError(f"{name} in the output")

    doc = json.loads(capsys.readouterr().out, parse_constant=strict)
    assert doc["fired"] and json.loads(out.read_text(), parse_constant=strict) == doc


def test_the_context_fits_the_jobs_units():
    ctx = context_from_data(json.loads(json.dumps(_small_context())))
    check_against_setup(ctx, SimpleNamespace(total_gpus=32, rollout_tp=4, train_unit=2))
    for setup, field in ((SimpleNamespace(total_gpus=32, rollout_tp=16, train_unit=2), "context.components.rollout.gpus"),
                         (SimpleNamespace(total_gpus=32, rollout_tp=4, train_unit=4), "context.components.trainer.gpus"),
                         (SimpleNamespace(total_gpus=64, rollout_tp=4, train_unit=2), "context.total_gpus")):
        with pytest.raises(ContextError) as exc:
            check_against_setup(ctx, setup)
        assert exc.value.field == field and exc.value.fix


def test_a_record_that_is_not_finite_is_refused():
    check_record(None)
    check_record({"completion_keep_s": 60.8, "completion_s": 38.4, "proxy_keep": 0.016, "proxy": 0.028, "current": [28, 1, 3]})
    for bad in ({"completion_s": float("nan")}, {"completion_keep_s": float("inf")}, {"proxy": float("nan")},
                {"completion_s": 1e21}):
        with pytest.raises(ContextError):
            check_record(bad)


def _small_context() -> dict:
    def comp(name, gpus, unit, rate):
        return {"name": name, "kind": name, "gpus": gpus, "unit_gpus": unit, "min_gpus": unit, "work_rate_per_gpu": rate,
                "backlog_s": 0.0, "pending": 0}

    return {"version": 1, "time_s": 1.0, "iteration": 0, "total_gpus": 32, "free_gpus": 0,
            "initial": {"rollout": 24, "reference": 2, "trainer": 6},
            "components": {"rollout": comp("rollout", 24, 4, 100.0), "reference": comp("reference", 2, 1, 1e14),
                           "trainer": comp("trainer", 6, 2, 1e14)}}
