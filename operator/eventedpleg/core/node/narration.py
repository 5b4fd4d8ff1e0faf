"""What the agent says in its log about one performed effect (core.node.blocks.effects): a short line per
step it took on its node, read from the effect and its answer as data. Pure.

The interpreter (agent.interpreter) calls `narrate` after each effect and logs the lines. Only what changed
the node or decided its state is said (writes, restores, restarts, reports, the host check, Events that no
report just said, and every host fault with its fix); looks are not.
"""

from __future__ import annotations

from dataclasses import dataclass

from eventedpleg.core.evidence import Evidence
from eventedpleg.core.node.blocks.effects import (
    Effect,
    EffectAnswer,
    NodeEvent,
    PublishHostCheck,
    Report,
    Restart,
    RestoreFiles,
    Run,
    WriteFiles,
)
from eventedpleg.core.node.blocks.host import CommandResult
from eventedpleg.core.node.blocks.hostfault import HostFault
from eventedpleg.protocol import NodeState

DAEMON_RELOAD = ("systemctl", "daemon-reload")
# States that mean the change did not take (or was never tried): said as warnings.
WARNING_STATES = frozenset({NodeState.FAILED, NodeState.ROLLED_BACK, NodeState.SKIPPED, NodeState.DRIFTED})


@dataclass(frozen=True)
class Line:
    message: str
    warning: bool = False  # a step that failed or left the change off: said as a warning, else as info


def narrate(effect: Effect, answer: EffectAnswer, *, last_report: str = "") -> tuple[Line, ...]:
    """The lines for `effect` answered with `answer`. `last_report`: the reason of the report this phase
    made last, so that an Event repeating it is not said twice."""
    if isinstance(answer, HostFault):
        return (Line(f"fault: {answer.line()}", warning=True),)
    match effect:
        case WriteFiles(changes):
            return tuple(
                Line(f"removed {ch.path} ({ch.purpose.removeprefix('remove ')})")
                if ch.content is None
                else Line(f"wrote {ch.path} ({ch.purpose})")
                for ch in changes
            )
        case RestoreFiles(txn):
            return tuple(
                Line(
                    f"rollback: removed {path} (absent before)"
                    if copy.content is None
                    else f"rollback: restored {path} from its backup"
                )
                for path, copy in txn.backups
            )
        case Restart(unit) if isinstance(answer, CommandResult):
            if answer.ok:
                return (Line(f"restarted {unit}"),)
            return (Line(f"restart of {unit} failed: {answer.summary()}", warning=True),)
        case Run(argv) if argv == DAEMON_RELOAD and isinstance(answer, CommandResult):
            if answer.ok:
                return (Line("reloaded systemd units (`systemctl daemon-reload`)"),)
            return (Line(f"systemd did not reload: {answer.summary()}", warning=True),)
        case Report(state, reason, evidence):
            unwritten = "" if answer is not False else " (not written: desired-config changed meanwhile)"
            said = f"{state.value}: {reason}{_deciding(evidence)}{unwritten}"
            return (Line(said, warning=state in WARNING_STATES),)
        case PublishHostCheck(check):
            refused = {mode: why for mode, why in sorted(check.refusals.items()) if why}
            if not refused:
                return (Line("host check: an apply may go ahead in every kubeletConfig mode"),)
            said = "; ".join(f"{mode}: {why}" for mode, why in refused.items())
            return (Line(f"host check: refused in {len(refused)} mode(s): {said}"),)
        case NodeEvent(reason, message, warning) if message != last_report:
            return (Line(f"{reason.value}: {message}", warning=warning),)
    return ()


def _deciding(evidence: Evidence | None) -> str:
    """The checks each verification in `evidence` decided on (`name ok: observed`; informational ones are
    left out): the apply's own, its rollback's, a heal's."""
    if evidence is None:
        return ""
    said = [
        _checks(what, part)
        for what, part in (
            ("verified", evidence),
            ("rollback verified", evidence.rollback),
            ("heal verified", evidence.heal),
        )
        if part is not None
    ]
    return "".join(said)


def _checks(what: str, evidence: Evidence) -> str:
    decided = [
        f"{name} {said}" for name, said in (evidence.checks or {}).items() if said.startswith(("ok", "FAIL"))
    ]
    if not decided:
        return ""
    window = f" over {evidence.window}" if evidence.window else ""
    return f" [{what}{window}: {'; '.join(decided)}]"
