"""Text reports for the CLI and the demo: verdict tables and rollout progress, pure, over plain dicts."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from eventedpleg.core import compat, hostcheck, runtimes
from eventedpleg.core.rollout import podhealth
from eventedpleg.core.rollout.agentpod import pod_node
from eventedpleg.core.rollout.drain import pods as drainpods
from eventedpleg.core.rollout.drain.budgets import Elsewhere
from eventedpleg.core.rollout.drain.placement import Destination, destination_of
from eventedpleg.core.rollout.drain.policy import DrainPolicy
from eventedpleg.core.rollout.drain.rules import NO_NAMESPACES, NamespaceLabels
from eventedpleg.core.rollout.drain.survey import survey
from eventedpleg.core.rollout.drain.takeverdict import SkipCause, TakeKind, TakeVerdict, classify
from eventedpleg.core.rollout.nodeorder import order_key
from eventedpleg.core.rollout.planner.taking import NO_AGENT, take_candidate
from eventedpleg.core.rollout.snapshot import NodeView
from eventedpleg.models.nodeconfig import HealthGate, KubeletConfigMode, OnDrainBlocked, RolloutOrder
from eventedpleg.protocol import Cause, NodeState, format_time

MAX_REASON = 90


def table(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    rows = [list(map(str, row)) for row in rows]
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    return "\n".join(lines)


def short(text: str, limit: int = MAX_REASON) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def writes(verdict: compat.Verdict) -> str:
    if verdict.targets is None:
        return "nothing (skipped)"
    profile = runtimes.profile_of(verdict.runtime)
    parts = ["kubelet drop-in"]
    if profile is not None and profile.dropin is not None:
        parts.append(profile.dropin.purpose)
    return " + ".join(parts)


def agent_pod_text(node: str, pods: Sequence[Mapping[str, Any]]) -> str:
    """What the agent DaemonSet's pod for `node` says about itself (one line): none, not scheduled (the
    scheduler's message), a container waiting or terminated (its own reason), not ready, or running."""
    mine = [p for p in pods if pod_node(p) == node]
    if not mine:
        return (
            "no agent pod for this node: the agent DaemonSet does not place one here (the node's taints "
            "its tolerations lack, its nodeSelector or affinity)"
        )
    pod = mine[0]
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    name = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
    conditions = {str(cond.get("type")): cond for cond in status.get("conditions") or []}
    scheduled = conditions.get("PodScheduled") or {}
    if not (pod.get("spec") or {}).get("nodeName"):
        why = scheduled.get("message") or scheduled.get("reason") or "not scheduled yet"
        return f"agent pod {name} not scheduled: {why}"
    for container in status.get("containerStatuses") or []:
        state = container.get("state") or {}
        waiting = state.get("waiting") or {}
        if waiting:
            last = ((container.get("lastState") or {}).get("terminated")) or {}
            before = f" (last exit {last.get('exitCode')}: {last.get('reason', '')})" if last else ""
            message = f": {waiting['message']}" if waiting.get("message") else ""
            return f"agent pod {name}: {waiting.get('reason', 'Waiting')}{message}{before}"
        terminated = state.get("terminated") or {}
        if terminated:
            exit_code, why = terminated.get("exitCode"), terminated.get("reason", "")
            return f"agent pod {name}: terminated, exit {exit_code}: {why}"
    ready = conditions.get("Ready") or {}
    if ready.get("status") != "True":
        return f"agent pod {name} not ready ({status.get('phase', '?')})"
    return f"agent pod {name} is running and ready: its first host check is still to come"


