"""A host for driving one agent phase without a simulated host: the test answers each look."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

from eventedpleg.core.node.blocks.effects import Effect, EffectAnswer, NodeEvent, Phase, Report, Wait


class ScriptedHost:
    """Answers looks and commands from a function (Waits move the time, Reports are written, Events
    emitted), keeping every effect."""

    def __init__(self, answer: Callable[[Effect], EffectAnswer], start: datetime) -> None:
        self.answer = answer
        self.now = start
        self.effects: list[Effect] = []

    def clock(self) -> datetime:
        return self.now

    def play(self, phase: Phase[object]) -> object:
        reply: EffectAnswer = None
        while True:
            try:
                effect = phase.send(reply)
            except StopIteration as stop:
                return stop.value
            self.effects.append(effect)
            if isinstance(effect, Wait):
                self.now += timedelta(seconds=effect.seconds)
                reply = None
            elif isinstance(effect, NodeEvent | Report):
                reply = isinstance(effect, Report) or None  # every report is written
            else:
                reply = self.answer(effect)
