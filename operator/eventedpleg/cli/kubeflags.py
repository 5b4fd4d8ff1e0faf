"""kubectl's connection flags for every command that reads a kubeconfig: --kubeconfig (default $KUBECONFIG,
its files merged as kubectl merges them), --context and -n/--namespace (default: the context's namespace).

NodeConfigs and Nodes are cluster-scoped: the namespace is the operator's (where its rendered ConfigMaps
live), read by `render --node`; the other read-only commands take it so that a kubectl habit such as
`kubectl eventedpleg status -n evented-pleg-system` works."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import click


@dataclass(frozen=True)
class Kube:
    """Where a command connects: the kubeconfig file(s), the context and the namespace it was given."""

    kubeconfig: str | None = None
    context: str | None = None
    namespace: str | None = None

    def client(self) -> Any:
        """A client of the kubernetes library (eventedpleg.k8s.client.api_client)."""
        from eventedpleg.k8s.client import api_client  # noqa: PLC0415 - the kubernetes client: seconds

        return api_client(self.kubeconfig, context=self.context)

    def resolved_namespace(self) -> str:
        """--namespace, else the context's namespace, else `default` (kubectl's order)."""
        if self.namespace:
            return self.namespace
        from eventedpleg.k8s.client import context_namespace  # noqa: PLC0415

        return context_namespace(self.kubeconfig, self.context)


def kube_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Add --kubeconfig, --context and -n/--namespace; the command receives them as one `kube: Kube`."""

    @functools.wraps(command)
    def from_options(
        *, kubeconfig: str | None, context: str | None, namespace: str | None, **own: Any
    ) -> Any:
        return command(kube=Kube(kubeconfig, context, namespace), **own)

    options = (
        click.option(
            "--kubeconfig",
            envvar="KUBECONFIG",
            default=None,
            help="Kubeconfig file(s), ':'-separated as in $KUBECONFIG. Default: $KUBECONFIG, ~/.kube/config.",
        ),
        click.option("--context", default=None, help="The kubeconfig context. Default: its current one."),
        click.option(
            "-n",
            "--namespace",
            default=None,
            help="The operator's namespace (its rendered ConfigMaps). Default: the context's namespace.",
        ),
    )
    wrapped: Callable[..., Any] = from_options
    for option in reversed(options):
        wrapped = option(wrapped)
    return wrapped
