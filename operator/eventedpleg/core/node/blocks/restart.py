"""Restart the services after a change to their files: the runtime (when its config changed), THEN the
kubelet. Pure: it yields effects (core.node.blocks.effects), shared by the apply, its rollback and
the after-Done heal; the clock is injected.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from eventedpleg.core.node.blocks.effects import Now, Phase, ReadJournal, Restart, Run, Wait, act, ask
from eventedpleg.core.node.blocks.host import CommandResult
from eventedpleg.core.node.facts.verify import Check, Outcome, VerifyResult
from eventedpleg.core.versions import Version

KUBELET_UNIT = "kubelet"
RESTART_PAUSE_SECONDS = 1.0  # see restart_services


@dataclass(frozen=True)
class Restarted:
    """How a restart went: a failure (or None), and when the kubelet was restarted (verification reads its
    journal from there)."""

    failure: VerifyResult | None
    at: datetime


def failed(name: str, why: str, version: Version, lines: tuple[str, ...] = ()) -> VerifyResult:
    return VerifyResult(Outcome.FAIL, why, (Check(name, False, why),), lines, str(version))


def journal(unit: str, since: datetime) -> Phase[tuple[str, ...]]:
    return (yield from ask(ReadJournal(unit, since), tuple))


def restart_services(
    *,
    restart_runtime: bool,
    runtime_unit: str,
    version: Version,
    clock: Now,
    reload_units: bool = False,
) -> Phase[Restarted]:
    """The runtime (when its config changed), THEN the kubelet: a kubelet that outlives a runtime restart
    falls back to generic PLEG for good (k8s#129827; compatibility §5). With `reload_units`, systemd first
    re-reads the kubelet's unit drop-ins (a restart alone keeps the definition systemd loaded before)."""
    # journalctl --since has one-second resolution: the pauses keep the previous kubelet's lines (an old
    # startup error, the fallback it logs when the runtime goes away) out of the new kubelet's window.
    yield from act(Wait(RESTART_PAUSE_SECONDS))
    if reload_units:
        began = clock()
        done = yield from ask(Run(("systemctl", "daemon-reload")), CommandResult)
        if not done.ok:
            return Restarted(
                failed("daemon-reload", f"systemd did not reload: {done.summary()}", version), began
            )
    if restart_runtime:
        began = clock()
        done = yield from ask(Restart(runtime_unit), CommandResult)
        if not done.ok:
            tail = (yield from journal(runtime_unit, began))[-2:]
            why = f"{runtime_unit} did not restart: {done.summary()}"
            return Restarted(failed("runtime", why, version, tail), clock())
        yield from act(Wait(RESTART_PAUSE_SECONDS))
    restart_at = clock()
    done = yield from ask(Restart(KUBELET_UNIT), CommandResult)
    if not done.ok:
        return Restarted(failed("kubelet", f"kubelet did not restart: {done.summary()}", version), restart_at)
    return Restarted(None, restart_at)