@dataclass(frozen=True)
class PreflightRow:
    node: NodeView
    verdict: compat.Verdict
    evict: int  # pods its drain would evict (every order of drain.rules)
    take: TakeVerdict  # what the Cordon step would do with it now (core.rollout.drain.takeverdict)
    host: hostcheck.HostCheck | None  # its agent's own check (None: no agent has said yet)
    refusal: str  # what that check says the agent would refuse in this kubeletConfig mode ("" if fine)
    no_agent: str = ""  # why the node shows no live agent, with its agent pod's own word ("" when live)
    not_ready: tuple[str, ...] = ()  # rollout.healthGate's pods on it not Ready: it waits in service
    orders: int = 0  # drain.rules: how many orders its evictions go in (0: no rule orders them)
    wait_completed: tuple[str, ...] = ()  # drain.rules WaitCompleted pods its drain would wait for

    @property
    def never(self) -> str:
        """What would keep its drain from ever finishing, as the operator acts on it ("" when nothing)."""
        return self.take.why if self.take.kind is TakeKind.BLOCK else ""

    def taken(self, policy: compat.Policy, drain: DrainPolicy) -> bool:
        """The rollout would take this node (Wait takes it once the blocker is gone, a held node once
        nothing holds it)."""
        blocked = self.take.kind is TakeKind.BLOCK and drain.on_blocked is not OnDrainBlocked.WAIT
        return self.verdict.eligible(policy) and not blocked and self.take.kind is not TakeKind.SKIP


def preflight_rows(
    nodes: Sequence[NodeView],
    policy: compat.Policy,
    pods: Sequence[Mapping[str, Any]],
    pdbs: Sequence[Mapping[str, Any]],
    drain: DrainPolicy,
    mode: str = KubeletConfigMode.DROP_IN_ONLY.value,
    *,
    now: datetime,
    order: RolloutOrder | None = None,
    agent_pods: Sequence[Mapping[str, Any]] = (),
    health_gate: HealthGate | None = None,
    turning_on: bool = True,
    maintenance: Mapping[str, Sequence[str]] | None = None,
    allow_force_delete: bool = False,
    namespaces: NamespaceLabels = NO_NAMESPACES,
    cluster: Sequence[NodeView] | None = None,
) -> list[PreflightRow]:
    """Each node's verdict, and what the operator's Cordon step would do with it now: the same
    classification (core.rollout.drain.takeverdict) over the same survey of its pods (static pods, pods no
    PodDisruptionBudget or drain option lets go, drain.blockingPodSelector, `maintenance`: other
    maintenance owners' claims by node), in the order the rollout takes the nodes (`order`:
    spec.rollout.order). `turning_on`: eventedPleg is on (only then may an agent refuse);
    `allow_force_delete`: as the operator's --allow-force-delete; `namespaces`: the Namespaces' labels,
    for drain.rules' namespaceSelector (read as the operator does, k8s.drain.namespace_labels)."""
    on_node: dict[str, list[Mapping[str, Any]]] = {}
    for pod in pods:
        on_node.setdefault(str((pod.get("spec") or {}).get("nodeName", "")), []).append(pod)
    gate = health_gate or HealthGate()
    unready = podhealth.not_ready(podhealth.guarding(gate, pods), [n.name for n in nodes])
    claims = maintenance or {}
    places = [destination_of(view) for view in (nodes if cluster is None else cluster)]
    pending = [pod for pod in pods if (pod.get("status") or {}).get("phase") == "Pending"]
    out = []
    for node in sorted(nodes, key=order_key(order or RolloutOrder())):
        mine = on_node.get(node.name, [])
        selection = drainpods.select_pods(mine, drain.options(now, namespaces=namespaces))
        facts = node.facts
        if selection.mirror_pods:
            facts = compat.NodeFacts(**{**facts.__dict__, "has_mirror_pods": True})
        verdict = compat.verdict(facts, policy)
        found = survey(
            mine,
            drain,
            now=now,
            pdbs=lambda _: pdbs,
            maintenance=claims.get(node.name, ()),
            namespaces=namespaces,
            elsewhere=_elsewhere(node.name, places, pending),
        )
        refusal_mode = mode if turning_on else ""
        candidate = take_candidate(
            node, drain, policy, refusal_mode=refusal_mode, allow_force_delete=allow_force_delete
        )
        host = hostcheck.parse(node.marks.host_check)
        refusal = host.refusal(mode) if host is not None and turning_on else ""
        absent = hostcheck.absence(node.marks.host_check, now)
        no_agent = f"{absent}; {agent_pod_text(node.name, agent_pods)}" if absent else ""
        row = PreflightRow(
            node,
            verdict,
            len(selection.drained),
            classify(candidate, found),
            host,
            refusal,
            no_agent,
            unready.get(node.name, ()),
            orders=len({order for _, order in selection.later}) + 1 if selection.order is not None else 0,
            wait_completed=tuple(str(ref) for ref in selection.wait_completed),
        )
        out.append(row)
    return out


