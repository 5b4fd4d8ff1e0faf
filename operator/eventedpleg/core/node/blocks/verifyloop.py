"""Watch the restarted kubelet (core.node.blocks.restart) until verification decides (core.node.facts.verify),
and read its counters for the benefit windows (core.node.facts.benefit). Pure: these yield effects
(core.node.blocks.effects) and read the time from an injected clock.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

from eventedpleg.core.node.blocks.agentsettings import AgentSettings
from eventedpleg.core.node.blocks.effects import (
    Healthz,
    Now,
    Observe,
    Phase,
    Run,
    Scrape,
    Wait,
    act,
    ask,
    ask_maybe,
)
from eventedpleg.core.node.blocks.host import CommandResult, HttpResult
from eventedpleg.core.node.blocks.restart import KUBELET_UNIT, journal
from eventedpleg.core.node.facts import benefit, kubeletlog
from eventedpleg.core.node.facts.promtext import Metrics
from eventedpleg.core.node.facts.verify import (
    Check,
    Expectation,
    Observation,
    Outcome,
    VerifyResult,
    evaluate,
)
from eventedpleg.core.versions import Version


def verify(
    version: Version,
    expect: Expectation,
    *,
    since: datetime,
    timeout: int,
    settings: AgentSettings,
    clock: Now,
) -> Phase[VerifyResult]:
    """Wait for /healthz (or a startup failure), then observe until `evaluate` decides or time is up."""
    deadline = since + timedelta(seconds=timeout)
    poll = settings.poll_seconds
    min_window = min(settings.min_window_seconds, timeout / 2)
    while True:
        health = yield from ask(Healthz(), HttpResult)
        if health.ok:
            break
        log = kubeletlog.scan(list((yield from journal(KUBELET_UNIT, since))))
        start_failure = log.example(*sorted(kubeletlog.START_FAILURES))
        if start_failure or clock() >= deadline:
            active = yield from ask(Run(("systemctl", "is-active", KUBELET_UNIT)), CommandResult)
            # A startup error while systemd still calls it active is an older attempt: keep waiting.
            if clock() < deadline and active.stdout.strip() == "active":
                yield from act(Wait(poll))
                continue
            waited = (clock() - since).total_seconds()
            detail = (
                f"kubelet not healthy {waited:.0f}s after restart ({health.error or health.status}); "
                f"systemctl is-active kubelet: {active.stdout.strip() or active.returncode}"
            )
            lines = (start_failure,) if start_failure else ()
            reason = f"kubelet did not start: {start_failure}" if start_failure else detail
            return VerifyResult(
                Outcome.FAIL, reason, (Check("healthz", False, detail),), lines, str(version), waited
            )
        yield from act(Wait(poll))
    baseline = yield from ask_maybe(Scrape(), Metrics)
    t0 = clock()
    while True:
        yield from act(Wait(poll))
        window = (clock() - t0).total_seconds()
        obs = yield from ask(Observe(baseline, window, since, expect.runtime_readback), Observation)
        result = evaluate(version, expect, obs, min_window=min_window)
        if result.outcome is not Outcome.PENDING:
            return result
        if clock() >= deadline:
            return replace(
                result, outcome=Outcome.FAIL, reason=f"timed out after {timeout}s: {result.reason}"
            )


def measure(settings: AgentSettings, clock: Now) -> Phase[benefit.MeasuredWindow | None]:
    """Relists and kubelet CPU over benefit_window_seconds (two readings of /metrics)."""
    seconds = settings.benefit_window_seconds
    if seconds <= 0:
        return None
    first = yield from reading_now(clock)
    if first is None:
        return None
    yield from act(Wait(seconds))
    second = yield from reading_now(clock)
    return None if second is None else benefit.between(first, second)


def reading_now(clock: Now) -> Phase[benefit.Reading | None]:
    """One reading of the kubelet's counters now (not a serving node's: see core.node.phases.servicephase)."""
    metrics = yield from ask_maybe(Scrape(benefit.NAMES), Metrics)
    return None if metrics is None else benefit.reading(metrics, clock(), in_service=False)
