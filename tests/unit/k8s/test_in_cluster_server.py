"""The operator pod finds the API server as client-go does: from the Service env vars, without DNS."""

from __future__ import annotations

import pytest

from eventedpleg.k8s.client import in_cluster_server


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}, "https://10.0.0.1:443"),
        ({"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "6443"}, "https://[fd00::1]:6443"),
        ({"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, "https://kubernetes.default.svc"),
        ({}, "https://kubernetes.default.svc"),
    ],
)
def test_server_from_the_service_environment(environ: dict[str, str], expected: str) -> None:
    assert in_cluster_server(environ) == expected
