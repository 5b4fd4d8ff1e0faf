"""The Argo CD health check in the README, run as written under Lua 5.1 (Argo CD's gopher-lua dialect)
against statuses the operator's pure core produces."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path
from typing import Any

import lupa.lua51 as lua51  # the [test] extra; Lua 5.1 like Argo CD's gopher-lua
import yaml

from eventedpleg import protocol
from eventedpleg.core.evidence import Evidence
from eventedpleg.core.rollout import status
from eventedpleg.models.nodeconfig import NodeConfigStatus
from eventedpleg_lab.sim.rolloutworld import H_ON, T0, World, fleet, spec

README = Path(__file__).resolve().parents[2] / "README.md"
KEY = "resource.customizations.health.eventedpleg.io_NodeConfig"


def health_script() -> str:
    block = re.search(r"<!-- argocd-health -->\s*```yaml\n(.*?)```", README.read_text(), re.S)
    assert block is not None, "README lost the argocd-cm block"
    return str(yaml.safe_load(block.group(1))["data"][KEY])


def health(obj: dict[str, Any]) -> tuple[str, str]:
    lua = lua51.LuaRuntime(unpack_returned_tuples=True)
    run = lua.eval("function(script) return assert(loadstring(script))() end")
    lua.globals().obj = lua.table_from(obj, recursive=True)  # Argo CD hands the object over as `obj`
    result = run(health_script())
    return str(result["status"]), str(result["message"] or "")


def nodeconfig(world: World, *, generation: int = 2, observed: int = 2) -> dict[str, Any]:
    built = status.build_status(
        world.plan().summary, enabled=True, deleting=False, generation=observed, previous=[], now=T0
    )
    return {"metadata": {"name": "cluster", "generation": generation}, "status": built.to_api()}


def test_complete_rollout_is_healthy() -> None:
    world = World(fleet(3), spec())
    world.run()
    assert health(nodeconfig(world)) == ("Healthy", "3 of 3 eligible node(s) run Evented PLEG")


def test_rolling_is_progressing_and_says_where() -> None:
    world = World(fleet(3), spec())
    world.tick()
    world.tick()
    state, message = health(nodeconfig(world))
    assert state == "Progressing"
    assert "node-000" in message


def test_halted_is_degraded_naming_the_node() -> None:
    nodes = fleet(3)
    nodes["node-000"].agent_fails = True
    world = World(nodes, spec())
    world.run()
    state, message = health(nodeconfig(world))
    assert state == "Degraded"
    assert "node-000" in message


def test_paused_is_suspended() -> None:
    world = World(fleet(2), spec(rollout={"paused": True}))
    assert health(nodeconfig(world))[0] == "Suspended"


def test_a_status_older_than_the_spec_is_progressing_even_if_it_was_ready() -> None:
    world = World(fleet(2), spec())
    world.run()
    assert health(nodeconfig(world, generation=3, observed=2)) == (
        "Progressing",
        "the operator has not yet seen this generation",
    )


def test_no_status_yet_is_progressing() -> None:
    assert health({"metadata": {"name": "cluster", "generation": 1}})[0] == "Progressing"


def test_an_invalid_spec_is_degraded_with_the_problem() -> None:
    invalid = status.invalid_status(
        NodeConfigStatus(), problems="spec.rollout.window.timeZone: unknown time zone", generation=2, now=T0
    )
    obj = {"metadata": {"name": "cluster", "generation": 2}, "status": invalid.to_api()}
    assert health(obj) == ("Degraded", "spec.rollout.window.timeZone: unknown time zone")


def test_first_sight_before_planning_is_progressing() -> None:
    first = status.first_status(NodeConfigStatus(), generation=1, now=T0, waiting="waiting for nodes")
    assert first is not None
    obj = {"metadata": {"name": "cluster", "generation": 1}, "status": first.to_api()}
    assert health(obj) == ("Progressing", "waiting for nodes")


def test_every_eligible_node_skipped_for_a_host_fault_is_degraded_not_healthy() -> None:
    world = World(fleet(1), spec())
    world.nodes["node-000"].annotations.update(
        {
            protocol.ANN_OWNER: "cluster",
            protocol.ANN_DESIRED: H_ON,
            protocol.ANN_STATE: "Skipped",
            protocol.ANN_STATE_SINCE: T0.isoformat(),
            protocol.ANN_REASON: "read-only file system: fix it on the host",
            protocol.ANN_EVIDENCE: Evidence(result="fault", changed="nothing").to_json(),
        }
    )
    world.run()
    assert health(nodeconfig(world)) == (
        "Degraded",
        "0 of 1 eligible node(s) run Evented PLEG, 1 skipped: host fault",
    )


def test_every_remaining_node_blocked_for_good_is_degraded_naming_them() -> None:
    nodes = fleet(2)
    nodes["node-001"].drain_never_until = T0 + timedelta(days=1)
    world = World(nodes, spec(drain={"onBlocked": "Wait"}))
    for _ in range(30):
        world.tick()
    state, message = health(nodeconfig(world))
    assert state == "Degraded"
    assert message.startswith("no remaining node can make progress until someone acts: node-001: ")
