"""NodeConfig models: defaults, clear errors naming the field, unknown fields rejected, CRD in sync."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from eventedpleg import crdgen
from eventedpleg.models.nodeconfig import NodeConfigSpec, Rollout

# (spec, field the error must name, words the message must contain). The same list is applied to a real
# API server in tests/cluster, so the CEL rules and these validators are held to the same cases.
BAD_SPECS: list[tuple[dict[str, Any], str, str]] = [
    ({"eventedPleg": True, "rollout": {"maxUnavailable": -1}}, "maxUnavailable", ">= 1"),
    ({"eventedPleg": True, "rollout": {"maxUnavailable": 0}}, "maxUnavailable", ">= 1"),
    ({"eventedPleg": True, "rollout": {"maxUnavailable": "150%"}}, "maxUnavailable", "percentage"),
    ({"eventedPleg": True, "rollout": {"maxUnavailable": "0%"}}, "maxUnavailable", "percentage"),
    ({"eventedPleg": True, "rollout": {"maxUnavailable": "abc"}}, "maxUnavailable", "percentage"),
    ({"eventedPleg": True, "runtime": "docker"}, "runtime", "'auto', 'containerd' or 'cri-o'"),
    ({"eventedPleg": True, "bogus": 1}, "bogus", "Extra inputs are not permitted"),
    ({"eventedPleg": True, "drain": {"timeout": 5}}, "timeout", "Extra inputs are not permitted"),
    ({"eventedPleg": True, "rollout": {"window": {"start": "22:00"}}}, "window", "set together"),
    ({"eventedPleg": True, "rollout": {"window": {"start": "25:00", "end": "01:00"}}}, "start", "pattern"),
    ({"eventedPleg": True, "rollout": {"window": {"days": ["monday"]}}}, "window", "needs window.start"),
    ({"eventedPleg": True, "rollout": {"window": {"days": ["mon"]}}}, "days", "'monday'"),
    (
        {"eventedPleg": True, "rollout": {"window": {"timeZone": "Mars/Olympus"}}},
        "timeZone",
        "unknown time zone",
    ),
    ({"eventedPleg": True, "rollout": {"window": {"timeZone": "Local"}}}, "timeZone", "unknown time zone"),
    ({"eventedPleg": True, "drain": {"onTimeout": "Ignore"}}, "onTimeout", "'Fail', 'Skip' or 'ForceDelete'"),
    ({"eventedPleg": True, "drain": {"onBlocked": "Evict"}}, "onBlocked", "'Skip', 'Wait' or 'Fail'"),
    (
        {"eventedPleg": True, "rollout": {"alertGate": {"prometheusUrl": "prometheus:9090"}}},
        "prometheusUrl",
        "pattern",
    ),
    ({"eventedPleg": True, "rollout": {"postNodeDelaySeconds": -1}}, "postNodeDelaySeconds", "greater than"),
    ({"eventedPleg": True, "rollout": {"order": {"by": "Label"}}}, "order", "label is required"),
    ({"eventedPleg": True, "rollout": {"order": {"label": "rank"}}}, "order", "label is required"),
    ({"eventedPleg": True, "rollout": {"order": {"by": "Age"}}}, "by", "'Name', 'OldestFirst' or 'Label'"),
    (
        {"eventedPleg": True, "rollout": {"order": {"by": "Label", "label": "-rank"}}},
        "label",
        "pattern",
    ),
    (
        {"eventedPleg": True, "drain": {"taintBeforeCordon": {"effect": "NoExecute"}}},
        "effect",
        "'PreferNoSchedule' or 'NoSchedule'",
    ),
    ({"eventedPleg": True, "drain": {"taintBeforeCordon": {"seconds": 3601}}}, "seconds", "less than"),
    ({"eventedPleg": True, "drain": {"taintBeforeCordon": {"key": "a b"}}}, "key", "pattern"),
    *(
        ({"eventedPleg": True, "drain": {"taintBeforeCordon": {"key": key}}}, "key", "reserved taint key")
        for key in (
            "node.kubernetes.io/out-of-service",
            "node-role.kubernetes.io/control-plane",
            "node.cloudprovider.kubernetes.io/uninitialized",
            "ToBeDeletedByClusterAutoscaler",
            "DeletionCandidateOfClusterAutoscaler",
            "karpenter.sh/disrupted",
            "cluster-autoscaler.kubernetes.io/scale-down-disabled",
        )
    ),
    ({"eventedPleg": "yes please"}, "eventedPleg", "valid boolean"),
    ({"eventedPleg": True, "rollout": {"canary": {"nodes": "two"}}}, "nodes", "valid integer"),
    ({"eventedPleg": True, "rollout": {"maxFailedNodes": 0}}, "maxFailedNodes", ">= 1"),
    ({"eventedPleg": True, "rollout": {"maxFailedNodes": "0%"}}, "maxFailedNodes", "percentage"),
    ({"eventedPleg": True, "rollout": {"maxFailedNodes": "120%"}}, "maxFailedNodes", "percentage"),
    ({"eventedPleg": True, "rollout": {"maxFailedNodes": "two"}}, "maxFailedNodes", "percentage"),
    ({"eventedPleg": True, "rollout": {"steps": [1, 0]}}, "steps", ">= 1"),
    ({"eventedPleg": True, "rollout": {"steps": ["5%", "101%"]}}, "steps", "percentage"),
    (
        {
            "eventedPleg": True,
            "rollout": {
                "window": {"start": "01:00", "end": "03:00"},
                "windows": [{"start": "22:00", "end": "23:00"}],
            },
        },
        "rollout",
        "move rollout.window into rollout.windows",
    ),
    ({"eventedPleg": True, "rollout": {"windows": [{"start": "22:00"}]}}, "windows", "set together"),
    (
        {"eventedPleg": True, "drain": {"gracePeriodSeconds": -2}},
        "gracePeriodSeconds",
        "greater than or equal to -1",
    ),
    (
        {"eventedPleg": True, "verification": {"timeoutSeconds": 5}},
        "timeoutSeconds",
        "greater than or equal to 10",
    ),
    (
        {"eventedPleg": True, "nodeSelector": {"matchExpressions": [{"key": "a", "operator": "In"}]}},
        "matchExpressions",
        "values must be non-empty",
    ),
    *(
        (
            {"eventedPleg": True, "drain": {"rules": [{"behavior": behavior, "order": 0}]}},
            "rules",
            "only be set",
        )
        for behavior in ("Skip", "WaitCompleted")
    ),
    ({"eventedPleg": True, "drain": {"rules": [{"order": 1}]}}, "rules", "Field required"),
    (
        {"eventedPleg": True, "drain": {"rules": [{"behavior": "Evict"}]}},
        "rules",
        "'Drain', 'Skip' or 'WaitCompleted'",
    ),
    (
        {"eventedPleg": True, "drain": {"rules": [{"behavior": "Drain", "order": 2**31}]}},
        "rules",
        "less than or equal to 2147483647",
    ),
    (
        {"eventedPleg": True, "drain": {"rules": [{"behavior": "Skip", "namespaces": ["Kube_System"]}]}},
        "rules",
        "pattern",
    ),
    ({"eventedPleg": True, "drain": {"rules": [{"behavior": "Skip"}] * 33}}, "rules", "at most 32"),
    ({"eventedPleg": True, "guard": {"enabled": "maybe"}}, "enabled", "valid boolean"),
    (
        {"eventedPleg": True, "guard": {"incidentsBeforeRollback": 0}},
        "incidentsBeforeRollback",
        "greater than or equal to 1",
    ),
    (
        {"eventedPleg": True, "guard": {"incidentsBeforeRollback": 101}},
        "incidentsBeforeRollback",
        "less than or equal to 100",
    ),
    ({"eventedPleg": True, "guard": {"windowSeconds": 599}}, "windowSeconds", "greater than or equal to 600"),
    (
        {"eventedPleg": True, "guard": {"windowSeconds": 2592001}},
        "windowSeconds",
        "less than or equal to 2592000",
    ),
    ({"eventedPleg": True, "guard": {"incidents": 3}}, "incidents", "Extra inputs are not permitted"),
    ({}, "eventedPleg", "Field required"),
]


@pytest.mark.parametrize(("spec", "field", "words"), BAD_SPECS)
def test_bad_specs_are_rejected_naming_the_field(spec: dict[str, Any], field: str, words: str) -> None:
    with pytest.raises(ValidationError) as err:
        NodeConfigSpec.model_validate(spec)
    text = str(err.value)
    assert field in text
    assert words in text


@pytest.mark.parametrize(
    "key", ["eventedpleg.io/draining", "example.com/node.kubernetes.io", "node.kubernetes.io.example.com/x"]
)
def test_a_taint_key_of_ones_own_is_accepted(key: str) -> None:
    """Only the reserved prefixes themselves are refused: a key that merely contains one is the user's."""
    spec = NodeConfigSpec.model_validate({"eventedPleg": True, "drain": {"taintBeforeCordon": {"key": key}}})
    assert spec.drain.taint_before_cordon is not None and spec.drain.taint_before_cordon.key == key