def _elsewhere(node: str, places: Sequence[Destination], pending: Sequence[Mapping[str, Any]]) -> Elsewhere:
    """Where `node`'s evicted pods could go: the other nodes, the Pending pods of the namespaces asked."""

    def pending_in(names: tuple[str, ...]) -> list[Mapping[str, Any]]:
        return [pod for pod in pending if (pod.get("metadata") or {}).get("namespace") in names]

    return Elsewhere(lambda: [place for place in places if place.name != node], pending_in)


def _drain_text(row: PreflightRow) -> str:
    match row.take.kind:
        case TakeKind.BLOCK:
            return "never finishes"
        case TakeKind.IN_PLACE:
            return "in place"
        case TakeKind.HOLD:
            return "held"
    text = f"{row.evict} pod(s)" if row.evict else "nothing to evict"
    if row.orders > 1:
        text += f" in {row.orders} orders"
    if row.wait_completed:
        text += f", waits for {len(row.wait_completed)} to complete"
    return text


def preflight_table(
    rows: Sequence[PreflightRow], policy: compat.Policy, drain: DrainPolicy, *, wide: bool
) -> str:
    def verdict_text(v: compat.Verdict) -> str:
        return f"{v.level}" + (" (eligible)" if v.level is compat.Level.RISKY and v.eligible(policy) else "")

    def reason(row: PreflightRow) -> str:
        text = row.verdict.summary
        if row.refusal:
            text += f"; host: {row.refusal}"
        if row.never:
            text += f"; drain: {row.never}" + (f"; {row.take.hint}" if row.take.hint else "")
        if row.take.kind is TakeKind.HOLD:
            text += f"; held, not cordoned while: {row.take.why}"
        if row.take.cause is SkipCause.NOT_IN_PLACE:
            text += f"; not safe in place: {row.take.why} (drain.inPlace.onIneligible: Skip)"
        elif row.take.kind is TakeKind.TAKE and row.take.why:
            text += f"; drained first, not in place: {row.take.why}"
        if row.no_agent:
            text += f"; no live agent: {row.no_agent}"
        if row.not_ready:
            text += f"; waits, pods not Ready (rollout.healthGate): {', '.join(row.not_ready)}"
        return text if wide else short(text)

    def host_text(row: PreflightRow) -> str:
        return "no agent" if row.no_agent else "refuses" if row.refusal else "ok"

    headers = ["NODE", "KUBELET", "RUNTIME", "VERDICT", "WRITES", "HOST", "DRAIN", "REASON"]
    body = [
        (
            row.node.name,
            row.node.facts.kubelet_version or "?",
            row.node.facts.runtime_version or "?",
            verdict_text(row.verdict),
            writes(row.verdict),
            host_text(row),
            _drain_text(row) if row.verdict.eligible(policy) else "-",
            reason(row),
        )
        for row in rows
    ]
    eligible = sum(1 for row in rows if row.verdict.eligible(policy))
    footer = f"\n{eligible} of {len(rows)} node(s) eligible"
    if any(row.verdict.level is compat.Level.RISKY and not row.verdict.eligible(policy) for row in rows):
        footer += " (Risky nodes need spec.allowRisky: true)"
    refused = sum(1 for row in rows if row.refusal and row.verdict.eligible(policy))
    if refused:
        footer += f"\n{refused} of them refused by their agent's host check: not cordoned, marked Skipped"
    absent = [row.node.name for row in rows if row.no_agent and row.verdict.eligible(policy)]
    if absent:
        footer += (
            f"\n{len(absent)} of them without a live agent (HOST no agent; -o wide says why): not cordoned "
            f"until their agent runs (rollout.onNoAgent): {', '.join(absent[:10])}"
        )
    gated = [row.node.name for row in rows if row.not_ready and row.verdict.eligible(policy)]
    if gated:
        footer += (
            f"\n{len(gated)} of them with pods of rollout.healthGate not Ready: not cordoned until they "
            f"are: {', '.join(gated[:10])}"
        )
    held = [row.node.name for row in rows if row.take.kind is TakeKind.HOLD and row.verdict.eligible(policy)]
    if held:
        footer += (
            f"\n{len(held)} of them held where they are, not cordoned while that lasts: "
            f"{', '.join(held[:10])}"
        )
    strict = [
        row.node.name
        for row in rows
        if row.take.cause is SkipCause.NOT_IN_PLACE and row.verdict.eligible(policy)
    ]
    if strict:
        footer += (
            f"\n{len(strict)} of them not safe to update in place (drain.inPlace.onIneligible: Skip): "
            f"not cordoned, marked Skipped: {', '.join(strict[:10])}"
        )
    footer += _advisories_text(rows)
    blocked = sum(1 for row in rows if row.never and row.verdict.eligible(policy))
    if blocked:
        then = {
            OnDrainBlocked.SKIP: "not cordoned, marked Skipped",
            OnDrainBlocked.WAIT: "left in service; the rollout waits for them",
            OnDrainBlocked.FAIL: "not cordoned, marked Failed",
        }[drain.on_blocked]
        footer += (
            f"\n{blocked} of them with a drain that could never finish as things are: {then} "
            f"(drain.onBlocked: {drain.on_blocked})"
        )
    return table(headers, body) + footer


