"""Readings of the kubelet's counters while its node still serves, for the "before" benefit window
(core.node.facts.benefit). A phase that yields effects (core.node.blocks.effects). Pure.

The agent takes one when it starts, then every check interval while its Node is schedulable and no apply
holds it, and one more when it first sees the Node cordoned. The window before the change then ends when
the node stopped serving, and no second of it passes while the node is out of service (it was a 30 s wait
between the drain and the first write).
"""

from __future__ import annotations

from collections.abc import Sequence

from eventedpleg.core.node.blocks.agentsettings import AgentSettings
from eventedpleg.core.node.blocks.effects import Now, Phase, Scrape, ask_maybe
from eventedpleg.core.node.blocks.hostfault import Faulted
from eventedpleg.core.node.blocks.nodeapi import AgentNode, holds_node
from eventedpleg.core.node.facts import benefit
from eventedpleg.core.node.facts.benefit import Reading
from eventedpleg.core.node.facts.promtext import Metrics


def due(node: AgentNode, readings: Sequence[Reading], settings: AgentSettings, clock: Now) -> bool:
    """Whether a reading is wanted now: none while an apply holds the node; while the node serves, the
    first, and then one every check interval; once cordoned, one (the first look after the cordon)."""
    if settings.benefit_window_seconds <= 0 or holds_node(node.annotations):
        return False
    last = readings[-1] if readings else None
    if node.unschedulable:
        return last is not None and last.in_service
    if last is None or not last.in_service:
        return True
    return (clock() - last.at).total_seconds() >= settings.check_interval_seconds


def sample(
    node: AgentNode, readings: Sequence[Reading], settings: AgentSettings, clock: Now
) -> Phase[tuple[Reading, ...]]:
    """The readings kept, with a new one when `due` (`node` as just observed)."""
    if not due(node, readings, settings, clock):
        return tuple(readings)
    try:
        metrics = yield from ask_maybe(Scrape(benefit.NAMES), Metrics)
    except Faulted:  # a reading is a nicety: the kubelet's /metrics failing costs the figures only
        return tuple(readings)
    if metrics is None:
        return tuple(readings)
    return benefit.keep(readings, benefit.reading(metrics, clock(), in_service=not node.unschedulable))