def test_defaults_follow_the_design() -> None:
    spec = NodeConfigSpec.model_validate({"eventedPleg": True})
    api = spec.to_api()
    assert api["rollout"]["maxUnavailable"] == 1
    assert api["rollout"]["canary"] == {"nodes": 1, "soakSeconds": 120}
    assert api["rollout"]["onFailure"] == "Rollback"
    assert api["drain"] == {
        "mode": "CordonAndDrain",
        "inPlace": {"onIneligible": "Drain"},  # InPlace where unsafe: drained first, as before
        "timeoutSeconds": 600,
        "gracePeriodSeconds": -1,
        "deleteEmptyDirData": True,
        "force": False,
        "onTimeout": "Fail",
        "podSelector": {"matchLabels": {}, "matchExpressions": []},  # every pod kubectl evicts
        "skipWaitForDeleteTimeoutSeconds": 0,
        "blockingPodSelector": {"matchLabels": {}, "matchExpressions": []},  # empty: off
        "onBlocked": "Skip",  # a drain that could never finish: the node is never cordoned
        "retries": 2,  # a drain blocked by a PDB is taken again, after 300 s then 600 s
        "retryBackoffSeconds": 300,
        "rules": [],  # no order, no exceptions: every pod kubectl drain would evict, at once
    }
    assert api["rollout"]["stallAfterSeconds"] == 1800
    assert (api["rollout"]["steps"], api["rollout"]["windows"], api["rollout"]["approval"]) == (
        [],
        [],
        "Automatic",
    )
    assert api["rollout"]["maxFailedNodes"] == 1
    assert api["verification"] == {"timeoutSeconds": 300}
    # The guard is on: kubelets 1.32-1.36 are Supported only so (core/compat.py); 2 incidents in 24 h.
    assert api["guard"] == {"enabled": True, "incidentsBeforeRollback": 2, "windowSeconds": 86400}
    assert (api["runtime"], api["kubeletConfig"], api["onDelete"]) == ("auto", "DropInOnly", "Revert")
    assert api["includeControlPlane"] is False
    assert api["allowRisky"] is False
    assert api["healFallback"] is True