def _advisories_text(rows: Sequence[PreflightRow]) -> str:
    """Known bugs that do not change a verdict, each once, with the nodes it concerns."""
    nodes: dict[str, list[str]] = {}
    for row in rows:
        for advisory in row.verdict.advisories:
            nodes.setdefault(advisory, []).append(row.node.name)
    text = ""
    for advisory, names in nodes.items():
        shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        text += f"\nnote ({shown}): {advisory}"
    return text


def preflight_json(rows: Sequence[PreflightRow], policy: compat.Policy) -> str:
    return json.dumps(
        [
            {
                "node": row.node.name,
                "kubeletVersion": row.node.facts.kubelet_version,
                "containerRuntimeVersion": row.node.facts.runtime_version,
                "verdict": str(row.verdict.level),
                "eligible": row.verdict.eligible(policy),
                "reasons": list(row.verdict.reasons),
                "notes": list(row.verdict.notes),
                "advisories": list(row.verdict.advisories),
                "writes": {
                    "kubeletDropIn": bool(row.verdict.targets and row.verdict.targets.kubelet_dropin),
                    "crioDropIn": bool(row.verdict.targets and row.verdict.targets.runtime_dropin),
                    "note": row.verdict.targets.runtime_note if row.verdict.targets else "",
                },
                "drain": {
                    "evict": row.evict,
                    "orders": row.orders,
                    "waitCompleted": list(row.wait_completed),
                    "neverFinishes": row.never,
                },
                "take": {"kind": str(row.take.kind), "why": row.take.why},
                "host": None
                if row.host is None
                else {"checked": format_time(row.host.at), "refusal": row.refusal},
                "agent": {"live": not row.no_agent, "why": row.no_agent},
                "podsNotReady": list(row.not_ready),
            }
            for row in rows
        ],
        indent=2,
    )


