"""Build Kubernetes API clients. The only package that imports `kubernetes` is eventedpleg.k8s."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from eventedpleg.k8s.errors import KubeconfigError, config_failure


def api_client(
    kubeconfig: str | None = None, *, context: str | None = None, pool_size: int | None = None
) -> client.ApiClient:
    """A client from an explicit kubeconfig, else $KUBECONFIG/~/.kube/config, else in-cluster credentials.

    `pool_size` raises urllib3's connection pool for callers that use the client from several threads.
    Raises KubeconfigError when there are no usable credentials.
    """
    path = kubeconfig or os.environ.get("KUBECONFIG")
    cfg = client.Configuration()
    files = [p for p in (path or "").split(os.pathsep) if p]
    if files and not any(Path(p).is_file() for p in files):
        raise KubeconfigError(f"{', '.join(files)}: no such file")
    try:
        if path or (Path.home() / ".kube" / "config").exists():
            config.load_kube_config(config_file=path, context=context, client_configuration=cfg)
        elif os.environ.get("KUBERNETES_SERVICE_HOST"):
            config.load_incluster_config(client_configuration=cfg)
        else:
            raise KubeconfigError("none given (--kubeconfig, $KUBECONFIG, ~/.kube/config) and not in a pod")
    except KubeconfigError:
        raise
    except Exception as exc:
        failure = config_failure(exc)
        if failure is None:
            raise
        raise failure from exc
    if pool_size:
        cfg.connection_pool_maxsize = pool_size
    return client.ApiClient(cfg)


def get_json(api: client.ApiClient, path: str, query: Mapping[str, str] | None = None) -> dict[str, Any]:
    """GET an API path and return its JSON body. The generated API classes are skipped on purpose: the
    first use of CoreV1Api imports and builds hundreds of pydantic models, seconds of a CLI's start."""
    request = api.param_serialize(
        "GET",
        path,
        query_params=list((query or {}).items()),
        header_params={"Accept": "application/json"},
        auth_settings=["BearerToken"],
    )
    response = api.call_api(*request)
    data: Any = response.read()
    if not 200 <= response.status <= 299:
        raise ApiException.from_response(http_resp=response, body=None, data=None)
    body: dict[str, Any] = json.loads(data)
    return body