def test_round_trip_through_the_api_form() -> None:
    spec = NodeConfigSpec.model_validate(
        {
            "eventedPleg": True,
            "rollout": {
                "maxUnavailable": "10%",
                "window": {"days": ["friday"], "start": "22:00", "end": "04:00"},
            },
        }
    )
    assert NodeConfigSpec.model_validate(spec.to_api()) == spec


@pytest.mark.parametrize("value", [1, 7, "1%", "10%", "99%", "100%"])
def test_good_max_unavailable(value: int | str) -> None:
    assert Rollout.model_validate({"maxUnavailable": value}).max_unavailable == value


def test_committed_crd_matches_the_models() -> None:
    assert crdgen.main(["--check"]) == 0, "run `python -m eventedpleg.crdgen`"


def test_crd_is_structural() -> None:
    """No $ref, no anyOf, no additionalProperties:false beside properties, no title (structural rules)."""
    crd = yaml.safe_load(crdgen.render_crd())
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]

    def walk(node: Any, path: str) -> None:
        if isinstance(node, dict):
            assert not {"$ref", "anyOf", "title", "$defs", "propertyNames"} & set(node), path
            if "properties" in node:
                assert "additionalProperties" not in node, path
                assert node.get("type") == "object", path
            for key, value in node.items():
                walk(value, f"{path}.{key}")
        elif isinstance(node, list):
            for i, item in enumerate(node):
                walk(item, f"{path}[{i}]")

    walk(schema, "")
    spec = schema["properties"]["spec"]
    assert spec["required"] == ["eventedPleg"]
    max_unavailable = spec["properties"]["rollout"]["properties"]["maxUnavailable"]
    assert max_unavailable["x-kubernetes-int-or-string"] is True
    assert max_unavailable["x-kubernetes-validations"]
    columns = crd["spec"]["versions"][0]["additionalPrinterColumns"]
    assert [col["name"] for col in columns if not col.get("priority")] == [
        "EventedPLEG",
        "Updated",
        "Total",
        "Ready",
        "Stalled",
        "Age",
        "Message",
    ]
    # -o wide adds the other conditions
    assert [col["name"] for col in columns if col.get("priority") == 1] == [
        "Available",
        "Progressing",
        "Degraded",
        "Paused",
    ]
    assert {col["jsonPath"] for col in columns if col["name"] == "Message"} == {
        '.status.conditions[?(@.type=="Ready")].message'
    }
    assert crd["spec"]["versions"][0]["subresources"] == {"status": {}}
    assert crd["spec"]["scope"] == "Cluster"


def test_readme_reference_and_matrix_are_generated_from_the_code() -> None:
    from eventedpleg import docgen  # noqa: PLC0415

    assert docgen.main(["--check"]) == 0, "run `python -m eventedpleg.docgen`"


def _undescribed(schema: dict[str, Any], path: str) -> list[str]:
    """Every property below `schema` that `kubectl explain` would print without a description."""
    missing = [] if schema.get("description") else [path]
    for name, child in schema.get("properties", {}).items():
        missing += _undescribed(child, f"{path}.{name}")
    if "properties" in schema.get("items", {}):  # a scalar item (a day, a node name) is its list's
        missing += _undescribed(schema["items"], f"{path}[]")
    return missing


def test_every_crd_field_has_a_description() -> None:
    root = crdgen.build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    missing = _undescribed(root["properties"]["spec"], "spec") + _undescribed(
        root["properties"]["status"], "status"
    )
    assert missing == []
    assert root["description"].startswith("NodeConfig turns the kubelet's Evented PLEG on or off")


def test_an_alert_pattern_that_does_not_compile_is_an_invalid_spec() -> None:
    # No CEL function checks a regular expression at admission: the operator reports it (InvalidSpec).
    with pytest.raises(ValidationError, match="not a regular expression"):
        NodeConfigSpec.model_validate(
            {"eventedPleg": True, "rollout": {"alertGate": {"alertNameRegexp": "("}}}
        )
