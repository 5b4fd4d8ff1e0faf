"""`eventedpleg status` (and the demo's live view): conditions, counts, and the nodes in our hands, with
the measured before/after figures of Done nodes (issue 8, item 4)."""

from __future__ import annotations

import json
from typing import Any

from eventedpleg import constants as c
from eventedpleg.cli.report import benefit_text, status_view
from eventedpleg.core.node import benefit
from eventedpleg.core.rollout.snapshot import node_view

HASH = "0123456789"


def _node(name: str, annotations: dict[str, str]) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "resourceVersion": "1", "annotations": annotations, "labels": {}},
        "spec": {},
        "status": {
            "nodeInfo": {"kubeletVersion": "v1.36.4", "containerRuntimeVersion": "containerd://2.2.9"}
        },
    }


def _figures() -> str:
    before = benefit.MeasuredWindow(seconds=30, relists=30, relist_interval_seconds=1.0, cpu_millicores=31.2)
    after = benefit.MeasuredWindow(seconds=30, relists=0, relist_interval_seconds=None, cpu_millicores=24.9)
    doc = benefit.document(kubelet="v1.36.4", enabled=True, before=before, after=after, narrowed=False)
    return benefit.to_annotation(doc)


def test_benefit_text_is_the_agents_summary() -> None:
    assert (
        benefit_text(_figures())
        == "before: relist every 1.0s, kubelet 31m; after: no relist in 30s, kubelet 25m"
    )
    # A kubelet without process_cpu_seconds_total (the simulated one): no made-up or "?" CPU figure.
    unknown = benefit.MeasuredWindow(seconds=30, relists=30, relist_interval_seconds=1.0, cpu_millicores=None)
    assert unknown.describe() == "relist every 1.0s"
    assert benefit_text("") == ""
    assert benefit_text("not json") == ""
    assert benefit_text(json.dumps(["a list"])) == ""


def test_status_shows_done_nodes_with_their_figures_and_failed_ones_with_their_reason() -> None:
    nodeconfig = {
        "metadata": {"name": "cluster"},
        "spec": {"eventedPleg": True},
        "status": {
            "renderedHash": HASH,
            "nodes": {"total": 2, "eligible": 2, "updated": 1, "failed": 1},
            "conditions": [
                {"type": "Degraded", "status": "True", "reason": "RolloutHalted", "message": "n2"}
            ],
        },
    }
    ours = {c.ANN_OWNER: "cluster", c.ANN_CURRENT: HASH}
    done = node_view(_node("n1", {**ours, c.ANN_STATE: "Done", c.ANN_BENEFIT: _figures()}))
    failed = node_view(_node("n2", {**ours, c.ANN_STATE: "RolledBack", c.ANN_REASON: "stream FAIL"}))

    text = status_view(nodeconfig, [done, failed])

    assert "nodes: 1/2 updated, 0 updating, 1 failed, 0 skipped, 2 selected" in text
    assert "Degraded     True   RolloutHalted: n2" in text
    row = next(line for line in text.splitlines() if line.startswith("n1 "))
    assert "Done ✓" in row and "after: no relist in 30s, kubelet 25m" in row
    assert "stream FAIL" in next(line for line in text.splitlines() if line.startswith("n2 "))
