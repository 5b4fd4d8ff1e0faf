"""The generated NodeConfig CRD on a real kube-apiserver: accepted, defaults applied, bad specs rejected at
admission naming the field, printer columns, status subresource, field descriptions in `kubectl explain`."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from eventedpleg import crdgen
from eventedpleg.models.nodeconfig import RESERVED_TAINT_MESSAGE, NodeConfigSpec, NodeConfigStatus
from eventedpleg_lab.localcluster.cluster import LocalCluster
from tests.unit.models.test_models import BAD_SPECS

pytestmark = pytest.mark.cluster

REPO = Path(__file__).resolve().parents[2]
# The cluster is shared with the operator's tests: our NodeConfigs go when this module is done.
TEST_LABEL = "eventedpleg.io/test"


def nodeconfig(name: str, spec: dict[str, Any]) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "eventedpleg.io/v1alpha1",
            "kind": "NodeConfig",
            "metadata": {"name": name, "labels": {TEST_LABEL: "crd"}},
            "spec": spec,
        }
    )


@pytest.fixture(scope="module")
def crd(cluster: LocalCluster) -> Iterator[LocalCluster]:
    applied = cluster.kubectl("apply", "-f", str(REPO / "crds"))
    assert applied.returncode == 0, applied.stderr
    assert "nodeconfigs.eventedpleg.io" in applied.stdout
    cluster.wait_established("nodeconfigs.eventedpleg.io")
    yield cluster
    cluster.kubectl("delete", "nodeconfigs", "-l", f"{TEST_LABEL}=crd", "--wait=false", check=True)


def table_row(output: str) -> dict[str, str]:
    """kubectl's table (header + one row) by column; an empty cell stays empty, unlike str.split()."""
    header, row = output.splitlines()[:2]
    starts = [i for i, ch in enumerate(header) if ch != " " and (i == 0 or header[i - 1] == " ")]
    bounds = [*starts[1:], None]
    return {header[a:b].strip(): row[a:b].strip() for a, b in zip(starts, bounds, strict=True)}


def get(cluster: LocalCluster, name: str) -> dict[str, Any]:
    out = cluster.kubectl("get", "nodeconfig", name, "-o", "json", check=True)
    data: dict[str, Any] = json.loads(out.stdout)
    return data


def test_minimal_nodeconfig_gets_every_default(crd: LocalCluster) -> None:
    created = crd.kubectl("apply", "-f", "-", stdin=nodeconfig("defaults", {"eventedPleg": True}))
    assert created.returncode == 0, created.stderr
    spec = get(crd, "defaults")["spec"]
    assert spec["rollout"]["maxUnavailable"] == 1
    assert spec["rollout"]["canary"] == {"nodes": 1, "soakSeconds": 120}
    assert spec["rollout"]["window"] == {"days": [], "start": "", "end": "", "timeZone": "UTC"}
    assert spec["rollout"]["stallAfterSeconds"] == 1800
    assert spec["rollout"]["postNodeDelaySeconds"] == 0
    assert spec["rollout"]["order"] == {"by": "Name", "label": ""}
    assert spec["rollout"]["alertGate"] == {"prometheusUrl": "", "alertNameRegexp": ".*"}  # off
    assert (spec["rollout"]["steps"], spec["rollout"]["windows"], spec["rollout"]["approval"]) == (
        [],
        [],
        "Automatic",
    )
    assert spec["drain"] == {
        "mode": "CordonAndDrain",
        "inPlace": {"onIneligible": "Drain"},
        "timeoutSeconds": 600,
        "gracePeriodSeconds": -1,
        "deleteEmptyDirData": True,
        "force": False,
        "onTimeout": "Fail",
        "onBlocked": "Skip",
        "podSelector": {"matchLabels": {}, "matchExpressions": []},  # every pod kubectl evicts
        "skipWaitForDeleteTimeoutSeconds": 0,
        "blockingPodSelector": {"matchLabels": {}, "matchExpressions": []},
        "retries": 2,
        "retryBackoffSeconds": 300,
        "rules": [],  # no drain order: every pod kubectl evicts, at once
    }
    assert spec["verification"] == {"timeoutSeconds": 300}
    assert spec["guard"] == {"enabled": True, "incidentsBeforeRollback": 2, "windowSeconds": 86400}
    assert (spec["runtime"], spec["kubeletConfig"], spec["onDelete"]) == ("auto", "DropInOnly", "Revert")
    assert (spec["includeControlPlane"], spec["healFallback"]) == (False, True)


