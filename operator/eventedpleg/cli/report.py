"""Text reports for the CLI and the demo: verdict tables and rollout progress, pure, over plain dicts."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from eventedpleg.core import compat
from eventedpleg.core.rollout.snapshot import NodeView

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
    parts = ["kubelet drop-in"]
    if verdict.targets.crio_dropin:
        parts.append("CRI-O drop-in")
    return " + ".join(parts)


def preflight_rows(
    nodes: Sequence[NodeView], policy: compat.Policy, static_pod_nodes: set[str]
) -> list[tuple[NodeView, compat.Verdict]]:
    out = []
    for node in sorted(nodes, key=lambda n: (n.zone, n.name)):
        facts = node.facts
        if node.name in static_pod_nodes:
            facts = compat.NodeFacts(**{**facts.__dict__, "has_mirror_pods": True})
        out.append((node, compat.verdict(facts, policy)))
    return out


def preflight_table(
    rows: Sequence[tuple[NodeView, compat.Verdict]], policy: compat.Policy, *, wide: bool
) -> str:
    def verdict_text(v: compat.Verdict) -> str:
        return f"{v.level}" + (" (eligible)" if v.level is compat.Level.RISKY and v.eligible(policy) else "")

    headers = ["NODE", "KUBELET", "RUNTIME", "VERDICT", "WRITES", "REASON"]
    body = [
        (
            n.name,
            n.facts.kubelet_version or "?",
            n.facts.runtime_version or "?",
            verdict_text(v),
            writes(v),
            v.summary if wide else short(v.summary),
        )
        for n, v in rows
    ]
    eligible = sum(1 for _, v in rows if v.eligible(policy))
    footer = f"\n{eligible} of {len(rows)} node(s) eligible"
    if any(v.level is compat.Level.RISKY and not v.eligible(policy) for _, v in rows):
        footer += " (Risky nodes need spec.allowRisky: true)"
    return table(headers, body) + footer


def preflight_json(rows: Sequence[tuple[NodeView, compat.Verdict]], policy: compat.Policy) -> str:
    return json.dumps(
        [
            {
                "node": n.name,
                "kubeletVersion": n.facts.kubelet_version,
                "containerRuntimeVersion": n.facts.runtime_version,
                "verdict": str(v.level),
                "eligible": v.eligible(policy),
                "reasons": list(v.reasons),
                "notes": list(v.notes),
                "writes": {
                    "kubeletDropIn": bool(v.targets and v.targets.kubelet_dropin),
                    "crioDropIn": bool(v.targets and v.targets.crio_dropin),
                    "note": v.targets.runtime_note if v.targets else "",
                },
            }
            for n, v in rows
        ],
        indent=2,
    )


def _condition(status: Mapping[str, Any], kind: str) -> Mapping[str, Any]:
    for cond in status.get("conditions") or []:
        if cond.get("type") == kind:
            return cond  # type: ignore[no-any-return]
    return {}


def benefit_text(text: str) -> str:
    """The agent's before/after figures (eventedpleg.io/benefit JSON, see core/node/benefit.py) in one line:
    its own summary, e.g. `before: relist every 1.0s, kubelet 31m; after: no relist in 30s, kubelet 24m`."""
    try:
        data = json.loads(text) if text else {}
    except ValueError:
        return ""
    return str(data.get("summary") or "") if isinstance(data, dict) else ""


def status_view(nodeconfig: Mapping[str, Any], nodes: Sequence[NodeView], *, now_text: str = "") -> str:
    """What `eventedpleg status` and the demo print: conditions, counts, nodes in our hands."""
    name = nodeconfig["metadata"]["name"]
    spec = nodeconfig.get("spec") or {}
    status = nodeconfig.get("status") or {}
    counts = status.get("nodes") or {}
    lines = [
        f"NodeConfig {name}: eventedPleg={str(spec.get('eventedPleg')).lower()}  "
        f"config={status.get('renderedHash', '-')}  {now_text}".rstrip(),
        f"nodes: {counts.get('updated', 0)}/{counts.get('eligible', 0)} updated, "
        f"{counts.get('updating', 0)} updating, {counts.get('failed', 0)} failed, "
        f"{counts.get('skipped', 0)} skipped, {counts.get('total', 0)} selected",
    ]
    for kind in ("Ready", "Available", "Progressing", "Degraded", "Paused", "Stalled"):
        cond = _condition(status, kind)
        if cond:
            message = f": {short(str(cond.get('message')), 110)}" if cond.get("message") else ""
            lines.append(f"  {kind:<12} {cond.get('status', '?'):<6} {cond.get('reason', '')}{message}")
    notes = {n["name"]: n for n in status.get("nodeStatuses") or []}
    rows = []
    for node in sorted(nodes, key=lambda n: (n.zone, n.name)):
        marks = node.marks
        note = notes.get(node.name, {})
        state = marks.state.value if marks.state and marks.owner == name else note.get("state", "")
        if not state:
            continue
        reason = marks.reason if marks.owner == name else note.get("reason", "")
        done = marks.current and marks.current == status.get("renderedHash")
        rows.append(
            (
                node.name,
                node.facts.kubelet_version,
                node.facts.runtime_version,
                state + (" ✓" if done and state == "Done" else ""),
                "yes" if node.unschedulable else "",
                short(benefit_text(marks.benefit) if state == "Done" else reason, 100),
            )
        )
    if rows:
        lines += ["", table(["NODE", "KUBELET", "RUNTIME", "STATE", "CORDONED", "DETAIL"], rows)]
    return "\n".join(lines)


def condition_status(nodeconfig: Mapping[str, Any], kind: str) -> str:
    return str(_condition(nodeconfig.get("status") or {}, kind).get("status", "Unknown"))
