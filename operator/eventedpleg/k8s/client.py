"""Build Kubernetes API clients. The only package that imports `kubernetes` is eventedpleg.k8s.

Every request made through a client built here has a client-side timeout: the generated API methods
wait for ever by default, and a hung API server (or a dead connection no RST ever ends) would freeze the
loop that made the call. A call may pass its own `_request_timeout` (watches do: the server's
timeoutSeconds plus a margin).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from eventedpleg.k8s.errors import KubeconfigError, config_failure

# (connect, read) seconds. Read is per socket read: a healthy API server answers a LIST page of 500
# nodes well within it, a stopped one never does.
REQUEST_TIMEOUT = (5.0, 15.0)


class TimedApiClient(client.ApiClient):
    """An ApiClient whose calls default to `request_timeout` instead of no timeout at all."""

    request_timeout: float | tuple[float, float] = REQUEST_TIMEOUT

    def call_api(self, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("_request_timeout") is None:
            kwargs["_request_timeout"] = self.request_timeout
        return super().call_api(*args, **kwargs)


def api_client(
    kubeconfig: str | None = None,
    *,
    context: str | None = None,
    pool_size: int | None = None,
    request_timeout: float | tuple[float, float] = REQUEST_TIMEOUT,
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
    # urllib3 retries a timed-out GET three more times by default: one hang would cost four timeouts.
    # One retry of a failed connect is kept (a pooled connection the server closed).
    cfg.retries = urllib3.Retry(total=1, connect=1, read=0, redirect=0, status=0, other=0)
    api = TimedApiClient(cfg)
    api.request_timeout = request_timeout
    return api


def in_cluster_server(environ: Mapping[str, str] = os.environ) -> str:
    """The API server's URL from inside a pod, found as client-go's rest.InClusterConfig finds it: the
    kubelet puts the `kubernetes` Service's address in KUBERNETES_SERVICE_HOST/PORT, which needs no
    cluster DNS. (kopf's own service-account login asks for https://kubernetes.default.svc, so an
    operator pod on a cluster whose DNS is down, or not up yet, could never log in.)"""
    host = environ.get("KUBERNETES_SERVICE_HOST", "")
    port = environ.get("KUBERNETES_SERVICE_PORT", "")
    if not host or not port:
        return "https://kubernetes.default.svc"
    if ":" in host:  # IPv6, as net.JoinHostPort writes it
        host = f"[{host}]"
    return f"https://{host}:{port}"


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
