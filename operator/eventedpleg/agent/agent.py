"""The node agent: acts on its own Node's annotations (protocol in eventedpleg.constants), on its own host.

Steps are generators that yield the seconds they want to wait (`Work`), so one agent can be driven by a
blocking loop (`drive`, production) and many by one scheduler over an injected clock (demo, benchmarks)
without a thread per node.

Apply: read the hash-named ConfigMap (re-validated) -> read the host -> decide (or refuse, touching
nothing) -> record exact backups in AGENT_STATE_DIR -> write atomically -> restart the runtime, THEN the
kubelet (k8s#129827) -> Verifying -> verify (version-aware, core.node.verify) -> Done, or restore the
backups exactly, restart, re-verify -> RolledBack (Failed if even that fails, or with onFailure=Halt).
After Done: drift (our files changed/removed) and silent fallback (k8s#129827), healed by a kubelet
restart when agent-options allow.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import TypeVar

from eventedpleg import constants as c
from eventedpleg.agent.hostfiles import HostFiles
from eventedpleg.agent.hostread import read_facts
from eventedpleg.agent.observe import KUBELET_UNIT, Observer
from eventedpleg.agent.statestore import StateStore, Transaction, sha256
from eventedpleg.constants import NodeState
from eventedpleg.core import render
from eventedpleg.core.agentoptions import AgentOptions, AgentOptionsError
from eventedpleg.core.node import benefit, kubeletconfig, kubeletlog
from eventedpleg.core.node.agentdecide import AgentAction, next_action
from eventedpleg.core.node.host import Host, KubeletEndpoint
from eventedpleg.core.node.hostplan import ApplyPlan, ManagedState, Refusal, decide
from eventedpleg.core.node.nodeapi import AgentApi, AgentNode
from eventedpleg.core.node.verify import (
    Check,
    Expectation,
    Outcome,
    VerifyResult,
    compact_json,
    evaluate,
    fallen_back,
    gate_metric,
)
from eventedpleg.core.versions import RuntimeKind, Version, VersionError, parse_runtime, parse_version
from eventedpleg.models.nodeconfig import OnFailure

T = TypeVar("T")
Work = Generator[float, None, T]
REASON_LIMIT = 1024
RESTART_PAUSE_SECONDS = 1.0  # see Agent._restart_services
_KEEP = object()


@dataclass(frozen=True)
class AgentSettings:
    namespace: str  # where the rendered-config ConfigMaps live (the operator's namespace)
    poll_seconds: float = 5.0
    # How long verification watches the signals before it may PASS (the 300 s vs 1 s relist contrast is
    # visible within seconds; 30 s leaves room for a late fallback). Capped at half the verify timeout.
    min_window_seconds: float = 30.0
    check_interval_seconds: float = 60.0
    max_heals_per_hour: int = 3
    # The eventedpleg.io/benefit figures: relists and kubelet CPU over a window of this length before the
    # change (steady kubelet) and again once verification passed (0 = do not measure).
    benefit_window_seconds: float = 30.0


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


@dataclass(frozen=True)
class Verified:
    """An attempt whose verification passed, with its eventedpleg.io/benefit figures: ready to commit."""

    attempt: Attempt
    result: VerifyResult
    figures: dict[str, object]


def drive(work: Work[T], sleep: Callable[[float], None]) -> T:
    """Run a step to completion, sleeping whenever it asks to wait."""
    try:
        while True:
            sleep(next(work))
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]


@dataclass
class Agent:
    node: str
    host: Host
    api: AgentApi
    settings: AgentSettings
    heals: list[datetime] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.files = HostFiles(self.host.root)
        self.store = StateStore(self.files)
        self.observer = Observer(self.host, self.api, self.node)

    # --- entry points -----------------------------------------------------------------------------------

    def on_node(self, seen: AgentNode) -> Work[None]:
        """React to one observed version of our Node."""
        if seen.name != self.node or next_action(seen.annotations) is not AgentAction.APPLY:
            return
        # Decide on a fresh read: a queued watch event may predate our own last report.
        node = self.api.get_node(self.node)
        if node is None or next_action(node.annotations) is not AgentAction.APPLY:
            return
        yield from self._apply(node)

    def check(self) -> Work[None]:
        """After Done: drift and silent fallback (run every check_interval_seconds)."""
        node = self.api.get_node(self.node)
        if node is None or next_action(node.annotations) is not AgentAction.WATCH:
            return
        yield from self._watch_done(node)

    # --- helpers ----------------------------------------------------------------------------------------

    @property
    def now(self) -> datetime:
        return self.host.clock.now()

    def _report(
        self,
        node: AgentNode,
        state: NodeState,
        reason: str,
        evidence: Mapping[str, object] | None = None,
        *,
        current: object = _KEEP,
        extra: Mapping[str, str | None] | None = None,
    ) -> bool:
        """Patch our annotations, only while desired-config is still what we acted on."""
        changes: dict[str, str | None] = {
            c.ANN_STATE: state.value,
            c.ANN_REASON: reason if len(reason) <= REASON_LIMIT else reason[: REASON_LIMIT - 1] + "…",
            c.ANN_STATE_SINCE: self.now.strftime("%Y-%m-%dT%H:%M:%SZ"),
        }
        if evidence is not None:
            changes[c.ANN_EVIDENCE] = compact_json(dict(evidence))
        if current is not _KEEP:
            changes[c.ANN_CURRENT] = current if isinstance(current, str) else None
        changes.update(extra or {})
        require = {c.ANN_DESIRED: node.annotations.get(c.ANN_DESIRED, "")}
        return self.api.patch_node_annotations(self.node, changes, require=require) is not None

    def _event(self, node: AgentNode, reason: str, message: str, *, warning: bool = False) -> None:
        self.api.emit_event(node, reason=reason, message=message[:1024], warning=warning)

    def _reject(self, node: AgentNode, why: str) -> None:
        """Bad input from the API side: nothing on the host was touched."""
        reason = f"{why}; nothing was changed on the node"
        self._report(
            node, NodeState.ROLLED_BACK, reason, {"result": "rejected", "error": why, "changed": "nothing"}
        )
        self._event(node, "ConfigRejected", reason, warning=True)

    def _version(self, node: AgentNode) -> Version | None:
        try:
            return parse_version(node.kubelet_version)
        except VersionError:
            return None

    def _is_crio(self, node: AgentNode) -> bool:
        try:
            return parse_runtime(node.runtime_version).kind is RuntimeKind.CRIO
        except VersionError:
            return False

    def _restart(self, unit: str) -> tuple[bool, str]:
        result = self.host.run(["systemctl", "restart", unit])
        return result.ok, "" if result.ok else result.summary()

    # --- apply: request, recover, plan (or refuse), measure, begin, change, verify, commit or fail -------

    def _request(self, node: AgentNode) -> tuple[AgentOptions, render.RenderedConfig] | None:
        """agent-options and the hash-named ConfigMap, re-validated; rejects (touching nothing) when bad."""
        desired = node.annotations[c.ANN_DESIRED]
        try:
            options = AgentOptions.from_json(node.annotations.get(c.ANN_AGENT_OPTIONS))
        except AgentOptionsError as exc:
            self._reject(node, str(exc))
            return None
        where = f"ConfigMap {self.settings.namespace}/{c.CONFIGMAP_PREFIX}{desired}"
        data = self.api.read_configmap(self.settings.namespace, c.CONFIGMAP_PREFIX + desired)
        if data is None:
            self._reject(node, f"{where} for desired-config {desired} not found")
            return None
        try:
            rendered = render.from_configmap(dict(data))
        except render.RenderError as exc:
            self._reject(node, f"{where} is invalid: {exc}")
            return None
        if rendered.hash != desired:
            self._reject(
                node, f"{where} content hashes to {rendered.hash}, not {desired} (modified after rendering?)"
            )
            return None
        return options, rendered

    def _apply(self, node: AgentNode) -> Work[None]:
        request = self._request(node)
        if request is None:
            return
        options, rendered = request
        resumed, restored = self._recover(rendered.hash)
        decision, version, previous = self._plan(node, rendered, options)
        if isinstance(decision, Refusal) or version is None:
            yield from self._refuse(node, _refusal(decision), restored=restored, version=version)
            return
        before = yield from self._measure()
        txn = self._begin(resumed, rendered, decision, previous)
        attempt = Attempt(node, options, rendered, decision, version, previous, txn)
        self._event(node, "Applying", decision.summary)
        failure, restart_at = yield from self._change_host(attempt)
        if failure is None:
            result = yield from self._verify_apply(attempt, since=restart_at)
            if result.outcome is Outcome.PASS:
                figures = yield from self._benefit(attempt, result, before)
                self._commit(Verified(attempt, result, figures))
                return
            failure = result
        yield from self._fail(attempt, failure)

    def _recover(self, desired: str) -> tuple[Transaction | None, Transaction | None]:
        """Our own interrupted apply of `desired` (to resume), or a stale/halted one, restored exactly and
        returned second (its restored files take effect only after a restart)."""
        txn = self.store.transaction()
        if txn is None or (txn.target_hash == desired and not txn.halted):
            return txn, None
        # An apply that was interrupted or halted: put the node back exactly as it was first.
        self._restore(txn)
        self.store.end()
        return None, txn

    def _plan(
        self, node: AgentNode, rendered: render.RenderedConfig, options: AgentOptions
    ) -> tuple[ApplyPlan | Refusal, Version | None, ManagedState]:
        """Read the host and decide (core.node.hostplan); also the kubelet version and our record."""
        facts = read_facts(self.host, self.files, node, enabling=rendered.enabled)
        facts = replace(facts, config_baseline=self.store.config_baseline())
        previous = self.store.applied()
        decision = decide(facts, rendered, previous, allow_static_pods=options.allow_static_pods)
        return decision, facts.kubelet_version or self._version(node), previous

    def _refuse(
        self, node: AgentNode, refusal: Refusal, *, restored: Transaction | None, version: Version | None
    ) -> Work[None]:
        """Skip the node, changing nothing (beyond making a stale apply's restored files effective)."""
        if restored is not None and version is not None:
            yield from self._restart_services(
                restart_runtime=restored.restart_runtime, runtime_unit=restored.runtime_unit, version=version
            )
        evidence = {"result": "refused", "reason": refusal.reason, "fix": refusal.fix, "changed": "nothing"}
        self._report(node, NodeState.SKIPPED, refusal.message, evidence)
        self._event(node, "Unsupported", refusal.message, warning=True)

    def _begin(
        self,
        resumed: Transaction | None,
        rendered: render.RenderedConfig,
        plan: ApplyPlan,
        previous: ManagedState,
    ) -> Transaction:
        """Record exact backups before the first write (or extend those of our own interrupted apply)."""
        if resumed is None:
            pre_gate = plan.gate_before
            if pre_gate is None:
                pre_gate, _ = gate_metric(self.observer.metrics())
            txn = Transaction(
                target_hash=rendered.hash,
                enabled=rendered.enabled,
                started=self.now.isoformat(),
                backups=tuple((ch.path, self.files.copy_of(ch.path)) for ch in plan.changes),
                restart_runtime=plan.restart_runtime,
                runtime_unit=plan.runtime_unit,
                previous=previous,
                pre_gate=pre_gate,
                protected=plan.protected_dirs,
            )
        else:
            known = set(resumed.paths)
            extra = tuple(
                (ch.path, self.files.copy_of(ch.path)) for ch in plan.changes if ch.path not in known
            )
            txn = replace(
                resumed,
                backups=resumed.backups + extra,
                restart_runtime=resumed.restart_runtime or plan.restart_runtime,
                protected=tuple(dict.fromkeys(resumed.protected + plan.protected_dirs)),
            )
        self.store.begin(txn)
        return txn

    def _change_host(self, attempt: Attempt) -> Work[tuple[VerifyResult | None, datetime]]:
        """Write the files, then restart; a failure (or None) and the kubelet's restart time."""
        failure = self._write(attempt.plan, attempt.version)
        if failure is not None:
            return failure, self.now
        plan = attempt.plan
        return (
            yield from self._restart_services(
                restart_runtime=plan.restart_runtime, runtime_unit=plan.runtime_unit, version=attempt.version
            )
        )

    def _write(self, plan: ApplyPlan, version: Version) -> VerifyResult | None:
        self.files.sweep_temp_files([ch.path for ch in plan.changes], plan.protected_dirs)
        try:
            for change in plan.changes:
                if change.content is None:
                    self.files.remove(change.path)
                else:
                    data = change.content.encode()
                    self.files.write_atomic(change.path, data, protected=plan.protected_dirs)
        except OSError as exc:
            return _failed("write", f"writing files failed: {exc}", version)
        return None

    def _restart_services(
        self, *, restart_runtime: bool, runtime_unit: str, version: Version
    ) -> Work[tuple[VerifyResult | None, datetime]]:
        """The runtime (when its config changed), THEN the kubelet: a kubelet that outlives a runtime restart
        falls back to generic PLEG for good (k8s#129827; compatibility §5). Returns a failure or None, and the
        kubelet's restart time (verification reads the journal from there)."""
        # journalctl --since has one-second resolution: the pauses keep the previous kubelet's lines (an old
        # startup error, the fallback it logs when the runtime goes away) out of the new kubelet's window.
        yield RESTART_PAUSE_SECONDS
        if restart_runtime:
            began = self.now
            ok, why = self._restart(runtime_unit)
            if not ok:
                tail = tuple(self.host.journal(runtime_unit, began)[-2:])
                return _failed("runtime", f"{runtime_unit} did not restart: {why}", version, tail), self.now
            yield RESTART_PAUSE_SECONDS
        restart_at = self.now
        ok, why = self._restart(KUBELET_UNIT)
        if not ok:
            return _failed("kubelet", f"kubelet did not restart: {why}", version), restart_at
        return None, restart_at

    def _verify_apply(self, attempt: Attempt, *, since: datetime) -> Work[VerifyResult]:
        self._report(attempt.node, NodeState.VERIFYING, attempt.plan.summary)
        timeout = attempt.options.verify_timeout_seconds
        return (yield from self._verify(attempt.version, attempt.plan.expect, since=since, timeout=timeout))

    def _benefit(
        self, attempt: Attempt, result: VerifyResult, before: benefit.MeasuredWindow | None
    ) -> Work[dict[str, object]]:
        """The eventedpleg.io/benefit figures: the window before the change against one after it passed."""
        after = yield from self._measure()
        return benefit.document(
            kubelet=result.kubelet,
            enabled=attempt.rendered.enabled,
            before=before,
            after=after,
            narrowed=attempt.version.minor_pair >= (1, 37),
        )

    def _fail(self, attempt: Attempt, failure: VerifyResult) -> Work[None]:
        node, plan = attempt.node, attempt.plan
        evidence: dict[str, object] = {"failure": failure.evidence()}
        if plan.warnings:
            evidence["warnings"] = list(plan.warnings)
        if attempt.options.on_failure is OnFailure.HALT:
            self.store.mark_halted()
            reason = f"verification failed: {failure.reason}; node left as it failed (onFailure: Halt)"
            self._report(node, NodeState.FAILED, reason, evidence)
            self._event(node, "VerificationFailed", reason, warning=True)
            return
        rollback = yield from self._rollback(attempt)
        evidence["rollback"] = rollback.evidence()
        if rollback.outcome is Outcome.PASS:
            self.store.end()
            reason = f"verification failed: {failure.reason}; rolled back to the previous files and verified"
            self._report(node, NodeState.ROLLED_BACK, reason, evidence)
            self._event(node, "RolledBack", reason, warning=True)
        else:
            self.store.mark_halted()
            reason = (
                f"verification failed: {failure.reason}; ROLLBACK FAILED: {rollback.reason}; needs a human"
            )
            self._report(node, NodeState.FAILED, reason, evidence)
            self._event(node, "RollbackFailed", reason, warning=True)

    def _commit(self, verified: Verified) -> None:
        """Record what is now applied, end the transaction, and report Done."""
        attempt, result = verified.attempt, verified.result
        plan, desired = attempt.plan, attempt.rendered.hash
        self._record_applied(attempt)
        self.store.end()
        evidence: dict[str, object] = dict(result.evidence())
        if plan.warnings:
            evidence["warnings"] = list(plan.warnings)
        self._report(
            attempt.node,
            NodeState.DONE,
            result.reason,
            evidence,
            current=desired,
            extra={c.ANN_BENEFIT: benefit.to_annotation(verified.figures)},
        )
        message = result.reason + (f" (warnings: {'; '.join(plan.warnings)})" if plan.warnings else "")
        self._event(attempt.node, "Verified", message, warning=bool(plan.warnings))

    def _record_applied(self, attempt: Attempt) -> None:
        """The managed state (file digests, the --config edit) and the original --config bytes."""
        plan, enabled = attempt.plan, attempt.rendered.enabled
        written = {ch.path: sha256(ch.content) for ch in plan.changes if ch.content is not None}
        edit = plan.config_edit
        if edit is not None:
            written.pop(edit.path, None)  # an edited --config is tracked by its gate, not its bytes
            if (
                attempt.previous.config_edit is None
            ):  # first edit: keep the original bytes for an exact disable
                original = dict(attempt.txn.backups).get(edit.path)
                if original is not None and original.content is not None:
                    self.store.save_config_baseline(original.content)
        elif not enabled:
            self.store.drop_config_baseline()
        state = ManagedState(
            hash=attempt.rendered.hash,
            enabled=enabled,
            files=written if enabled else {},
            config_edit=plan.config_edit if enabled else None,
        )
        self.store.save_applied(state)

    def _measure(self) -> Work[benefit.MeasuredWindow | None]:
        """Relists and kubelet CPU over benefit_window_seconds (two /metrics scrapes)."""
        seconds = self.settings.benefit_window_seconds
        first = self.observer.metrics() if seconds > 0 else None
        if first is None:
            return None
        start = self.now
        yield seconds
        return benefit.window(first, self.observer.metrics(), (self.now - start).total_seconds())

    def _restore(self, txn: Transaction) -> None:
        for path, copy in txn.backups:
            self.files.restore(path, copy, protected=txn.protected)

    def _rollback(self, attempt: Attempt) -> Work[VerifyResult]:
        txn, version = attempt.txn, attempt.version
        try:
            self._restore(txn)
        except OSError as exc:
            return _failed("restore", f"restoring files failed: {exc}", version)
        failure, restart_at = yield from self._restart_services(
            restart_runtime=txn.restart_runtime, runtime_unit=txn.runtime_unit, version=version
        )
        if failure is not None:
            return replace(failure, reason=f"after restoring the files: {failure.reason}")
        # Back to what the node ran before: healthy, with the gate as it was. Whether events flowed before is
        # not ours to demand (the previous state may itself have been a drifted one).
        expect = Expectation(gate=txn.pre_gate, in_use=None)
        timeout = attempt.options.verify_timeout_seconds
        return (yield from self._verify(version, expect, since=restart_at, timeout=timeout))

    # --- verify -----------------------------------------------------------------------------------------

    def _verify(
        self, version: Version, expect: Expectation, *, since: datetime, timeout: int
    ) -> Work[VerifyResult]:
        deadline = since + timedelta(seconds=timeout)
        poll = self.settings.poll_seconds
        min_window = min(self.settings.min_window_seconds, timeout / 2)
        while True:
            health = self.host.kubelet_get(KubeletEndpoint.HEALTHZ)
            if health.ok:
                break
            log = kubeletlog.scan(self.host.journal(KUBELET_UNIT, since))
            start_failure = log.example(*sorted(kubeletlog.START_FAILURES))
            if start_failure or self.now >= deadline:
                active = self.host.run(["systemctl", "is-active", KUBELET_UNIT])
                # A startup error while systemd still calls it active is an older attempt: keep waiting.
                if self.now < deadline and active.stdout.strip() == "active":
                    yield poll
                    continue
                waited = (self.now - since).total_seconds()
                detail = (
                    f"kubelet not healthy {waited:.0f}s after restart ({health.error or health.status}); "
                    f"systemctl is-active kubelet: {active.stdout.strip() or active.returncode}"
                )
                lines = (start_failure,) if start_failure else ()
                reason = f"kubelet did not start: {start_failure}" if start_failure else detail
                return VerifyResult(
                    Outcome.FAIL,
                    reason,
                    (Check("healthz", False, detail),),
                    lines,
                    str(version),
                    waited,
                )
            yield poll
        baseline = self.observer.metrics()
        t0 = self.now
        crio = expect.crio_pod_events is not None
        while True:
            yield poll
            window = (self.now - t0).total_seconds()
            obs = self.observer.observe(baseline=baseline, window=window, since=since, crio=crio)
            result = evaluate(version, expect, obs, min_window=min_window)
            if result.outcome is not Outcome.PENDING:
                return result
            if self.now >= deadline:
                return replace(
                    result, outcome=Outcome.FAIL, reason=f"timed out after {timeout}s: {result.reason}"
                )

    # --- after Done ---------------------------------------------------------------------------------------

    def _drift(self, managed: ManagedState, desired: str) -> str | None:
        if managed.hash != desired:
            return f"the agent's record on the host is for {managed.hash or 'nothing'}, not {desired}"
        for path, digest in sorted(managed.files.items()):
            data = self.files.read_bytes(path)
            if data is None:
                return f"{path} was removed"
            if sha256(data) != digest:
                return f"{path} was changed"
        edit = managed.config_edit
        if managed.enabled and edit is not None:
            text = self.files.read_text(edit.path)
            try:
                gate = None if text is None else kubeletconfig.config_gate(text, where=edit.path)
            except kubeletconfig.KubeletConfigError:
                gate = None
            if gate is not True:
                return (
                    f"featureGates.EventedPLEG in {edit.path} is no longer true (kubeadm upgrade rewrites it)"
                )
        return None

    def _watch_done(self, node: AgentNode) -> Work[None]:
        desired = node.annotations[c.ANN_DESIRED]
        managed = self.store.applied()
        drift = self._drift(managed, desired)
        if drift:
            reason = f"drift: {drift}"
            self._report(node, NodeState.DRIFTED, reason, {"result": "drift", "drift": drift}, current=None)
            self._event(node, "Drift", reason, warning=True)
            return
        if not managed.enabled:
            return
        proc = self.host.kubelet_process()
        metrics = self.observer.metrics()
        version = self._version(node)
        if proc is None or metrics is None or version is None:
            return  # kubelet down or restarting: the Node's Ready condition tells that story
        since = proc.started_at or (self.now - timedelta(hours=1))
        log = kubeletlog.scan(self.host.journal(KUBELET_UNIT, since))
        gate_on, gate_text = gate_metric(metrics)
        why = fallen_back(version, metrics, log)
        if gate_on is False:
            reason = f"drift: the running kubelet has EventedPLEG off ({gate_text})"
            self._report(
                node, NodeState.DRIFTED, reason, {"result": "drift", "drift": gate_text}, current=None
            )
            self._event(node, "Drift", reason, warning=True)
            return
        if why is None:
            return
        try:
            options = AgentOptions.from_json(node.annotations.get(c.ANN_AGENT_OPTIONS))
        except AgentOptionsError:
            options = AgentOptions()
        evidence: dict[str, object] = {"fallback": why}
        self.heals = [t for t in self.heals if self.now - t < timedelta(hours=1)]
        if not options.heal_fallback or len(self.heals) >= self.settings.max_heals_per_hour:
            cause = "healFallback is off" if not options.heal_fallback else "too many heals in the last hour"
            reason = f"fell back to generic PLEG ({why}); not healed: {cause}"
            self._report(node, NodeState.DRIFTED, reason, evidence, current=None)
            self._event(node, "FallbackDetected", reason, warning=True)
            return
        self.heals.append(self.now)
        self._event(
            node,
            "FallbackDetected",
            f"fell back to generic PLEG ({why}); restarting the kubelet",
            warning=True,
        )
        failure, restart_at = yield from self._restart_services(
            restart_runtime=False, runtime_unit="", version=version
        )
        if failure is None:
            expect = Expectation.enabled(crio=self._is_crio(node))
            timeout = options.verify_timeout_seconds
            result = yield from self._verify(version, expect, since=restart_at, timeout=timeout)
        else:
            result = failure
        evidence["heal"] = result.evidence()
        if result.outcome is Outcome.PASS:
            reason = f"healed a silent fallback to generic PLEG by restarting the kubelet (k8s#129827): {why}"
            self._report(node, NodeState.DONE, reason, evidence)
            self._event(node, "FallbackHealed", reason)
        else:
            reason = f"fell back to generic PLEG ({why}); kubelet restart did not heal it: {result.reason}"
            self._report(node, NodeState.DRIFTED, reason, evidence, current=None)
            self._event(node, "FallbackNotHealed", reason, warning=True)


def _refusal(decision: ApplyPlan | Refusal) -> Refusal:
    """The decision's refusal, or (for a plan) the one for a kubelet version that could not be read."""
    if isinstance(decision, Refusal):
        return decision
    return Refusal("cannot read the kubelet version", "check `kubelet --version` on the host")


def _failed(name: str, why: str, version: Version, lines: tuple[str, ...] = ()) -> VerifyResult:
    return VerifyResult(Outcome.FAIL, why, (Check(name, False, why),), lines, str(version))
