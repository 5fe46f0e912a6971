"""Time limits that hold for the whole command (issue 12): every phase -- loading, the Weave
greedy, the backend's model and search -- works to the one deadline, and the record says what the
limit cut short. Clocks are injected (a clock that jumps past the deadline), so nothing here
depends on how fast the machine is."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

from formulation.common import SolveOptions
from formulation.placement import solve as solve_mod
from formulation.placement.check import check
from formulation.placement.evaluate import Index
from benchmarks.placement.generate import generate_distinct
from formulation.placement.greedy import best_greedy, greedy


class _Stall:
    """A clock that reads the real time for its first ``after`` calls, then ``jump`` seconds more
    (the machine stalled right after that point)."""

    def __init__(self, after: int, jump: float = 1e4):
        self.calls, self.after, self.jump = 0, after, jump

    def __call__(self) -> float:
        self.calls += 1
        return time.perf_counter() + (self.jump if self.calls > self.after else 0.0)


def test_the_greedy_past_its_deadline_opens_groups_of_their_own_and_says_how_many():
    idx = Index(generate_distinct(60, 1, unplaceable=0.0))
    full = greedy(idx, "arrival")
    clk = _Stall(after=2)  # the deadline check at job 0 passes, the one at job 16 finds it gone
    cut = greedy(idx, "arrival", deadline=time.perf_counter() + 60, clock=clk)
    assert full.cut_short is None
    assert cut.cut_short is not None and "job(s) opened groups of their own" in cut.cut_short
    late = int(cut.cut_short.split(": ")[1].split()[0])
    assert 0 < late <= idx.n - 16
    # the late ones each alone: a job left out had no configuration the nodes left free could hold (free
    # nodes only shrink). (Not "as few left out as the full greedy": its joins can leave room the late
    # groups of their own do not.)
    free = np.array([idx.inst.pool_types[t].count for t in idx.types]) - sum(idx.node_matrix[g.config] for g in cut.groups)
    for j in cut.unplaced:
        assert not (idx.node_matrix[np.flatnonzero(idx.ok[:, j])] <= free[None, :]).all(axis=1).any()
    alone = [g for g in cut.groups if len(g.members) == 1]
    assert len(alone) >= late
    for g in cut.groups:
        assert idx.feasible(g.config, g.members)
    # best_greedy does not start the second order when the first was cut short
    sol, name = best_greedy(idx, time.perf_counter() + 60, _Stall(after=1))
    assert name == "arrival" and sol.cut_short


@pytest.mark.parametrize("backend, jobs", [("greedy", 40), ("colgen", 40), ("highs", 12), ("cpsat", 12), ("fast", 40),
                                           ("auto", 40)])
def test_each_backend_stopped_by_its_deadline_returns_a_checked_plan_and_says_so(monkeypatch, backend, jobs):
    inst = generate_distinct(jobs, 2)
    monkeypatch.setattr(solve_mod, "clock", _Stall(after=1))  # solve() reads t0, then every deadline has passed
    res = solve_mod.solve(inst, SolveOptions(time_limit_s=1.0), backend)
    assert check(inst, res.plan) == []
    assert res.plan.groups
    assert "cut short by the time limit" in res.record.message, res.record.message
    assert res.record.status.value in ("feasible", "optimal")
    if res.record.best_bound is not None:
        assert res.record.best_bound <= res.record.objective + 1e-6


def test_a_compact_model_too_large_for_the_time_left_is_not_built():
    from formulation.placement.compact import model_size, too_big

    idx = Index(generate_distinct(600, 0))
    n = sum(1 for j in range(idx.n) if len(idx.job_configs[j]))
    assert model_size(idx) >= n * (n + 1) // 2
    assert "not built" in too_big(idx, None, "highs", 2.0)
    assert "not built" in too_big(idx, None, "cpsat", 2.0)
    small = Index(generate_distinct(8, 0))
    assert too_big(small, None, "highs", 30.0) == ""
    t0 = time.perf_counter()
    res = solve_mod.solve(generate_distinct(600, 0), SolveOptions(time_limit_s=1.0), "highs")
    assert "no plan of its own in the time left" in res.record.message and "not built" in res.record.message
    assert check(generate_distinct(600, 0), res.plan) == []
    # (no wall-clock assertion: the point is that the model is not started, which the message says)
    assert time.perf_counter() - t0 >= 0.0


def test_the_solver_gets_what_loading_and_writing_leave_of_the_limit():
    from planner.commands.plan import MIN_SOLVE_S, solver_share

    share, cut = solver_share(10.0, 1.0, 1000, json_out=True)
    assert share == pytest.approx(10.0 - 1.0 - (3e-5 * 1000 + 0.03)) and cut == ""
    share, cut = solver_share(10.0, 1.0, 1000, json_out=False)  # YAML is slower to write
    assert share == pytest.approx(10.0 - 1.0 - (3e-5 * 1000 + 0.04))
    share, cut = solver_share(1.0, 0.9, 10000, json_out=True)  # writing is capped at 30% of the limit
    assert share == MIN_SOLVE_S and "loading the input took 0.90 s of the 1 s limit" in cut


def test_a_plan_command_whose_loading_took_the_limit_still_writes_a_plan_and_says_so(tmp_path, monkeypatch, capsys):
    from planner.cli import main
    from planner.commands import plan as plan_cmd

    inst = generate_distinct(30, 4)
    path = tmp_path / "inst.json"
    path.write_text(json.dumps({"kind": "PlacementInstance", **inst.model_dump(mode="json")}))
    out = tmp_path / "plan.json"
    ticks = iter([0.0, 50.0])  # the command starts at 0; loading "took" 50 s of the 2 s limit
    monkeypatch.setattr(plan_cmd, "_clock", lambda: next(ticks))
    rc = main(["plan", str(path), "--time-limit", "2", "--backend", "fast", "--out", str(out), "--allow-unplaced"])
    assert rc == 0
    doc = json.loads(out.read_text())
    msg = doc["solver"]["message"]
    assert "cut short by the time limit: loading the input took 50.00 s of the 2 s limit" in msg
    assert doc["solver"]["time_limit_s"] == 2
    from formulation.placement.plan import PlacementPlan

    assert check(inst, PlacementPlan.model_validate(doc["body"])) == []


def test_the_plan_commands_clock_starts_when_the_process_imported_the_planner(tmp_path, capsys):
    # the executable passes when the planner was imported (cli.entry): time spent before the
    # command ran (importing the command modules) counts against the limit
    from planner.cli import main

    inst = generate_distinct(30, 4)
    path = tmp_path / "inst.json"
    path.write_text(json.dumps({"kind": "PlacementInstance", **inst.model_dump(mode="json")}))
    out = tmp_path / "plan.json"
    rc = main(["plan", str(path), "--time-limit", "2", "--backend", "fast", "--out", str(out), "--allow-unplaced"],
              started=time.perf_counter() - 40.0)  # "imported" 40 s before the command ran
    assert rc == 0
    msg = json.loads(out.read_text())["solver"]["message"]
    assert "cut short by the time limit: loading the input took 4" in msg and "of the 2 s limit" in msg
    # in process without ``started`` (a library caller), the command's own start counts (a limit
    # that loading cannot use up, even on a loaded machine)
    rc = main(["plan", str(path), "--time-limit", "60", "--backend", "fast", "--out", str(out), "--allow-unplaced"])
    assert rc == 0 and "loading the input took" not in json.loads(out.read_text())["solver"]["message"]


def test_the_executable_leaves_quickly_with_its_output_flushed_and_its_status_kept(tmp_path):
    # plan leaves through os._exit (cli.entry): stdout must still carry the whole document, the
    # file must be complete, and a refusal must keep exit status 2 and its message
    from formulation.placement.plan import PlacementPlan
    from tests.conftest import run_cli

    inst = generate_distinct(40, 5, unplaceable=0.1)
    path = tmp_path / "inst.json"
    path.write_text(json.dumps({"kind": "PlacementInstance", **inst.model_dump(mode="json")}))
    out = tmp_path / "plan.json"
    done = run_cli("plan", str(path), "--time-limit", "2", "--backend", "fast", "--allow-unplaced", "--json",
                   "--out", str(out))
    assert done.returncode == 0, done.stderr
    printed = json.loads(done.stdout)
    assert printed == json.loads(out.read_text())
    assert check(inst, PlacementPlan.model_validate(printed["body"])) == []
    bad = run_cli("plan", str(path), "--time-limit", "2", "--backend", "fast")  # unplaceable jobs, no --allow-unplaced
    assert bad.returncode == 2 and "cannot be placed" in bad.stderr and "Traceback" not in bad.stderr


def test_the_status_line_follows_the_ladder_and_the_integer_masters():
    # an instance whose LP bound is below the optimum (tests/placement/test_placement_ladder.py's
    # ORACLE_CASES): column generation climbs the ladder and solves the integer master
    from formulation.placement.colgen import PatternModel, job_classes
    from tests.placement.placement_helpers import oracle, small_instance

    inst = small_instance(5, 9, capacity=(5, 5), dram_gb=(2048.0, 2048.0), both_types=False)
    idx = Index(inst)
    pm = PatternModel(idx, job_classes(idx))
    seen = []
    pm.progress = lambda phase, incumbent, bound: seen.append((phase, incumbent, bound))
    warm = best_greedy(idx)[0]
    pm.solve(time.perf_counter() + 60, warm, {}, 1e-4)
    best, _ = oracle(inst)
    ladder = [s for s in seen if s[0].startswith("ladder")]
    masters = [s for s in seen if s[0].startswith("integer master")]
    assert ladder and masters, [s[0] for s in seen]
    for _phase, incumbent, bound in ladder + masters:
        assert incumbent is not None and incumbent >= best - 1e-6  # a plan's cost: never below the optimum
        assert bound is not None and bound <= best + 1e-6  # a bound: never above it
    assert masters[-1][1] == pytest.approx(best)  # the integer master found the optimum


def test_the_status_line_prints_phase_plan_bound_and_gap_only_on_request(monkeypatch):
    import io
    import sys

    from planner.commands.plan import _status_line

    buf = io.StringIO()
    monkeypatch.setattr(sys, "stderr", buf)
    line = _status_line()
    line.t0 -= 5.0
    line("integer master (94 columns): Optimal", 104.0, 96.0)
    line.done()
    assert "integer master (94 columns): Optimal: plan 104.00 $/h, bound 96.00, gap 7.7%" in buf.getvalue()


def test_admit_rebuilds_only_the_groups_it_changes_and_writes_what_a_full_rebuild_writes(tmp_path):
    """The admission takes the untouched groups over from the current plan; the document must be
    the one building every group anew gives (and a group whose numbers changed is rebuilt)."""
    from formulation.placement.evaluate import Solution
    from formulation.placement.plan import PlacementPlan, build_plan, reusable
    from planner.cli import main

    inst = generate_distinct(40, 5, unplaceable=0.0)
    data = {"kind": "PlacementInstance", **inst.model_dump(mode="json")}
    arriving = data["jobs"][3]["name"]
    full, base = tmp_path / "full.json", tmp_path / "base.json"
    full.write_text(json.dumps(data))
    base.write_text(json.dumps(dict(data, jobs=[j for j in data["jobs"] if j["name"] != arriving])))
    plan, out = tmp_path / "plan.json", tmp_path / "admitted.json"
    assert main(["plan", str(base), "--backend", "fast", "--time-limit", "3", "--out", str(plan), "--allow-unplaced"]) == 0
    assert main(["admit", str(full), "--current", str(plan), "--job", arriving, "--out", str(out)]) == 0
    body = PlacementPlan.model_validate(json.loads(out.read_text())["body"])
    assert check(inst, body) == []
    idx = Index(inst)
    names = {n: i for i, n in enumerate(idx.names)}
    from formulation.placement.evaluate import Group

    from formulation.placement.plan import config_of

    def config(g):  # whole pools, or members on nodes of their own (equal counts, or their own counts)
        c = config_of(g)
        return idx.config_id.get(c, idx.config_id.get(c._replace(members=0, own=False) if len(g.members) == 1 else c))

    assert all(config(g) is not None for g in body.groups)
    groups = [Group(config(g), tuple(names[m.job] for m in g.members), g.id) for g in body.groups]
    nodes = {g.id: {"rollout": g.rollout_pool.nodes, "train": g.train_pool.nodes,
                    "members": {m.job: m.rollout_nodes for m in g.members}} for g in body.groups}
    rebuilt = build_plan(idx, Solution(groups), [], nodes)
    from planner.plandoc import _round  # what the document holds: 9 significant digits

    assert [_round(g.model_dump(mode="json")) for g in rebuilt.groups] == [_round(g.model_dump(mode="json")) for g in body.groups]
    assert (rebuilt.cost_per_hour, rebuilt.nodes_used) == (body.cost_per_hour, body.nodes_used)
    # a group whose member's phase times changed is not taken over
    g = body.groups[0]
    node_names = {t: set(inst.node_names(t)) for t in idx.types}
    assert reusable(idx, g, groups[0].config, groups[0].members, node_names)
    stale = g.model_copy(deep=True)
    stale.members[0].rollout_s *= 1.01
    assert not reusable(idx, stale, groups[0].config, groups[0].members, node_names)
    moved = g.model_copy(deep=True)
    moved.members[0].moved = True
    assert not reusable(idx, moved, groups[0].config, groups[0].members, node_names)
    pinned = g.model_copy(deep=True)  # a member pinned to part of a pool (not what build_plan writes)
    pinned.members[0].train_nodes = pinned.members[0].train_nodes[:-1]
    assert not reusable(idx, pinned, groups[0].config, groups[0].members, node_names)
    priced = g.model_copy(deep=True)
    priced.cost_per_hour += 1.0
    assert not reusable(idx, priced, groups[0].config, groups[0].members, node_names)


def test_validate_plan_knows_plans_of_the_same_instance_by_the_old_digest_too(tmp_path, capsys):
    import hashlib

    from planner.cli import main

    inst = generate_distinct(12, 6)
    path, other = tmp_path / "inst.json", tmp_path / "other.json"
    path.write_text(json.dumps({"kind": "PlacementInstance", **inst.model_dump(mode="json")}))
    other.write_text(json.dumps({"kind": "PlacementInstance", **generate_distinct(12, 7).model_dump(mode="json")}))
    plan = tmp_path / "plan.json"
    assert main(["plan", str(path), "--backend", "fast", "--time-limit", "2", "--out", str(plan), "--allow-unplaced"]) == 0
    assert main(["validate-plan", str(path), str(plan)]) == 0
    assert main(["validate-plan", str(other), str(plan)]) == 2  # made for another input
    doc = json.loads(plan.read_text())  # a plan written before: the digest of the sorted-key JSON dump
    canon = json.dumps(inst.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    doc["scenario_digest"] = hashlib.sha256(canon.encode()).hexdigest()[:16]
    plan.write_text(json.dumps(doc))
    capsys.readouterr()
    assert main(["validate-plan", str(path), str(plan)]) == 0
    assert "made for" not in capsys.readouterr().err
    assert main(["validate-plan", str(other), str(plan)]) == 2


@pytest.mark.parametrize("backend", ["colgen", "highs", "cpsat", "greedy"])
def test_a_cut_short_greedy_gives_way_to_the_first_fit_and_every_backend_reports_a_bound(monkeypatch, backend):
    """When the deadline cuts the Weave greedy short, its tail is a group per job; the other
    backends start from the first fit instead (cheaper here), and every backend's plan carries a
    certified bound (the load bound when the backend had none of its own)."""
    inst = generate_distinct(80, 3)
    monkeypatch.setattr(solve_mod, "clock", _Stall(after=1))
    res = solve_mod.solve(inst, SolveOptions(time_limit_s=1.0), backend)
    assert check(inst, res.plan) == []
    msg = res.record.message
    assert res.record.best_bound is not None and 0 < res.record.best_bound <= res.record.objective + 1e-6, msg
    if backend == "greedy":
        assert res.record.warm_start == "greedy"  # the greedy backend is the Weave greedy, cut short or not
    else:
        assert "the first fit replaced the cut-short greedy" in msg, msg
        assert res.record.objective < res.greedy.cost(res.idx) - 1e-6
    if backend == "colgen":
        assert "not started, no time left" in msg and "(converged)" not in msg


def test_column_generation_whose_lp_the_deadline_stopped_claims_no_lp_value_nor_convergence(monkeypatch):
    from formulation.placement import master as master_mod
    from formulation.placement.colgen import PatternModel, job_classes

    idx = Index(generate_distinct(30, 1, unplaceable=0.0))
    real = master_mod.Master.solve_lp

    def stopped(self, deadline):  # HiGHS hit its time limit: whatever values it had, not the optimum
        out = real(self, deadline)
        self.lp_optimal = False
        return out

    monkeypatch.setattr(master_mod.Master, "solve_lp", stopped)
    pm = PatternModel(idx, job_classes(idx))
    sol, st = pm.solve(time.perf_counter() + 60, greedy(idx, "arrival"), {}, 1e-4)
    assert st.lp_value is None and not st.lp_converged and not st.proven
    assert st.lower_bound is None or st.lower_bound <= greedy(idx, "arrival").cost(idx) + 1e-6


def test_the_heuristic_pricing_pass_stops_at_its_deadline_and_the_exact_pass_still_bounds_every_configuration():
    # at 2,000 distinct jobs one heuristic pass over every configuration took ~0.6 s past a colgen
    # deadline; it proves nothing, so it stops there. The exact pass goes on (each search stopped at
    # its root), so every configuration keeps a valid reduced-cost bound.
    from formulation.placement.colgen import PatternModel, job_classes

    idx = Index(generate_distinct(40, 6, unplaceable=0.0))
    pm = PatternModel(idx, job_classes(idx))
    pi = np.full(len(pm.cl.rep), 50.0)
    mu = np.zeros(len(idx.types))
    pm.deadline = float("inf")
    cols_all, _ = pm.price_all(pi, mu, True, 1000, exact=False)
    assert cols_all and pm.last_full
    pm.deadline = time.perf_counter() - 1.0  # already past
    cols, _ = pm.price_all(pi, mu, True, 1000, exact=False)
    assert cols == [] and not pm.last_full
    _, rc_lb = pm.price_all(pi, mu, True, 1000, exact=True)
    assert pm.last_full
    priced = sorted(pm.priced_configs())
    assert priced and np.isfinite(rc_lb[priced]).all()


def test_the_command_clock_starts_with_the_process_not_the_planner_import():
    """The executable's time limit counts from the process's start (the interpreter's own start
    included), not from when the planner was imported; a program that imports the planner after
    running for a while does not get a start in the past."""
    import subprocess
    import sys

    code = "import time; {}t = time.perf_counter(); import planner; print(t - planner.STARTED_AT)"
    run = lambda c: float(subprocess.run([sys.executable, "-c", c], capture_output=True, text=True, check=True).stdout)  # noqa: E731
    assert 0.0 < run(code.format("")) < 1.0  # the interpreter started before the planner was imported
    assert run(code.format("time.sleep(1.2); ")) <= 0.0  # imported as a library, late: its import is the start