def _condition(status: Mapping[str, Any], kind: str) -> Mapping[str, Any]:
    for cond in status.get("conditions") or []:
        if cond.get("type") == kind:
            return cond  # type: ignore[no-any-return]
    return {}


def benefit_text(text: str) -> str:
    """The agent's before/after figures (eventedpleg.io/benefit JSON, see core/node/facts/benefit.py) in one
    line: its own summary, e.g. `before: relist every 1.0s, kubelet 31m; after: no relist in 30s, kubelet 24m,
    2 pod starts 1.4s mean`."""
    try:
        data = json.loads(text) if text else {}
    except ValueError:
        return ""
    return str(data.get("summary") or "") if isinstance(data, dict) else ""


def _order(spec: Mapping[str, Any]) -> RolloutOrder:
    """spec.rollout.order as the API server stored it (the default when absent or not readable)."""
    try:
        return RolloutOrder.model_validate((spec.get("rollout") or {}).get("order") or {})
    except ValidationError:
        return RolloutOrder()


def needs_agent_pods(nodeconfig: Mapping[str, Any]) -> bool:
    """Status names a node waiting for its agent: the agent pods say why (read only then)."""
    notes = (nodeconfig.get("status") or {}).get("nodeStatuses") or []
    return any(n.get("cause") == Cause.NO_AGENT for n in notes)


@dataclass(frozen=True)
class StatusRow:
    """One node in a NodeConfig's hands, as `eventedpleg status` shows it (every output format)."""

    name: str
    kubelet: str
    runtime: str
    state: str
    done: bool  # Done, and runs the NodeConfig's current rendered config
    cordoned: bool
    detail: str  # Done: the agent's before/after figures; else the reason of its state
    config: str  # the rendered-config hash the node runs ("" when none)
    since: datetime | None  # when it entered `state`


def status_rows(
    nodeconfig: Mapping[str, Any],
    nodes: Sequence[NodeView],
    agent_pods: Sequence[Mapping[str, Any]] | None = None,
) -> list[StatusRow]:
    """The nodes in our hands, in the order the rollout takes them."""
    name = nodeconfig["metadata"]["name"]
    spec = nodeconfig.get("spec") or {}
    status = nodeconfig.get("status") or {}
    notes = {n["name"]: n for n in status.get("nodeStatuses") or []}
    rows = []
    for node in sorted(nodes, key=order_key(_order(spec))):
        marks = node.marks
        note = notes.get(node.name, {})
        # A node waiting for approval of a new config may carry the state of an older one: status says
        # what it waits for now.
        ours = marks.owner == name and note.get("state") != NodeState.AWAITING_APPROVAL
        state = marks.state.value if marks.state and ours else note.get("state", "")
        if not state:
            continue
        reason = marks.reason if ours else note.get("reason", "")
        if agent_pods is not None and not ours and note.get("cause") == Cause.NO_AGENT:  # the pod's own word
            reason = f"{NO_AGENT}{agent_pod_text(node.name, agent_pods)}"
        rows.append(
            StatusRow(
                name=node.name,
                kubelet=node.facts.kubelet_version,
                runtime=node.facts.runtime_version,
                state=state,
                done=state == "Done" and bool(marks.current) and marks.current == status.get("renderedHash"),
                cordoned=node.unschedulable,
                detail=benefit_text(marks.benefit) if state == "Done" else reason,
                config=marks.current if ours else "",
                since=marks.since if ours else None,
            )
        )
    return rows


