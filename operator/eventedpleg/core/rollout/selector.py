"""Kubernetes LabelSelector matching (k8s.io/apimachinery/pkg/labels semantics), pure."""

from __future__ import annotations

from collections.abc import Mapping

from eventedpleg.models.nodeconfig import LabelSelector, SelectorOperator


def matches(selector: LabelSelector, labels: Mapping[str, str]) -> bool:
    """An empty selector matches everything, as for a MachineConfigPool or a Deployment."""
    for key, value in selector.match_labels.items():
        if labels.get(key) != value:
            return False
    for req in selector.match_expressions:
        present = req.key in labels
        if req.operator is SelectorOperator.IN and not (present and labels[req.key] in req.values):
            return False
        if req.operator is SelectorOperator.NOT_IN and present and labels[req.key] in req.values:
            return False
        if req.operator is SelectorOperator.EXISTS and not present:
            return False
        if req.operator is SelectorOperator.DOES_NOT_EXIST and present:
            return False
    return True
