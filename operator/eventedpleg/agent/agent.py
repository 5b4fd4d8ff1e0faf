"""The node agent: acts on its own Node's annotations (protocol in eventedpleg.protocol), on its own host.

What it does is decided by pure phases that yield effects: readings of the kubelet while its Node serves
(core.node.phases.servicephase), apply (core.node.phases.applyphase, with the restart of
core.node.blocks.restart and the verify loop of core.node.blocks.verifyloop) when its Node asks for it, the
after-Done check (core.node.phases.donephase) every check interval, and the host check
(core.node.phases.hostcheckphase) at start and every host check interval while no apply holds the node.
core.node.phases.agentdecide says when it applies and when it watches; agent.interpreter performs the
effects on the host.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from eventedpleg.agent.hostfiles import HostFiles
from eventedpleg.agent.interpreter import Interpreter, Work, drive
from eventedpleg.agent.metrics import AgentMetrics
from eventedpleg.core.node.blocks.agentsettings import AgentSettings
from eventedpleg.core.node.blocks.effects import Effect
from eventedpleg.core.node.blocks.host import Host
from eventedpleg.core.node.blocks.nodeapi import AgentApi, AgentNode, holds_node
from eventedpleg.core.node.facts.benefit import Reading
from eventedpleg.core.node.phases import applyphase, donephase, guardphase, hostcheckphase, servicephase
from eventedpleg.core.node.phases.agentdecide import AgentAction, next_action, unexpected

__all__ = ["Agent", "AgentSettings", "Work", "drive"]


@dataclass
class Agent:
    node: str
    host: Host
    api: AgentApi
    settings: AgentSettings
    done: donephase.DoneMemory = field(default_factory=donephase.DoneMemory)
    guarded: guardphase.GuardMemory = field(default_factory=guardphase.GuardMemory)
    seen: AgentNode | None = None  # our Node as last read by the loop: the guard's looks read no API
    readings: tuple[Reading, ...] = ()  # the kubelet's counters while the node served (servicephase)
    trace: list[Effect] | None = field(default=None)  # every effect performed, when a list is given
    files: HostFiles | None = field(default=None)  # the host's file work (a simulated host's, in tests)
    metrics: AgentMetrics | None = None  # phase durations and failures (agent.metrics), when served

    def __post_init__(self) -> None:
        self.interpreter = Interpreter(
            self.node, self.host, self.api, self.trace, self.files, metrics=self.metrics
        )

    @property
    def clock(self) -> Callable[[], datetime]:
        return self.host.clock.now

    def on_node(self, seen: AgentNode) -> Work[None]:
        """React to one observed version of our Node: keep a reading of the kubelet while it serves (and when
        it is first seen cordoned), and apply when asked."""
        if seen.name != self.node:
            return
        self.seen = seen
        sample = servicephase.sample(seen, self.readings, self.settings, self.clock)
        self.readings = yield from self.interpreter.run(sample, seen, "service")
        if next_action(seen.annotations) is not AgentAction.APPLY:
            return
        # Decide on a fresh read: a queued watch event may predate our own last report.
        node = self.api.get_node(self.node)
        if node is None or next_action(node.annotations) is not AgentAction.APPLY:
            return
        phase = applyphase.apply(node, self.settings, self.clock, self.readings)
        yield from self.interpreter.run(phase, node, "apply")

    def check(self) -> Work[None]:
        """After Done: drift, silent fallback, another event consumer (run every check_interval_seconds)."""
        node = self.api.get_node(self.node)
        if node is None or next_action(node.annotations) is not AgentAction.WATCH:
            return
        phase = donephase.after_done(node, self.done, self.settings, self.clock)
        self.done = yield from self.interpreter.run(phase, node, "after_done")

    def guard(self) -> Work[None]:
        """The guard's look at a Done node (run every guard_interval_seconds, core.node.phases.guardphase),
        on the Node as the loop last saw it; a rollback it asks for runs through the apply's own steps
        (applyphase.take_back) on a fresh read."""
        node = self.seen
        if node is None or next_action(node.annotations) is not AgentAction.WATCH:
            return
        self.guarded = yield from self.interpreter.run(
            guardphase.guard(node, self.guarded, self.settings, self.clock), node, "guard"
        )
        asked = self.guarded.take_back
        if asked is None:
            return
        fresh = self.api.get_node(self.node)
        done = False
        if fresh is not None and next_action(fresh.annotations) is AgentAction.WATCH:
            phase = applyphase.take_back(
                fresh, self.settings, self.clock, why=asked.why, evidence=asked.evidence
            )
            done = yield from self.interpreter.run(phase, fresh, "guard_rollback")
            self.seen = self.api.get_node(self.node)
        self.guarded = yield from self.interpreter.run(
            guardphase.taken_back(self.guarded, done), fresh or node, "guard"
        )

    def host_check(self) -> Work[bool]:
        """Publish what an apply would decide on this host now (run every host_check_interval_seconds);
        False, doing nothing, while an apply holds the node (Applying, Verifying)."""
        node = self.api.get_node(self.node)
        if node is None or holds_node(node.annotations):
            return False
        yield from self.interpreter.run(hostcheckphase.host_check(node, self.clock), node, "host_check")
        return True

    def report_error(self, error: str, retry_in: float) -> Work[None]:
        """Say an unexpected error of the agent's on our Node (agent.runner calls this once per error)."""
        node = self.api.get_node(self.node)
        if node is None:
            return
        yield from self.interpreter.run(unexpected(node, error, retry_in), node)
