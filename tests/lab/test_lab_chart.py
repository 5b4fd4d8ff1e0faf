"""The chart's conventions on real nodes: `helm test` passes (the CRD served, every operator replica
answers /healthz from inside the cluster, every agent Ready), and a second release in the same cluster is
refused with the reason, leaving the first one untouched."""

from __future__ import annotations

import pytest

from eventedpleg import constants as c
from eventedpleg_lab.demo.harness import NAMESPACE, chart_dir
from eventedpleg_lab.lab import chart
from eventedpleg_lab.lab.lab import Lab, LabError

pytestmark = pytest.mark.lab


def test_helm_test_passes(installed: Lab) -> None:
    # The test pod exits non-zero on any check that fails (CRD not served, a replica's /healthz), and
    # Helm then fails the command; a passing pod is deleted (hook-succeeded), so the phase is the verdict.
    out = chart.helm_test(installed)
    assert "TEST SUITE:     evented-pleg-operator-test" in out, out
    assert "Phase:          Succeeded" in out, out
    pods = chart.get_json(installed, "pods", "-n", NAMESPACE, "-l", "app.kubernetes.io/component=test")
    assert pods["items"] == []  # removed after success, nothing left for `helm uninstall` to miss


def test_a_second_release_is_refused(installed: Lab) -> None:
    with pytest.raises(LabError) as refused:
        chart.helm(installed, "install", "second", str(chart_dir()), "-n", "second-release",
                   "--create-namespace", "--set=nameOverride=second",
                   "--set=agent.namespace=second-agent")  # fmt: skip
    message = str(refused.value)
    assert "already installed in this cluster" in message
    assert f'release "{chart.RELEASE}" in namespace "{NAMESPACE}"' in message
    # Nothing of the second release was made, and the first one still runs.
    ours = "app.kubernetes.io/part-of=evented-pleg-operator,app.kubernetes.io/component=agent"
    agents = chart.get_json(installed, "daemonsets", "-A", "-l", ours)["items"]
    assert [d["metadata"]["annotations"]["meta.helm.sh/release-name"] for d in agents] == [chart.RELEASE]
    assert chart.get_json(installed, "crd", c.CRD_NAME)["metadata"]["name"] == c.CRD_NAME
