"""Build Kubernetes API clients. The only package that imports `kubernetes` is eventedpleg.k8s.

Every request made through a client built here has a client-side timeout: the generated API methods
wait for ever by default, and a hung API server (or a dead connection no RST ever ends) would freeze the
loop that made the call. A call may pass its own `_request_timeout` (watches do: the server's
timeoutSeconds plus a margin).

One HTTP stack: every request, the operator's node watch included, goes through the kubernetes client's
REST layer (urllib3). `send_json` and `open_watch` use it with plain JSON, without the generated API
classes and their model round trips.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import socket
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import urllib3
import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines
from urllib3.exceptions import HTTPError

from eventedpleg import __version__
from eventedpleg.k8s.errors import KubeconfigError, config_failure, translated

# (connect, read) seconds. Read is per socket read: a healthy API server answers a LIST page of 500
# nodes well within it, a stopped one never does.
REQUEST_TIMEOUT = (5.0, 15.0)
# How often the client's credential hook may run. The kubernetes client calls it before every request,
# and both its hooks (kubeconfig and in-cluster) set host, CA and token on the Configuration again each
# time: 6-7 % of the operator's CPU in a rollout. Tokens are renewed well before they expire (kubeconfig:
# 5 minutes early; in-cluster the file is re-read every minute), so ten seconds late is harmless.
CREDENTIAL_REFRESH_SECONDS = 10.0


def throttle_credential_hook(
    cfg: Any, seconds: float = CREDENTIAL_REFRESH_SECONDS, clock: Callable[[], float] = time.monotonic
) -> None:
    """Let the Configuration's credential hook run at most every `seconds`. The client's hooks install
    themselves again each time they run, so ours is put back after each run."""
    last = [-math.inf]
    current: list[Callable[[Any], None]] = [cfg.refresh_api_key_hook]

    def throttled(configuration: Any) -> None:
        now = clock()
        if now - last[0] >= seconds:
            last[0] = now
            current[0](configuration)
            installed = configuration.refresh_api_key_hook
            if installed is not throttled:  # the hook installed itself again (or a fresh one)
                current[0] = installed
                setattr(configuration, "refresh_api_key_hook", throttled)  # noqa: B010

    setattr(cfg, "refresh_api_key_hook", throttled)  # noqa: B010 - typed None by the client


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
            context = context or first_current_context(files)
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
    if getattr(cfg, "refresh_api_key_hook", None) is not None:  # set by the kubeconfig/in-cluster loaders
        throttle_credential_hook(cfg)
    if pool_size:
        cfg.connection_pool_maxsize = pool_size
    # urllib3 retries a timed-out GET three more times by default: one hang would cost four timeouts.
    # One retry of a failed connect is kept (a pooled connection the server closed). urllib3 itself never
    # acts on Retry-After here: with status=0 a PUT or DELETE answered 429 + Retry-After would end in
    # MaxRetryError ("too many 429 error responses") instead of the server's answer.
    cfg.retries = urllib3.Retry(
        total=1, connect=1, read=0, redirect=0, status=0, other=0, respect_retry_after_header=False
    )
    # The kubernetes client (>= 37) sleeps for a 429's or 5xx's Retry-After and sends a GET again, as
    # client-go's rest.Request does (API Priority and Fairness answers an overloaded server's 429 with
    # Retry-After); its ceiling is `retries.total`: one retry. Only GET and HEAD: an eviction's 429 is a
    # PodDisruptionBudget's answer, and a write is never sent twice behind the caller's back.
    cfg.client_go_retries = True
    api = TimedApiClient(cfg)
    api.request_timeout = request_timeout
    # The API server's audit log and its APF flow schemas see who is asking (client-go sends
    # "<binary>/<version> (...) kubernetes/<commit>"); the client's own User-Agent stays in it.
    api.user_agent = f"evented-pleg-operator/{__version__} {api.user_agent}"
    return api


def first_current_context(files: list[str]) -> str | None:
    """The current context as kubectl merges $KUBECONFIG: the first file that sets current-context wins
    (the kubernetes client lets the last one win). None: leave it to the client (and its errors)."""
    for name in files:
        try:
            doc = yaml.safe_load(Path(name).expanduser().read_text())
        except (OSError, yaml.YAMLError):
            return None
        if isinstance(doc, dict) and doc.get("current-context"):
            return str(doc["current-context"])
    return None


def context_namespace(kubeconfig: str | None = None, context: str | None = None) -> str:
    """The namespace kubectl would use: the context's own (the current one unless `context` names
    another) from the kubeconfig (or $KUBECONFIG, its files merged as kubectl merges them), else the pod's
    namespace in a cluster, else `default`."""
    path = kubeconfig or os.environ.get("KUBECONFIG")
    if path or (Path.home() / ".kube" / "config").exists():
        context = context or first_current_context([p for p in (path or "").split(os.pathsep) if p])
        try:
            contexts, current = config.list_kube_config_contexts(config_file=path)
        except Exception as exc:
            failure = config_failure(exc)
            if failure is None:
                raise
            raise failure from exc
        chosen = next((ctx for ctx in contexts if ctx.get("name") == context), None) if context else current
        if context and chosen is None:
            raise KubeconfigError(f"context {context!r} not found in the kubeconfig")
        return str(((chosen or {}).get("context") or {}).get("namespace") or "default")
    in_pod = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
    return in_pod.read_text().strip() if in_pod.is_file() else "default"


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
    return send_json(api, "GET", path, query=query)


def send_json(
    api: client.ApiClient,
    method: str,
    path: str,
    body: Mapping[str, Any] | None = None,
    *,
    query: Mapping[str, str] | None = None,
    content_type: str = "application/json",
) -> dict[str, Any]:
    """One request with a JSON body (or none) that returns the JSON answer as plain dicts. Skips the
    generated API methods: their argument validation and model round trips (dict -> pydantic model ->
    JSON, and back for the answer) cost more CPU than the request itself on the operator's hot path."""
    headers = {"Accept": "application/json"}
    if body is not None:
        headers["Content-Type"] = content_type
    request = api.param_serialize(
        method,
        path,
        query_params=list((query or {}).items()),
        header_params=headers,
        body=dict(body) if body is not None else None,  # the client's REST layer encodes it
        auth_settings=["BearerToken"],
    )
    response = api.call_api(*request)
    data: Any = response.read()
    if not 200 <= response.status <= 299:
        raise ApiException.from_response(http_resp=response, body=None, data=None)
    answer: dict[str, Any] = json.loads(data)
    return answer


