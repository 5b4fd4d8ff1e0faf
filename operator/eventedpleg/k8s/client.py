"""Build Kubernetes API clients. The only package that imports `kubernetes` is eventedpleg.k8s.

Every request made through a client built here has a client-side timeout: the generated API methods
wait for ever by default, and a hung API server (or a dead connection no RST ever ends) would freeze the
loop that made the call. A call may pass its own `_request_timeout` (watches do: the server's
timeoutSeconds plus a margin).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import urllib3
from kubernetes import client, config

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
    """
    path = kubeconfig or os.environ.get("KUBECONFIG")
    cfg = client.Configuration()
    if path or (Path.home() / ".kube" / "config").exists():
        config.load_kube_config(config_file=path, context=context, client_configuration=cfg)
    else:
        config.load_incluster_config(client_configuration=cfg)
    if pool_size:
        cfg.connection_pool_maxsize = pool_size
    # urllib3 retries a timed-out GET three more times by default: one hang would cost four timeouts.
    # One retry of a failed connect is kept (a pooled connection the server closed).
    cfg.retries = urllib3.Retry(total=1, connect=1, read=0, redirect=0, status=0, other=0)
    api = TimedApiClient(cfg)
    api.request_timeout = request_timeout
    return api
