"""drain.rules and the pods they act on, drawn for the rollout world's property tests: rules
as a NodeConfig writes them, pods of a few kinds in namespaces with labels, a Job's pods completing."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from hypothesis import strategies as st

from eventedpleg_lab.sim.rolloutworld import T0, pod

# The world's Namespaces (every Namespace carries kubernetes.io/metadata.name)
NAMESPACES = {
    "shop": {"kubernetes.io/metadata.name": "shop", "team": "web"},
    "monitoring": {"kubernetes.io/metadata.name": "monitoring", "team": "ops"},
    "batch": {"kubernetes.io/metadata.name": "batch", "team": "ops"},
}
APPS = {  # app label -> (namespace, controller kind)
    "web": ("shop", "ReplicaSet"),
    "db": ("shop", "StatefulSet"),
    "prom": ("monitoring", "ReplicaSet"),
    "job": ("batch", "Job"),
}
NAMESPACE_SELECTORS = st.sampled_from(
    [
        None,
        None,
        {"matchLabels": {"team": "ops"}},
        {"matchLabels": {"team": "web"}},
        {
            "matchExpressions": [
                {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["batch", "monitoring"]}
            ]
        },
    ]
)


@st.composite
def drain_rule(draw: st.DrawFn) -> dict[str, Any]:
    behavior = draw(st.sampled_from(["Drain", "Drain", "Skip", "WaitCompleted"]))
    body: dict[str, Any] = {"behavior": behavior}
    # Only a Job's pods complete: a WaitCompleted rule selects them, so every wait ends.
    app = "job" if behavior == "WaitCompleted" else draw(st.sampled_from([None, *APPS]))
    if app is not None:
        body["podSelector"] = {"matchLabels": {"app": app}}
    if (namespaces := draw(NAMESPACE_SELECTORS)) is not None:
        body["namespaceSelector"] = namespaces
    if behavior == "Drain" and draw(st.booleans()):
        body["order"] = draw(st.integers(-1, 3))
    return body


DRAIN_RULES = st.lists(drain_rule(), max_size=4)


@st.composite
def node_pods(draw: st.DrawFn) -> tuple[list[dict[str, Any]], dict[str, datetime]]:
    """A node's pods, and when its Job pods complete (SimNode.pods, SimNode.completes)."""
    bodies, completes = [], {}
    for i, app in enumerate(draw(st.lists(st.sampled_from(sorted(APPS)), max_size=4))):
        namespace, owner = APPS[app]
        bodies.append(pod(f"{app}-{i}", namespace=namespace, labels={"app": app}, owner=owner))
        if owner == "Job":
            completes[f"{namespace}/{app}-{i}"] = T0 + timedelta(seconds=draw(st.sampled_from([5, 40, 120])))
    return bodies, completes