def status_view(
    nodeconfig: Mapping[str, Any],
    nodes: Sequence[NodeView],
    *,
    now_text: str = "",
    agent_pods: Sequence[Mapping[str, Any]] | None = None,
    wide: bool = False,
) -> str:
    """What `eventedpleg status` and the demo print: conditions, counts, nodes in our hands (in the order
    the rollout takes them). `wide` adds each node's config hash and since when it is in its state, and
    does not shorten the detail."""
    name = nodeconfig["metadata"]["name"]
    spec = nodeconfig.get("spec") or {}
    status = nodeconfig.get("status") or {}
    counts = status.get("nodes") or {}
    lines = [
        f"NodeConfig {name}: eventedPleg={str(spec.get('eventedPleg')).lower()}  "
        f"config={status.get('renderedHash', '-')}  {now_text}".rstrip(),
        f"nodes: {counts.get('updated', 0)}/{counts.get('eligible', 0)} updated, "
        f"{counts.get('updating', 0)} updating, {counts.get('failed', 0)} failed, "
        f"{counts.get('skipped', 0)} skipped, {counts.get('total', 0)} selected"
        + (f", {counts['awaitingApproval']} awaiting approval" if counts.get("awaitingApproval") else ""),
    ]
    for kind in ("Ready", "Available", "Progressing", "Degraded", "Paused", "Stalled"):
        cond = _condition(status, kind)
        if cond:
            message = f": {short(str(cond.get('message')), 110)}" if cond.get("message") else ""
            lines.append(f"  {kind:<12} {cond.get('status', '?'):<6} {cond.get('reason', '')}{message}")
    headers = ["NODE", "KUBELET", "RUNTIME", "STATE", "CORDONED"]
    headers += ["CONFIG", "SINCE", "DETAIL"] if wide else ["DETAIL"]
    body = []
    for row in status_rows(nodeconfig, nodes, agent_pods):
        cells = [row.name, row.kubelet, row.runtime, row.state + (" ✓" if row.done else "")]
        cells.append("yes" if row.cordoned else "")
        if wide:
            cells += [row.config or "-", format_time(row.since) if row.since else "-"]
        body.append((*cells, " ".join(row.detail.split()) if wide else short(row.detail, 100)))
    if body:
        lines += ["", table(headers, body)]
    return "\n".join(lines)


STATUS_API_VERSION = "cli.eventedpleg.io/v1"  # the document's version: fields are only ever added to it


def status_document(
    nodeconfig: Mapping[str, Any],
    nodes: Sequence[NodeView],
    agent_pods: Sequence[Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """`eventedpleg status -o json|yaml`: the NodeConfig's summary and the nodes table's rows, with the same
    names as the NodeConfig's own fields (camelCase), so scripts need not parse the table."""
    meta = nodeconfig["metadata"]
    spec = nodeconfig.get("spec") or {}
    status = nodeconfig.get("status") or {}
    counts = status.get("nodes") or {}
    return {
        "apiVersion": STATUS_API_VERSION,
        "kind": "StatusReport",
        "nodeConfig": {
            "name": meta["name"],
            "generation": int(meta.get("generation") or 0),
            "observedGeneration": int(status.get("observedGeneration") or 0),
            "eventedPleg": bool(spec.get("eventedPleg")),
            "renderedHash": str(status.get("renderedHash") or ""),
            "nodes": {
                key: int(counts.get(key) or 0)
                for key in ("total", "eligible", "updated", "updating", "failed", "skipped")
            },
            "conditions": [
                {key: str(cond.get(key) or "") for key in ("type", "status", "reason", "message")}
                for cond in status.get("conditions") or []
            ],
        },
        "nodes": [
            {
                "name": row.name,
                "kubeletVersion": row.kubelet,
                "containerRuntimeVersion": row.runtime,
                "state": row.state,
                "current": row.done,
                "cordoned": row.cordoned,
                "config": row.config,
                "since": format_time(row.since) if row.since else None,
                "detail": " ".join(row.detail.split()),
            }
            for row in status_rows(nodeconfig, nodes, agent_pods)
        ],
    }


def condition_status(nodeconfig: Mapping[str, Any], kind: str) -> str:
    return str(_condition(nodeconfig.get("status") or {}, kind).get("status", "Unknown"))