def test_valid_specs_are_accepted(crd: LocalCluster) -> None:
    spec = {
        "eventedPleg": True,
        "runtime": "cri-o",
        "nodeSelector": {
            "matchLabels": {"pool": "a"},
            "matchExpressions": [
                {"key": "zone", "operator": "In", "values": ["z1"]},
                {"key": "gpu", "operator": "DoesNotExist"},
            ],
        },
        "rollout": {
            "maxUnavailable": "10%",
            "window": {
                "days": ["monday", "friday"],
                "start": "22:00",
                "end": "04:00",
                "timeZone": "Europe/Berlin",
            },
        },
    }
    applied = crd.kubectl("apply", "-f", "-", stdin=nodeconfig("valid-full", spec))
    assert applied.returncode == 0, applied.stderr
    assert get(crd, "valid-full")["spec"]["rollout"]["maxUnavailable"] == "10%"
    applied = crd.kubectl(
        "apply",
        "-f",
        "-",
        stdin=nodeconfig("valid-100", {"eventedPleg": False, "rollout": {"maxUnavailable": "100%"}}),
    )
    assert applied.returncode == 0, applied.stderr
    controls = {
        "eventedPleg": True,
        "rollout": {
            "maxFailedNodes": "10%",
            "steps": [1, "5%", "25%", "100%"],
            "approval": "Manual",
            "windows": [
                {"days": ["tuesday"], "start": "01:00", "end": "05:00"},
                {"start": "22:00", "end": "23:00", "timeZone": "Asia/Tokyo"},
            ],
        },
        "drain": {"mode": "InPlace", "inPlace": {"onIneligible": "Skip"}},
    }
    applied = crd.kubectl("apply", "-f", "-", stdin=nodeconfig("valid-controls", controls))
    assert applied.returncode == 0, applied.stderr
    stored = get(crd, "valid-controls")["spec"]
    assert (
        stored["rollout"]["steps"] == [1, "5%", "25%", "100%"]
        and stored["rollout"]["maxFailedNodes"] == "10%"
    )
    assert [w["timeZone"] for w in stored["rollout"]["windows"]] == ["UTC", "Asia/Tokyo"]


def field_path(spec: dict[str, Any], field: str, prefix: str = "spec") -> str:
    """The full path the API server reports for `field` (spec.rollout.window.start), found in the bad spec."""
    for key, value in spec.items():
        if key == field:
            return f"{prefix}.{key}"
        if isinstance(value, dict):
            found = field_path(value, field, f"{prefix}.{key}")
            if found:
                return found
    return f"{prefix}.{field}" if prefix == "spec" else ""  # absent: a required field missing at the top


# Beyond the unit list (the same bad specs the pydantic models reject): cases only the schema can get wrong.
EXTRA_BAD: list[tuple[dict[str, Any], str]] = [
    ({"eventedPleg": True, "rollout": {"canary": {"bogus": 1}}}, "spec.rollout.canary.bogus"),
    ({"eventedPleg": True, "kubeletConfig": "Edit"}, "spec.kubeletConfig"),
    ({"eventedPleg": True, "rollout": {"canary": {"nodes": -1}}}, "spec.rollout.canary.nodes"),
    ({"eventedPleg": True, "rollout": {"maxUnavailable": True}}, "spec.rollout.maxUnavailable"),
    (
        {"eventedPleg": True, "rollout": {"window": {"start": "7:00", "end": "08:00"}}},
        "spec.rollout.window.start",
    ),
    ({"eventedPleg": True, "onDelete": "Orphan"}, "spec.onDelete"),
]