PAGE = 500  # items per LIST page: kubectl's default --chunk-size


@translated
def list_page(
    api: client.ApiClient, path: str, query: Mapping[str, str] | None, limit: int, token: str | None
) -> dict[str, Any]:
    """One page of a chunked LIST (items, metadata.continue, metadata.resourceVersion) as a plain dict."""
    page = {**(query or {}), "limit": str(limit)}
    if token:
        page["continue"] = token
    return get_json(api, path, page)


def list_all(
    api: client.ApiClient, path: str, query: Mapping[str, str] | None = None, *, limit: int = PAGE
) -> list[dict[str, Any]]:
    """Every item of a LIST, read in pages of `limit` (limit/continue, as kubectl's --chunk-size), so that
    neither the API server nor this process builds one answer of the whole cluster's pods at once."""
    items: list[dict[str, Any]] = []
    token: str | None = None
    while True:
        body = list_page(api, path, query, limit, token)
        items.extend(body.get("items") or [])
        token = (body.get("metadata") or {}).get("continue")
        if not token:
            return items


@dataclass(frozen=True)
class Watch:
    """One watch request's answer, line by line (each a JSON watch event)."""

    lines: Iterator[bytes | str]  # ends when the server ends the stream, or the stream broke
    shutdown: Callable[[], None]  # from another thread: end a read that waits for the next line
    close: Callable[[], None]


def open_watch(api: client.ApiClient, path: str, query: Mapping[str, str], read_timeout: float) -> Watch:
    """Start a watch (GET `path` with watch=true in `query`). Raises ApiException when the server refuses
    it (410 Gone: the resourceVersion is too old)."""
    request = api.param_serialize(
        "GET",
        path,
        query_params=list(query.items()),
        header_params={"Accept": "application/json"},
        auth_settings=["BearerToken"],
    )
    answer = api.call_api(*request, _request_timeout=(REQUEST_TIMEOUT[0], read_timeout))
    response = answer.response  # urllib3's, not read yet: the client never preloads
    if answer.status != 200:
        raise ApiException.from_response(http_resp=answer, body=answer.read().decode(), data=None)

    def shutdown() -> None:
        sock = getattr(getattr(response, "connection", None), "sock", None)
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def close() -> None:
        # Close before giving the connection back: a watch left early (at its 410 event) may still have
        # its last chunk on the way, which the next request on that connection would read as its status
        # line. A new connection per watch costs one handshake every few minutes.
        response.close()
        response.release_conn()

    return Watch(_until_broken(iter_resp_lines(response)), shutdown, close)


def _until_broken(lines: Iterator[Any]) -> Iterator[Any]:
    """The stream's lines; a stream that broke (server restart, timeout) just ends: watch again."""
    try:
        yield from lines
    except (HTTPError, OSError):
        return
