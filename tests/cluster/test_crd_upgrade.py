"""Upgrading the CRD the documented way (`kubectl apply --server-side --force-conflicts -f crds/`) over the
previous release's CRD, installed the previous documented way (client-side `kubectl apply`), with objects in
place: they survive with spec, status and uid, and the new schema validates them and new writes.

The previous CRD is kept as a fixture (git show 528f701:crds/nodeconfig.yaml); replace it with the last
released one when the CRD changes.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from eventedpleg import constants as c
from eventedpleg import protocol
from eventedpleg_lab.localcluster.cluster import LocalCluster

pytestmark = pytest.mark.cluster

REPO = Path(__file__).resolve().parents[2]
PREVIOUS = Path(__file__).parent / "fixtures" / "nodeconfig-crd-528f701.yaml"
TEST_LABEL = f"{protocol.GROUP}/test"


def _get(cluster: LocalCluster, *args: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(cluster.kubectl("get", *args, "-o", "json", check=True).stdout)
    return data


def _established(cluster: LocalCluster) -> None:
    cluster.wait_established(c.CRD_NAME)


@pytest.fixture(scope="module", autouse=True)
def cleanup(cluster: LocalCluster) -> Iterator[None]:
    yield
    cluster.kubectl("delete", "nodeconfigs", "-l", f"{TEST_LABEL}=crd-upgrade", "--wait=false")
    # Whatever happened, leave the current CRD in place for the other modules on this cluster.
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(REPO / "crds"))


# Fields added to the spec since the previous CRD (the fixture), with their defaults.
EMPTY_SELECTOR: dict[str, object] = {"matchLabels": {}, "matchExpressions": []}
NEW_SECTIONS = frozenset({"guard"})
NEW_DEFAULTS: dict[tuple[str, str], object] = {
    ("guard", "enabled"): True,
    ("guard", "incidentsBeforeRollback"): 2,
    ("guard", "windowSeconds"): 86400,
    ("rollout", "stallAfterSeconds"): 1800,
    ("rollout", "postNodeDelaySeconds"): 0,
    ("rollout", "alertGate"): {"prometheusUrl": "", "alertNameRegexp": ".*"},
    ("rollout", "order"): {"by": "Name", "label": ""},
    ("drain", "retries"): 2,
    ("drain", "retryBackoffSeconds"): 300,
    ("drain", "onBlocked"): "Skip",
    ("drain", "podSelector"): EMPTY_SELECTOR,
    ("drain", "skipWaitForDeleteTimeoutSeconds"): 0,
    ("drain", "blockingPodSelector"): EMPTY_SELECTOR,
    ("drain", "mode"): "CordonAndDrain",
    ("rollout", "takeCordonedNodes"): False,
    ("rollout", "steps"): [],
    ("rollout", "windows"): [],
    ("rollout", "approval"): "Automatic",
    ("rollout", "onNoAgent"): "Skip",
    ("rollout", "healthGate"): {"podSelector": EMPTY_SELECTOR, "namespaces": [], "afterSeconds": 300},
    ("drain", "inPlace"): {"onIneligible": "Drain"},
    ("drain", "rules"): [],
}


NEW_STATUS_DEFAULTS: dict[str, object] = {"budgetHeldBy": []}  # a status field added since, defaulted on read
NEW_COUNT_DEFAULTS: dict[str, object] = {"awaitingApproval": 0}  # status.nodes counters added since


def _without(spec: dict[str, Any], added: Mapping[tuple[str, str], object]) -> dict[str, Any]:
    out = {key: dict(value) if isinstance(value, dict) else value for key, value in spec.items()}
    for section, key in added:
        out.get(section, {}).pop(key, None)
        if out.get(section) == {} and section in NEW_SECTIONS:
            del out[section]  # a whole section the old schema did not have
    return out


def test_server_side_apply_upgrades_the_crd_and_keeps_the_objects(cluster: LocalCluster) -> None:
    applied = cluster.kubectl("apply", "-f", str(PREVIOUS))
    assert applied.returncode == 0, applied.stderr
    _established(cluster)
    for example in ("nodeconfig.yaml", "nodeconfig-canary-window.yaml"):
        doc = yaml.safe_load((REPO / "examples" / example).read_text())
        doc["metadata"] = {
            "name": f"upgrade-{example.removesuffix('.yaml')}",
            "labels": {TEST_LABEL: "crd-upgrade"},
        }
        cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(doc), check=True)
    status = {"nodes": {"total": 3, "updated": 1}, "observedGeneration": 1}
    cluster.kubectl(
        "patch", "nodeconfig", "upgrade-nodeconfig", "--subresource=status", "--type=merge",
        "-p", json.dumps({"status": status}), check=True,
    )  # fmt: skip
    before = {
        o["metadata"]["name"]: o
        for o in _get(cluster, "nodeconfigs", "-l", f"{TEST_LABEL}=crd-upgrade")["items"]
    }
    assert len(before) == 2

    # The documented upgrade step (README "Upgrade"): server-side, taking over the fields kubectl apply owned.
    upgraded = cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(REPO / "crds"))
    assert upgraded.returncode == 0, upgraded.stderr
    assert f"customresourcedefinition.apiextensions.k8s.io/{c.CRD_NAME} serverside-applied" in upgraded.stdout
    _established(cluster)
    crd = _get(cluster, "crd", c.CRD_NAME, "--show-managed-fields")
    current = yaml.safe_load((REPO / "crds" / "nodeconfig.yaml").read_text())
    assert crd["spec"]["versions"] == _get_defaulted_versions(cluster, current)
    managers = {m["manager"] for m in crd["metadata"]["managedFields"] if m["operation"] == "Apply"}
    assert "kubectl" in managers  # server-side apply owns the fields now

    after = {
        o["metadata"]["name"]: o
        for o in _get(cluster, "nodeconfigs", "-l", f"{TEST_LABEL}=crd-upgrade")["items"]
    }
    assert set(after) == set(before)
    for name, obj in after.items():
        assert obj["metadata"]["uid"] == before[name]["metadata"]["uid"]
        # Every field the object had is unchanged; fields the new schema added read as their defaults
        # (the API server defaults on read).
        assert _without(obj["spec"], NEW_DEFAULTS) == before[name]["spec"]
        for (section, key), value in NEW_DEFAULTS.items():
            assert obj["spec"][section][key] == value
    status = dict(after["upgrade-nodeconfig"]["status"])
    for field, default in NEW_STATUS_DEFAULTS.items():
        assert status.pop(field) == default
    counts: dict[str, Any] = dict(after["upgrade-nodeconfig"]["status"]["nodes"])
    status["nodes"] = counts
    for field, default in NEW_COUNT_DEFAULTS.items():
        assert counts.pop(field) == default
    assert status == before["upgrade-nodeconfig"]["status"]
    assert after["upgrade-nodeconfig"]["status"]["nodes"]["updated"] == 1

    # The objects still validate under the new schema (a server-side dry run of an update of each) ...
    for name, obj in after.items():
        body = {k: obj[k] for k in ("apiVersion", "kind", "spec")} | {"metadata": {"name": name}}
        dry = cluster.kubectl("apply", "--server-side", "--dry-run=server", "--field-manager=upgrade-check",
                              "-f", "-", stdin=yaml.safe_dump(body))  # fmt: skip
        assert dry.returncode == 0, dry.stderr
    # ... and the new schema still refuses a bad write.
    bad = cluster.kubectl(
        "patch",
        "nodeconfig",
        "upgrade-nodeconfig",
        "--type=merge",
        "-p",
        '{"spec":{"rollout":{"maxUnavailable":0}}}',
    )
    assert bad.returncode != 0 and "maxUnavailable" in bad.stderr, bad.stderr


def _get_defaulted_versions(cluster: LocalCluster, crd: dict[str, Any]) -> list[dict[str, Any]]:
    """The file's versions as the API server stores them (a server-side dry run fills in its defaults)."""
    dry = cluster.kubectl("apply", "--server-side", "--force-conflicts", "--dry-run=server", "-o", "json",
                          "-f", "-", stdin=yaml.safe_dump(crd), check=True)  # fmt: skip
    versions: list[dict[str, Any]] = json.loads(dry.stdout)["spec"]["versions"]
    return versions
