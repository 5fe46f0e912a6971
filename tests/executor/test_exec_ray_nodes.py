"""The Ray cluster's nodes as the executor reads them, and the addresses it connects to (Ray's
calls stubbed: no cluster).

Ray reports a dead node with ``Resources: {}``: its planner name survives only in its ``rlp-node``
label. It was dropped (an *unknown* node), so trainer ranks on a node that died were not seen to
sit on a dead node, and a P2P copy from them was planned, started new ranks and failed (exit 1)
instead of being refused with the way out (exit 2)."""

from __future__ import annotations

import pytest

pytest.importorskip("ray")

from executor.backends.ray import cluster as rc  # noqa: E402
from executor.diff import Unreachable, diff  # noqa: E402
from executor.state import Component, Layout  # noqa: E402
from tests.executor.helpers import observed  # noqa: E402


def _alive(name: str, gpus: int = 8) -> dict:
    return {"NodeID": f"id-{name}", "Alive": True, "Labels": {rc.NODE_LABEL: name},
            "Resources": {"GPU": float(gpus), "accelerator_type:H100": 1.0, f"{rc.NODE_PREFIX}{name}": 1.0, rc.DRAM: 2048.0}}


def _dead(name: str) -> dict:  # what Ray 2.x answers for a node whose raylet died
    return {"NodeID": f"id-{name}-dead", "Alive": False, "Resources": {}, "Labels": {"ray.io/node-id": "x", rc.NODE_LABEL: name},
            "DeathReason": 2, "DeathReasonMessage": "health check failed due to missing too many heartbeats"}


@pytest.fixture
def nodes(monkeypatch):
    def use(entries):
        import ray

        monkeypatch.setattr(ray, "nodes", lambda: entries)
        return rc.ray_nodes()
    return use


def test_a_dead_node_is_reported_dead_not_dropped(nodes):
    got = nodes([_alive("h100-0"), _dead("h100-2"), {"NodeID": "head", "Alive": True, "Resources": {"CPU": 1.0}}])
    assert sorted(got) == ["h100-0", "h100-2"]
    assert got["h100-0"].alive and got["h100-0"].gpus == 8 and got["h100-0"].gpu_type == "H100"
    assert not got["h100-2"].alive


def test_a_restarted_node_is_the_live_one_whatever_the_order(nodes):
    for entries in ([_dead("h100-1"), _alive("h100-1")], [_alive("h100-1"), _dead("h100-1")]):
        got = nodes(entries)
        assert got["h100-1"].alive and got["h100-1"].gpus == 8


def test_p2p_from_ranks_on_a_node_that_died_is_refused_with_the_way_out(nodes):
    ns = list(nodes([_alive("h100-0"), _alive("h100-1"), _dead("h100-2")]).values())
    obs = observed(ns, [Component("j/trainer", "j", "trainer", "H100", Layout(1, 1, 2), placement={"h100-2": 2})])
    tgt = observed(ns, [])
    tgt.components["j/trainer"] = Component("j/trainer", "j", "trainer", "H100", Layout(1, 1, 2), placement={"h100-1": 2},
                                            migration="p2p")
    # never trained: its ranks held their initial state only, new ones take their place
    assert [u.kind for u in diff(obs, tgt).units] == ["replace"]
    obs.trained = {"j/trainer": 3}  # trained: its shards went with the node, and no checkpoint holds them
    with pytest.raises(Unreachable) as err:
        diff(obs, tgt)
    text = str(err.value)
    assert "rank(s) j/trainer" in text or "every rank of j/trainer" in text, text
    assert "committed 3 optimizer step(s)" in text and "leave the component out of the plan" in text


def test_a_target_on_a_node_that_died_is_refused_as_dead_not_unknown(nodes):
    ns = list(nodes([_alive("h100-0"), _dead("h100-2")]).values())
    obs = observed(ns, [])
    tgt = observed(ns, [])
    tgt.components["j/rollout"] = Component("j/rollout", "j", "rollout", "H100", placement={"h100-2": 1})
    with pytest.raises(Unreachable) as err:
        diff(obs, tgt)
    text = str(err.value)
    assert "node h100-2 is dead" in text and "unknown node" not in text
    assert "GPUs of workers on a node" not in text  # (nothing about a dead node's capacity, which is not known)


@pytest.mark.parametrize("address, says", [("ray://127.0.0.1:1", "Ray refused the address: Ray Client requires"),
                                           ("nonsense", "'nonsense' is not HOST:PORT")])
def test_an_address_ray_refuses_is_bad_input_in_one_line(monkeypatch, address, says):
    """A ``ray://`` address (Ray Client, without its package) was 'internal error: ValueError ... This
    is a bug in rl-planner' (exit 1); an address without a port said 'invalid literal for int()'."""
    import ray

    from estimators.errors import UserError
    from executor import session

    def init(**kw):
        raise ValueError("Ray Client requires pip package `ray[client]`.")

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", init)
    with pytest.raises(UserError) as err:
        session.open_backend("ray", address=address)
    text = str(err.value)
    assert text.startswith("--address: cannot connect") and says in text and "\n" not in text


def test_status_shows_a_dead_nodes_unknown_capacity_as_unknown():
    """Its workers still pin what they held; the node's GPUs read '2/0' (an over-full node), now '2/?'."""
    import io

    from rich.console import Console

    from executor.progress import state_table

    rows = [{"node": "h100-2", "gpu_type": "", "alive": False, "gpus_used": 2, "gpus": 0, "dram_used_gb": 0.0, "dram_gb": 0.0,
             "workers": "j/trainerx2"},
            {"node": "h100-1", "gpu_type": "H100", "alive": True, "gpus_used": 0, "gpus": 8, "dram_used_gb": 0.0,
             "dram_gb": 2048.0, "workers": ""}]
    out = io.StringIO()
    Console(file=out, width=200).print(state_table(rows, "ray cluster"))
    text = out.getvalue()
    assert "2/?" in text and "2/0" not in text and "0/8" in text and "DEAD" in text
