"""Build Kubernetes API clients. The only package that imports `kubernetes` is eventedpleg.k8s."""

from __future__ import annotations

import os
from pathlib import Path

from kubernetes import client, config


def api_client(
    kubeconfig: str | None = None, *, context: str | None = None, pool_size: int | None = None
) -> client.ApiClient:
    """A client from an explicit kubeconfig, else $KUBECONFIG/~/.kube/config, else in-cluster credentials.

    `pool_size` raises urllib3's connection pool for callers that use the client from several threads.
    """
    path = kubeconfig or os.environ.get("KUBECONFIG")
    cfg = client.Configuration()
    if path or (Path.home() / ".kube" / "config").exists():
        config.load_kube_config(config_file=path, context=context, client_configuration=cfg)
    else:
        config.load_incluster_config(client_configuration=cfg)
    if pool_size:
        cfg.connection_pool_maxsize = pool_size
    return client.ApiClient(cfg)