@pytest.mark.parametrize(
    ("spec", "field"),
    [pytest.param(spec, field, id=f"{i:02d}-{field}") for i, (spec, field, _words) in enumerate(BAD_SPECS)]
    + [pytest.param(spec, field, id=f"x{i}-{field}") for i, (spec, field) in enumerate(EXTRA_BAD)],
)
def test_bad_spec_is_rejected_at_admission_naming_the_field(
    crd: LocalCluster, spec: dict[str, Any], field: str
) -> None:
    name = "bad-" + field.rsplit(".", 1)[-1].lower()
    # kubectl apply uses server-side strict field validation: unknown fields are errors, not warnings.
    result = crd.kubectl("apply", "-f", "-", stdin=nodeconfig(name, spec))
    assert result.returncode != 0, f"accepted: {spec}"
    path = field if field.startswith("spec.") else field_path(spec, field)
    assert path in result.stderr, result.stderr
    assert crd.kubectl("get", "nodeconfig", name).returncode != 0  # nothing half-created


@pytest.mark.parametrize("key", ["node.kubernetes.io/out-of-service", "ToBeDeletedByClusterAutoscaler"])
def test_a_reserved_taint_key_is_refused_at_admission_with_the_reason(crd: LocalCluster, key: str) -> None:
    """The CEL twin of TaintBeforeCordon._not_reserved: one line naming the field and why."""
    spec = {"eventedPleg": True, "drain": {"taintBeforeCordon": {"key": key}}}
    result = crd.kubectl("apply", "-f", "-", stdin=nodeconfig("reserved-taint", spec))
    assert result.returncode != 0, f"accepted: {spec}"
    said = f'spec.drain.taintBeforeCordon.key: Invalid value: "{key}": {RESERVED_TAINT_MESSAGE}'
    print(result.stderr.strip())
    assert said in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert crd.kubectl("get", "nodeconfig", "reserved-taint").returncode != 0


def test_printer_columns_and_status_subresource(crd: LocalCluster) -> None:
    applied = crd.kubectl("apply", "-f", "-", stdin=nodeconfig("columns", {"eventedPleg": True}))
    assert applied.returncode == 0, applied.stderr
    header = crd.kubectl("get", "nodeconfigs", check=True).stdout.splitlines()[0].split()
    assert header == ["NAME", "EVENTEDPLEG", "UPDATED", "TOTAL", "READY", "STALLED", "AGE", "MESSAGE"]
    wide = crd.kubectl("get", "nodeconfigs", "-o", "wide", check=True).stdout.splitlines()[0].split()
    assert wide == [
        "NAME",
        "EVENTEDPLEG",
        "UPDATED",
        "TOTAL",
        "READY",
        "STALLED",
        "AVAILABLE",
        "PROGRESSING",
        "DEGRADED",
        "PAUSED",
        "AGE",
        "MESSAGE",
    ]

    # Through /status: status is written, the spec change in the same patch is ignored.
    status = {
        "nodes": {"total": 5, "updated": 2},
        "conditions": [
            {
                "type": "Ready",
                "status": "False",
                "reason": "NodesUpdating",
                "message": "updating node-3 (Draining)",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
            },
            {
                "type": "Stalled",
                "status": "False",
                "reason": "AsExpected",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
            },
            {
                "type": "Available",
                "status": "False",
                "reason": "RollingOut",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
            },
            {
                "type": "Progressing",
                "status": "True",
                "reason": "RollingOut",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
            },
        ],
    }
    patch = json.dumps({"spec": {"eventedPleg": False}, "status": status})
    patched = crd.kubectl(
        "patch", "nodeconfig", "columns", "--subresource=status", "--type=merge", "-p", patch
    )
    assert patched.returncode == 0, patched.stderr
    obj = get(crd, "columns")
    assert obj["spec"]["eventedPleg"] is True
    assert obj["status"]["nodes"]["updated"] == 2
    assert obj["metadata"]["generation"] == 1  # a status write does not bump the generation

    row = table_row(crd.kubectl("get", "nodeconfig", "columns", check=True).stdout)
    assert row["EVENTEDPLEG"] == "true"
    assert (row["UPDATED"], row["TOTAL"]) == ("2", "5")
    assert (row["READY"], row["STALLED"], row["MESSAGE"]) == ("False", "False", "updating node-3 (Draining)")
    row = table_row(crd.kubectl("get", "nodeconfig", "columns", "-o", "wide", check=True).stdout)
    assert (row["AVAILABLE"], row["PROGRESSING"], row["DEGRADED"], row["PAUSED"]) == ("False", "True", "", "")
    assert row["MESSAGE"] == "updating node-3 (Draining)"

    # Through the main resource: the status part of a patch is ignored, the spec change lands.
    patch = json.dumps({"spec": {"eventedPleg": False}, "status": {"nodes": {"total": 99}}})
    patched = crd.kubectl("patch", "nodeconfig", "columns", "--type=merge", "-p", patch)
    assert patched.returncode == 0, patched.stderr
    obj = get(crd, "columns")
    assert obj["spec"]["eventedPleg"] is False
    assert obj["status"]["nodes"]["total"] == 5
    assert obj["metadata"]["generation"] == 2


