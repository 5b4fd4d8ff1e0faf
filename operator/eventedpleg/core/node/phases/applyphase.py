"""Apply one desired-config on our node, as a phase that yields effects (core.node.blocks.effects). Pure.

Read the hash-named ConfigMap (re-validated) -> read the host -> decide (or refuse, touching nothing) ->
record exact backups -> write atomically -> restart the runtime, THEN the kubelet (k8s#129827) -> Verifying
-> verify (version-aware, core.node.facts.verify) -> Done, or restore the backups exactly, restart, re-verify
->
RolledBack (Failed if even that fails, or with onFailure=Halt).

The node is out of service from the cordon to Done, so nothing here waits that the evidence does not need:
the "before" benefit window was measured while the node still served (core.node.phases.servicephase) and the
"after" one is measured once Done is reported (the node is given back meanwhile).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from eventedpleg import constants as c
from eventedpleg.core import render, runtimes
from eventedpleg.core.agentoptions import AgentOptions, AgentOptionsError
from eventedpleg.core.evidence import Evidence
from eventedpleg.core.node.blocks.agentsettings import AgentSettings
from eventedpleg.core.node.blocks.effects import (
    Backup,
    DropConfigBaseline,
    EndTransaction,
    MarkHalted,
    NodeEvent,
    Now,
    Phase,
    PublishBenefit,
    ReadApplied,
    ReadConfigMap,
    ReadHost,
    ReadTransaction,
    Report,
    RestoreFiles,
    SaveApplied,
    SaveConfigBaseline,
    SaveTransaction,
    Scrape,
    WriteFiles,
    act,
    ask,
    ask_maybe,
)
from eventedpleg.core.node.blocks.hostfault import Faulted, HostFault, retry_hint
from eventedpleg.core.node.blocks.judge import judge, kubelet_version
from eventedpleg.core.node.blocks.nodeapi import AgentNode
from eventedpleg.core.node.blocks.restart import Restarted, failed, restart_services
from eventedpleg.core.node.blocks.transaction import FileCopy, Transaction, sha256
from eventedpleg.core.node.blocks.verifyloop import measure, reading_now, verify
from eventedpleg.core.node.facts import benefit
from eventedpleg.core.node.facts.benefit import MeasuredWindow, Reading
from eventedpleg.core.node.facts.hostplan import ApplyPlan, HostFacts, ManagedState, Refusal
from eventedpleg.core.node.facts.promtext import Metrics
from eventedpleg.core.node.facts.verify import Expectation, Outcome, VerifyResult, gate_metric
from eventedpleg.core.versions import Version
from eventedpleg.models.nodeconfig import OnFailure
from eventedpleg.protocol import ANN_AGENT_OPTIONS, ANN_DESIRED, ANN_OWNER, Cause, NodeState
from eventedpleg.reasons import EventReason

# A host fault before the first write: by policy the node is Skipped (like a refusal: the host is not fit,
# the operator gives it back, `eventedpleg retry` takes it again once fixed), not Failed.
HOST_FAULT_STATE = NodeState.SKIPPED


@dataclass(frozen=True)
class Attempt:
    """One apply under way: what was asked, the host plan, and the transaction holding the backups."""

    node: AgentNode
    options: AgentOptions
    rendered: render.RenderedConfig
    plan: ApplyPlan
    version: Version
    previous: ManagedState  # what the agent had applied before this attempt
    txn: Transaction
    before: MeasuredWindow | None = None  # the kubelet's figures before the change


def apply(
    node: AgentNode, settings: AgentSettings, clock: Now, readings: Sequence[Reading] = ()
) -> Phase[None]:
    """Request, recover, plan (or refuse), begin, change, verify, then commit (and measure after) or fail.
    `readings`: the kubelet's counters kept while the node served (core.node.phases.servicephase).

    A host effect that fails (core.node.blocks.hostfault) before the first write skips the node, changing
    nothing; one that fails after it restores the backups (RolledBack, or Failed)."""
    try:
        attempt = yield from _prepare(node, settings, clock, readings)
    except Faulted as exc:
        yield from _host_fault(exc.fault, node)
        return
    if attempt is not None:
        yield from _carry_out(attempt, settings, clock)


def _prepare(
    node: AgentNode, settings: AgentSettings, clock: Now, readings: Sequence[Reading]
) -> Phase[Attempt | None]:
    """Everything before the first change to the node's files: the attempt, its backups recorded; None when
    the request was rejected or refused (reported)."""
    request = yield from _request(node, settings)
    if request is None:
        return None
    options, rendered = request
    recovered = yield from _recover(node, rendered.hash)
    if recovered is None:
        return None
    resumed, restored = recovered
    facts = yield from ask(ReadHost(rendered.enabled), HostFacts)
    previous = yield from ask(ReadApplied(), ManagedState)
    verdict = judge(node, facts, rendered, previous, allow_static_pods=options.allow_static_pods)
    if isinstance(verdict, Refusal):
        yield from _refuse(verdict, restored=restored, version=kubelet_version(node, facts), clock=clock)
        return None
    decision, version = verdict
    before = yield from _before(readings, settings, clock)
    txn = yield from _begin(resumed, rendered, decision, previous, clock)
    return Attempt(node, options, rendered, decision, version, previous, txn, before)


def _carry_out(attempt: Attempt, settings: AgentSettings, clock: Now) -> Phase[None]:
    """Change the host, verify, then commit (and measure after) or fail."""
    decision, version, options = attempt.plan, attempt.version, attempt.options
    cause: str | None = None
    try:
        yield from act(NodeEvent(EventReason.APPLYING, decision.summary))
        changed = yield from _change_host(attempt, clock)
        failure = changed.failure
        if failure is not None and failure.checks and failure.checks[0].name == "write":
            cause = failure.reason
        if failure is None:
            yield from act(Report(NodeState.VERIFYING, decision.summary))
            timeout = options.verify_timeout_seconds
            result = yield from verify(
                version, decision.expect, since=changed.at, timeout=timeout, settings=settings, clock=clock
            )
            if result.outcome is Outcome.PASS:
                yield from _commit(attempt, result)
                yield from _after(attempt, result, settings, clock)
                return
            failure = result
    except Faulted as exc:
        cause = exc.fault.line()
        failure = failed("host", cause, version)
    yield from _fail(attempt, failure, settings, clock, cause=cause)


def _after(attempt: Attempt, result: VerifyResult, settings: AgentSettings, clock: Now) -> Phase[None]:
    """The "after" benefit window, once Done is reported (the node is back in service meanwhile); a host
    fault here only costs the figures."""
    try:
        after = yield from measure(settings, clock)
    except Faulted:
        after = None
    figures = benefit.document(
        kubelet=result.kubelet,
        enabled=attempt.rendered.enabled,
        before=attempt.before,
        after=after,
        narrowed=attempt.version.minor_pair >= (1, 37),
    )
    yield from act(PublishBenefit(benefit.to_annotation(figures)))


def _host_fault(fault: HostFault, node: AgentNode) -> Phase[None]:
    """A host effect failed before anything was changed: skip the node, naming the path or command, the
    errno in words and the fix."""
    line = fault.line(retry_hint(node.name, node.annotations.get(ANN_OWNER, "")))
    reason = f"{line}; nothing was changed on the node"
    evidence = Evidence(result="fault", error=fault.line(), fix=fault.fix, changed="nothing")
    yield from act(Report(HOST_FAULT_STATE, reason, evidence))
    yield from act(NodeEvent(EventReason.HOST_FAULT, reason, warning=True))


def _before(readings: Sequence[Reading], settings: AgentSettings, clock: Now) -> Phase[MeasuredWindow | None]:
    """The window before the change, ending when the agent saw the cordon (else now, when it did not)."""
    if settings.benefit_window_seconds <= 0:
        return None
    end = benefit.closing(readings) or (yield from reading_now(clock))
    if end is None:
        return None
    return benefit.before(readings, end, seconds=settings.benefit_window_seconds)


def _reject(why: str) -> Phase[None]:
    """Bad input from the API side: nothing on the host was touched."""
    reason = f"{why}; nothing was changed on the node"
    evidence = Evidence(result="rejected", error=why, changed="nothing")
    yield from act(Report(NodeState.ROLLED_BACK, reason, evidence))
    yield from act(NodeEvent(EventReason.CONFIG_REJECTED, reason, warning=True))


def _request(
    node: AgentNode, settings: AgentSettings
) -> Phase[tuple[AgentOptions, render.RenderedConfig] | None]:
    """agent-options and the hash-named ConfigMap, re-validated; rejects (touching nothing) when bad."""
    desired = node.annotations[ANN_DESIRED]
    try:
        options = AgentOptions.from_json(node.annotations.get(ANN_AGENT_OPTIONS))
    except AgentOptionsError as exc:
        yield from _reject(str(exc))
        return None
    where = f"ConfigMap {settings.namespace}/{c.CONFIGMAP_PREFIX}{desired}"
    data = yield from ask_maybe(ReadConfigMap(settings.namespace, c.CONFIGMAP_PREFIX + desired), dict)
    if data is None:
        yield from _reject(f"{where} for desired-config {desired} not found")
        return None
    try:
        rendered = render.from_configmap(dict(data))
    except render.RenderError as exc:
        yield from _reject(f"{where} is invalid: {exc}")
        return None
    if rendered.hash != desired:
        yield from _reject(
            f"{where} content hashes to {rendered.hash}, not {desired} (modified after rendering?)"
        )
        return None
    return options, rendered


def _recover(node: AgentNode, desired: str) -> Phase[tuple[Transaction | None, Transaction | None] | None]:
    """Our own interrupted apply of `desired` (to resume), or a stale/halted one, restored exactly and
    returned second (its restored files take effect only after a restart). None when that restore failed
    (reported Failed: the node still holds an earlier apply's files)."""
    txn = yield from ask_maybe(ReadTransaction(), Transaction)
    if txn is None or (txn.target_hash == desired and not txn.halted):
        return txn, None
    # An apply that was interrupted or halted: put the node back exactly as it was first.
    fault = yield from ask_maybe(RestoreFiles(txn), HostFault)
    if fault is not None:
        retry = retry_hint(node.name, node.annotations.get(ANN_OWNER, ""))
        reason = f"restoring the files of an earlier apply failed: {fault.line(retry)}; needs a human"
        evidence = Evidence(result="fault", error=fault.line(), fix=fault.fix, changed="an earlier apply")
        yield from act(Report(NodeState.FAILED, reason, evidence))
        yield from act(NodeEvent(EventReason.ROLLBACK_FAILED, reason, warning=True))
        return None
    yield from act(EndTransaction())
    return None, txn


def _refuse(
    refusal: Refusal, *, restored: Transaction | None, version: Version | None, clock: Now
) -> Phase[None]:
    """Skip the node, changing nothing (beyond making a stale apply's restored files effective)."""
    if restored is not None and version is not None:
        yield from restart_services(
            restart_runtime=restored.restart_runtime,
            runtime_unit=restored.runtime_unit,
            version=version,
            clock=clock,
            reload_units=restored.reload_units,
        )
    evidence = Evidence(result="refused", reason=refusal.reason, fix=refusal.fix, changed="nothing")
    yield from act(Report(NodeState.SKIPPED, refusal.message, evidence))
    yield from act(NodeEvent(EventReason.UNSUPPORTED, refusal.message, warning=True))


def _backups(paths: list[str]) -> Phase[tuple[tuple[str, FileCopy], ...]]:
    copies = yield from ask(Backup(tuple(paths)), tuple)
    return tuple(zip(paths, copies, strict=True))


def _begin(
    resumed: Transaction | None,
    rendered: render.RenderedConfig,
    plan: ApplyPlan,
    previous: ManagedState,
    clock: Now,
) -> Phase[Transaction]:
    """Record exact backups before the first write (or extend those of our own interrupted apply)."""
    if resumed is None:
        pre_gate = plan.gate_before
        if pre_gate is None:
            pre_gate, _ = gate_metric((yield from ask_maybe(Scrape(), Metrics)))
        txn = Transaction(
            target_hash=rendered.hash,
            enabled=rendered.enabled,
            started=clock().isoformat(),
            backups=(yield from _backups([ch.path for ch in plan.changes])),
            restart_runtime=plan.restart_runtime,
            runtime_unit=plan.runtime_unit,
            previous=previous,
            pre_gate=pre_gate,
            reload_units=plan.reload_units,
            created_dirs=tuple(d for d in plan.created_dirs if d not in previous.created_dirs),
        )
    else:
        known = set(resumed.paths)
        extra = yield from _backups([ch.path for ch in plan.changes if ch.path not in known])
        txn = replace(
            resumed,
            backups=resumed.backups + extra,
            restart_runtime=resumed.restart_runtime or plan.restart_runtime,
            reload_units=resumed.reload_units or plan.reload_units,
        )
    yield from act(SaveTransaction(txn))
    return txn


def _change_host(attempt: Attempt, clock: Now) -> Phase[Restarted]:
    """Write the files, then restart; a failure (or None) and the kubelet's restart time."""
    plan = attempt.plan
    fault = yield from ask_maybe(WriteFiles(plan.changes, plan.remove_dirs), HostFault)
    if fault is not None:
        return Restarted(failed("write", fault.line(), attempt.version), clock())
    return (
        yield from restart_services(
            restart_runtime=plan.restart_runtime,
            runtime_unit=plan.runtime_unit,
            version=attempt.version,
            clock=clock,
            reload_units=plan.reload_units,
        )
    )


def _with_warnings(evidence: Evidence, plan: ApplyPlan) -> Evidence:
    return evidence.model_copy(update={"warnings": plan.warnings}) if plan.warnings else evidence


def _fail(
    attempt: Attempt,
    failure: VerifyResult,
    settings: AgentSettings,
    clock: Now,
    *,
    cause: str | None = None,
) -> Phase[None]:
    """Roll back (or halt) after a failed verification, or after `cause`: a host fault once the change had
    begun (its one line, core.node.blocks.hostfault)."""
    plan = attempt.plan
    evidence = _with_warnings(Evidence(failure=failure.evidence()), plan)
    why = cause or f"verification failed: {failure.reason}"
    retry = retry_hint(attempt.node.name, attempt.node.annotations.get(ANN_OWNER, ""))
    if attempt.options.on_failure is OnFailure.HALT:
        reason = f"{why}; node left as it failed (onFailure: Halt)"
        yield from _halt(reason, evidence, EventReason.VERIFICATION_FAILED)
        return
    rollback = yield from _rollback(attempt, settings, clock)
    evidence = evidence.model_copy(update={"rollback": rollback.evidence()})
    if rollback.outcome is Outcome.PASS:
        try:
            yield from act(EndTransaction())
        except Faulted as exc:  # the files are back; only our record of the apply is left behind
            evidence = evidence.model_copy(update={"error": exc.fault.line()})
        then = f"; once fixed, {retry}" if cause else ""
        reason = f"{why}; rolled back to the previous files and verified{then}"
        yield from act(Report(NodeState.ROLLED_BACK, reason, evidence))
        yield from act(NodeEvent(EventReason.ROLLED_BACK, reason, warning=True))
    else:
        reason = f"{why}; ROLLBACK FAILED: {rollback.reason}; needs a human"
        yield from _halt(reason, evidence, EventReason.ROLLBACK_FAILED)


def _halt(reason: str, evidence: Evidence, event: EventReason) -> Phase[None]:
    """Report Failed (the next request restores first); a fault recording the halt is said too."""
    try:
        yield from act(MarkHalted())
    except Faulted as exc:
        reason = f"{reason}; recording the halt failed too: {exc.fault.line()}"
    yield from act(Report(NodeState.FAILED, reason, evidence))
    yield from act(NodeEvent(event, reason, warning=True))


def _rollback(attempt: Attempt, settings: AgentSettings, clock: Now) -> Phase[VerifyResult]:
    """Restore the backups, restart and verify the node as it was; a host fault on the way is the
    rollback's failure."""
    try:
        return (yield from _restore_and_verify(attempt, settings, clock))
    except Faulted as exc:
        return failed("host", exc.fault.line(), attempt.version)


def _restore_and_verify(attempt: Attempt, settings: AgentSettings, clock: Now) -> Phase[VerifyResult]:
    txn, version = attempt.txn, attempt.version
    fault = yield from ask_maybe(RestoreFiles(txn), HostFault)
    if fault is not None:
        return failed("restore", fault.line(), version)
    restarted = yield from restart_services(
        restart_runtime=txn.restart_runtime,
        runtime_unit=txn.runtime_unit,
        version=version,
        clock=clock,
        reload_units=txn.reload_units,
    )
    if restarted.failure is not None:
        return replace(restarted.failure, reason=f"after restoring the files: {restarted.failure.reason}")
    # Back to what the node ran before: healthy, with the gate as it was. Whether events flowed before is
    # not ours to demand (the previous state may itself have been a drifted one).
    expect = Expectation(gate=txn.pre_gate, in_use=None)
    timeout = attempt.options.verify_timeout_seconds
    return (
        yield from verify(
            version, expect, since=restarted.at, timeout=timeout, settings=settings, clock=clock
        )
    )


def _commit(attempt: Attempt, result: VerifyResult) -> Phase[None]:
    """Record what is now applied, end the transaction, and report Done."""
    plan = attempt.plan
    yield from _record_applied(attempt)
    yield from act(EndTransaction())
    evidence = _with_warnings(result.evidence(), plan)
    yield from act(
        Report(
            NodeState.DONE,
            result.reason,
            evidence,
            current=attempt.rendered.hash,
        )
    )
    message = result.reason + (f" (warnings: {'; '.join(plan.warnings)})" if plan.warnings else "")
    yield from act(NodeEvent(EventReason.VERIFIED, message, warning=bool(plan.warnings)))


def _record_applied(attempt: Attempt) -> Phase[None]:
    """The managed state (file digests, the --config edit) and the original --config bytes."""
    plan, enabled = attempt.plan, attempt.rendered.enabled
    written = {ch.path: sha256(ch.content) for ch in plan.changes if ch.content is not None}
    edit = plan.config_edit
    if edit is not None:
        written.pop(edit.path, None)  # an edited --config is tracked by its gate, not its bytes
        if attempt.previous.config_edit is None:  # first edit: keep the original bytes for an exact disable
            original = dict(attempt.txn.backups).get(edit.path)
            if original is not None and original.content is not None:
                yield from act(SaveConfigBaseline(original.content))
    elif not enabled:
        yield from act(DropConfigBaseline())
    state = ManagedState(
        hash=attempt.rendered.hash,
        enabled=enabled,
        files=written if enabled else {},
        config_edit=plan.config_edit if enabled else None,
        # An apply resumed after a restart of the agent finds the directories already there: the
        # transaction still knows which of them the first run created.
        created_dirs=tuple(dict.fromkeys(plan.created_dirs + attempt.txn.created_dirs)) if enabled else (),
    )
    yield from act(SaveApplied(state))


def _begin_take_back(
    node: AgentNode,
    options: AgentOptions,
    off: render.RenderedConfig,
    clock: Now,
    *,
    why: str,
    evidence: Evidence,
) -> Phase[Attempt | None]:
    """The guard's rollback up to its backups: the host judged for the turned-off config, the runtime's
    files left out (only the kubelet restarts). None, with the node reported Failed, when refused."""
    try:
        facts = yield from ask(ReadHost(False), HostFacts)
        previous = yield from ask(ReadApplied(), ManagedState)
        verdict = judge(node, facts, off, previous, allow_static_pods=True)
        if isinstance(verdict, Refusal):
            refused = f"{why}; taking the gate off refused: {verdict.message}"
            yield from _halt(refused, evidence, EventReason.ROLLBACK_FAILED)
            return None
        plan, version = verdict
        runtime_files = {d.path for d in runtimes.dropins()}
        plan = replace(
            plan,
            changes=tuple(ch for ch in plan.changes if ch.path not in runtime_files),
            restart_runtime=False,
        )
        txn = yield from _begin(None, off, plan, previous, clock)
    except Faulted as exc:
        failed_ = f"{why}; taking the gate off failed: {exc.fault.line()}"
        yield from _halt(failed_, evidence, EventReason.ROLLBACK_FAILED)
        return None
    return Attempt(node, options, off, plan, version, previous, txn)


def take_back(
    node: AgentNode, settings: AgentSettings, clock: Now, *, why: str, evidence: Evidence
) -> Phase[bool]:
    """The guard's rollback of a Done node that keeps failing (core.node.phases.guardphase): the apply of the
    turned-off config, in place, through the same steps (backups, write, restart, verify generic PLEG,
    record), except that the runtime's setting stays and so only the kubelet restarts. RolledBack with
    `evidence` and the typed cause (protocol.Cause.GUARD_ROLLBACK as the evidence's result); a refusal or
    a failed verification restores the gate-on files and ends Failed (needs a human). Whether it ended
    RolledBack."""
    request = yield from _request(node, settings)
    if request is None:
        return False
    options, rendered = request
    off = render.render(enabled=False, owner=rendered.owner, kubelet_config_mode=rendered.kubelet_config_mode)
    evidence = evidence.model_copy(update={"result": Cause.GUARD_ROLLBACK.value})
    attempt = yield from _begin_take_back(node, options, off, clock, why=why, evidence=evidence)
    if attempt is None:
        return False
    version = attempt.version
    try:
        changed = yield from _change_host(attempt, clock)
        result = changed.failure
        if result is None:
            timeout = options.verify_timeout_seconds
            result = yield from verify(
                version,
                attempt.plan.expect,
                since=changed.at,
                timeout=timeout,
                settings=settings,
                clock=clock,
            )
    except Faulted as exc:
        result = failed("host", exc.fault.line(), version)
    if result.outcome is not Outcome.PASS:
        restored = yield from _rollback(attempt, settings, clock)
        evidence = evidence.model_copy(update={"failure": result.evidence(), "rollback": restored.evidence()})
        reason = (
            f"{why}; taking the gate off failed: {result.reason}; the gate-on files are back; needs a human"
        )
        yield from _halt(reason, evidence, EventReason.ROLLBACK_FAILED)
        return False
    yield from _record_applied(attempt)
    yield from act(EndTransaction())
    evidence = evidence.model_copy(update={"rollback": result.evidence()})
    reason = f"{why}; the gate is off again (generic PLEG verified, only the kubelet restarted)"
    yield from act(Report(NodeState.ROLLED_BACK, reason, evidence, forget_current=True))
    yield from act(NodeEvent(EventReason.GUARD_ROLLED_BACK, reason, warning=True))
    return True
