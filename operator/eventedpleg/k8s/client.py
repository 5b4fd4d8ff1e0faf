"""Build Kubernetes API clients. The only package that imports `kubernetes` is eventedpleg.k8s."""

from __future__ import annotations

import os
from pathlib import Path

from kubernetes import client, config


def api_client(kubeconfig: str | None = None, *, context: str | None = None) -> client.ApiClient:
    """A client from an explicit kubeconfig, else $KUBECONFIG/~/.kube/config, else in-cluster credentials."""
    path = kubeconfig or os.environ.get("KUBECONFIG")
    if path or (Path.home() / ".kube" / "config").exists():
        cfg = client.Configuration()
        config.load_kube_config(config_file=path, context=context, client_configuration=cfg)
        return client.ApiClient(cfg)
    cfg = client.Configuration()
    config.load_incluster_config(client_configuration=cfg)
    return client.ApiClient(cfg)