def test_status_is_validated_too(crd: LocalCluster) -> None:
    applied = crd.kubectl("apply", "-f", "-", stdin=nodeconfig("status-check", {"eventedPleg": True}))
    assert applied.returncode == 0, applied.stderr
    bad = json.dumps(
        {
            "status": {
                "conditions": [
                    {
                        "type": "Happy",
                        "status": "True",
                        "reason": "x",
                        "lastTransitionTime": "2026-01-01T00:00:00Z",
                    }
                ]
            }
        }
    )
    patched = crd.kubectl(
        "patch", "nodeconfig", "status-check", "--subresource=status", "--type=merge", "-p", bad
    )
    assert patched.returncode != 0
    assert "status.conditions[0].type" in patched.stderr


def explain(cluster: LocalCluster, path: str, wanted: str) -> str:
    """`kubectl explain` output, whitespace folded; retried while the API server publishes the OpenAPI."""
    deadline = time.monotonic() + 60
    while True:
        out = cluster.kubectl("explain", path)
        text = " ".join(out.stdout.split())
        if (out.returncode == 0 and " ".join(wanted.split()) in text) or time.monotonic() > deadline:
            assert out.returncode == 0, out.stderr
            return text
        time.sleep(1)


def test_kubectl_explain_prints_the_field_descriptions(crd: LocalCluster) -> None:
    spec_schema = crdgen.schema_for(NodeConfigSpec)
    fields = {name: " ".join(prop["description"].split()) for name, prop in spec_schema["properties"].items()}
    spec = explain(crd, "nodeconfig.spec", fields["eventedPleg"])
    assert "The desired state: whether Evented PLEG is on" in spec
    for name, description in fields.items():
        assert f"{name} <" in spec, name
        assert description in spec, name
    window = spec_schema["properties"]["rollout"]["properties"]["window"]
    time_zone = window["properties"]["timeZone"]["description"]
    assert "IANA name" in explain(crd, "nodeconfig.spec.rollout.window.timeZone", time_zone)
    conditions = crdgen.schema_for(NodeConfigStatus)["properties"]["conditions"]["items"]["properties"]
    generation = conditions["observedGeneration"]["description"]
    assert generation in explain(crd, "nodeconfig.status.conditions", generation)
