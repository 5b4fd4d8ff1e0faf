"""ServiceAccounts and their tokens (TokenRequest API), so code can run under exactly the RBAC it is granted.

A token bound to a Pod (boundObjectRef kind Pod) carries the pod's node: the apiserver then adds
`authentication.kubernetes.io/node-name` to the user's extra (KEP-4193), which a ValidatingAdmissionPolicy
can compare with the Node being changed. That needs the pod to be scheduled (spec.nodeName set).
"""

from __future__ import annotations

import time

from kubernetes import client
from kubernetes.client import ApiException


def ensure_namespace(api: client.ApiClient, name: str) -> None:
    try:
        client.CoreV1Api(api).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    except ApiException as exc:
        if exc.status != 409:
            raise


def ensure_service_account(api: client.ApiClient, namespace: str, name: str) -> None:
    ensure_namespace(api, namespace)
    try:
        client.CoreV1Api(api).create_namespaced_service_account(
            namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name=name))
        )
    except ApiException as exc:
        if exc.status != 409:
            raise


def request_token(
    api: client.ApiClient,
    namespace: str,
    name: str,
    *,
    bound_pod: str | None = None,
    audiences: list[str] | None = None,
    expiration_seconds: int = 3600,
) -> str:
    """Mint a token for ServiceAccount namespace/name; bound to Pod `bound_pod` (same namespace) if given.

    A bound token becomes invalid when the pod is deleted, and carries the pod's node name when it was
    issued after the pod was scheduled.
    """
    core = client.CoreV1Api(api)
    bound = None
    if bound_pod is not None:
        pod = core.read_namespaced_pod(bound_pod, namespace)
        uid = pod.metadata.uid if pod.metadata else None
        bound = client.V1BoundObjectReference(kind="Pod", api_version="v1", name=bound_pod, uid=uid)
    spec = client.V1TokenRequestSpec(
        audiences=audiences or [], expiration_seconds=expiration_seconds, bound_object_ref=bound
    )
    result = core.create_namespaced_service_account_token(
        name, namespace, client.AuthenticationV1TokenRequest(spec=spec)
    )
    if result.status is None or not result.status.token:
        raise RuntimeError(f"TokenRequest for {namespace}/{name} returned no token")
    return str(result.status.token)


def wait_service_account(api: client.ApiClient, namespace: str, name: str, *, timeout: float = 60.0) -> None:
    """Wait until a ServiceAccount exists (the controller-manager creates each namespace's `default`)."""
    core = client.CoreV1Api(api)
    deadline = time.monotonic() + timeout
    while True:
        try:
            core.read_namespaced_service_account(name, namespace)
            return
        except ApiException as exc:
            if exc.status != 404:
                raise
        if time.monotonic() > deadline:
            raise TimeoutError(f"ServiceAccount {namespace}/{name} did not appear within {timeout:.0f}s")
        time.sleep(0.2)
