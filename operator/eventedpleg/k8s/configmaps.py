"""The immutable, hash-named ConfigMaps that carry rendered drop-ins to the agents."""

from __future__ import annotations

from kubernetes import client

from eventedpleg import constants as c
from eventedpleg import protocol
from eventedpleg.core.render import RenderedConfig
from eventedpleg.k8s.errors import ApiError, translated


@translated
def _create(api: client.ApiClient, namespace: str, rendered: RenderedConfig) -> None:
    body = client.V1ConfigMap(
        metadata=client.V1ObjectMeta(
            name=rendered.configmap_name,
            namespace=namespace,
            labels={c.CONFIGMAP_LABEL: "true", "app.kubernetes.io/part-of": "evented-pleg-operator"},
            annotations={protocol.ANN_OWNER: rendered.owner},
        ),
        data=rendered.configmap_data(),
        immutable=True,  # the hash names the content: it must never change under an agent
    )
    client.CoreV1Api(api).create_namespaced_config_map(namespace, body)


def ensure(api: client.ApiClient, namespace: str, rendered: RenderedConfig) -> None:
    """Create the ConfigMap if it is missing; an existing one has the same content by construction."""
    try:
        _create(api, namespace, rendered)
    except ApiError as exc:
        if exc.status != 409:  # AlreadyExists
            raise


@translated
def read(api: client.ApiClient, namespace: str, name: str) -> dict[str, str]:
    result = client.CoreV1Api(api).read_namespaced_config_map(name, namespace)
    return dict(result.data or {})
