"""Every Kubernetes API call the product makes, by the function that makes it, and who makes it: the one
list the chart's RBAC is held to (tests/unit/test_access.py checks it against the code, tests/chart
against the rendered Roles; docs/security.md explains it).

A row names the function that sends the request (`site`, module.qualname), or, for what the product
does not send itself, the framework setting that makes kopf send it. Scopes: the whole cluster, the
operator's (release) namespace, the agent's namespace, or `default`, where Events about cluster-scoped
objects go (k8s/events.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from eventedpleg import constants as c
from eventedpleg import protocol


class Account(StrEnum):
    OPERATOR = "operator"  # the operator Deployment's ServiceAccount
    AGENT = "agent"  # the agent DaemonSet's ServiceAccount
    PERSON = "person"  # the CLI (status, preflight, approve, retry): whoever runs it, with their own rights
    CLEANUP = "cleanup"  # the chart's post-delete Job (cleanup.onUninstall): `eventedpleg release-nodes`


class Scope(StrEnum):
    CLUSTER = "cluster"
    RELEASE = "release"  # the operator's namespace
    AGENT = "agent"  # the agent's namespace
    DEFAULT = "default"  # Events about Nodes and NodeConfigs (k8s/events.py EVENT_NAMESPACE)
    KUBELET = "kubelet"  # a kubelet's own API, authorized by the API server (SubjectAccessReview)
    NONE = "none"  # a non-resource URL every authenticated user may read (system:discovery)


@dataclass(frozen=True)
class Call:
    site: str  # eventedpleg.<module>.<qualname>, or "kopf:<setting>" for what kopf sends for us
    group: str
    resource: str
    verbs: tuple[str, ...]
    scope: Scope
    accounts: tuple[Account, ...]
    why: str
    names: tuple[str, ...] = ()  # resourceNames: the objects are known
    value: str = ""  # the chart value that grants it (off: not granted)


OP, AGENT, PERSON = (Account.OPERATOR,), (Account.AGENT,), (Account.PERSON,)
CLEANUP = (Account.CLEANUP,)
BOTH = (Account.OPERATOR, Account.AGENT)
NC, EPO = protocol.GROUP, "eventedpleg.k8s."

CALLS: tuple[Call, ...] = (
    # NodeConfigs: kopf watches them and keeps its finalizer and progress annotations with merge patches;
    # the operator reads one it has not seen yet and writes its status.
    Call("kopf:clusterwide", NC, c.PLURAL, ("list", "watch"), Scope.CLUSTER, OP, "kopf's NodeConfig watch"),
    Call("kopf:persistence", NC, c.PLURAL, ("patch",), Scope.CLUSTER, OP, "kopf's finalizer, annotations"),
    Call(EPO + "nodeconfigs.get", NC, c.PLURAL, ("get",), Scope.CLUSTER, OP + PERSON, "one not watched yet"),
    Call(EPO + "nodeconfigs.patch_status", NC, f"{c.PLURAL}/status", ("patch",), Scope.CLUSTER, OP, "status"),
    Call(EPO + "nodeconfigs.names", NC, c.PLURAL, ("list",), Scope.CLUSTER, PERSON, "release-nodes refuses"),
    Call(EPO + "nodeconfigs.patch_annotations", NC, c.PLURAL, ("patch",), Scope.CLUSTER, PERSON, "retry"),
    Call(
        "kopf:observation",
        "apiextensions.k8s.io",
        "customresourcedefinitions",
        ("list", "watch"),
        Scope.CLUSTER,
        OP,
        "kopf notices the NodeConfig CRD installed or removed at runtime",
    ),
    # Nodes: the operator's informer, cordon/uncordon/taints and protocol annotations; the agent its own.
    Call(
        EPO + "nodes.get_node",
        "",
        "nodes",
        ("get",),
        Scope.CLUSTER,
        BOTH + PERSON + CLEANUP,
        "re-read on conflict",
    ),
    Call(
        EPO + "nodes.patch_node",
        "",
        "nodes",
        ("patch",),
        Scope.CLUSTER,
        BOTH + PERSON + CLEANUP,
        "protocol writes",
    ),
    Call(
        EPO + "nodes.list_nodes",
        "",
        "nodes",
        ("list",),
        Scope.CLUSTER,
        PERSON + CLEANUP,
        "status, release-nodes",
    ),
    Call("eventedpleg.controller.main.run", "", "nodes", ("list", "watch"), Scope.CLUSTER, OP, "informer"),
    Call("eventedpleg.controller.main.run", "", "/version", ("get",), Scope.NONE, OP, "fail fast at start"),
    Call(EPO + "agentapi.KubeAgentApi.watch_node", "", "nodes", ("watch",), Scope.CLUSTER, AGENT, "own Node"),
    Call(
        EPO + "nodes.patch_node_condition",
        "",
        "nodes/status",
        ("patch",),
        Scope.CLUSTER,
        AGENT,
        "the guard's EventedPLEGHealthy condition on its own Node (agent-vap.yaml: that condition only)",
    ),
    Call(EPO + "follow.follow", "", "nodes", ("list", "watch"), Scope.CLUSTER, PERSON, "status --watch"),
    Call(EPO + "follow.follow", NC, c.PLURAL, ("list", "watch"), Scope.CLUSTER, PERSON, "status --watch"),
    Call(
        "eventedpleg.agent.linuxhost",
        "",
        "nodes/metrics",
        ("get",),
        Scope.KUBELET,
        AGENT,
        "the kubelet's /metrics on its node, to verify Evented PLEG",
    ),
    # Pods: a drain lists the node's pods (any namespace), evicts them, deletes only with ForceDelete;
    # the health gate lists its pods; the agent pods' readiness is watched in the agent's namespace.
    Call(EPO + "drain.node_pods", "", "pods", ("list",), Scope.CLUSTER, OP, "the node's pods to drain"),
    Call(
        EPO + "drain.pending_in", "", "pods", ("list",), Scope.CLUSTER, OP, "Pending pods of a short budget"
    ),
    Call(EPO + "workloads.not_ready", "", "pods", ("list",), Scope.CLUSTER, OP, "rollout.healthGate's pods"),
    Call(EPO + "drain._evict", "", "pods/eviction", ("create",), Scope.CLUSTER, OP, "evictions respect PDBs"),
    Call(
        EPO + "drain._delete",
        "",
        "pods",
        ("delete",),
        Scope.CLUSTER,
        OP,
        "drain.onTimeout: ForceDelete",
        value="drain.allowForceDelete",
    ),
    Call(
        "eventedpleg.controller.main._agent_pod_informer",
        "",
        "pods",
        ("list", "watch"),
        Scope.AGENT,
        OP,
        "the agent pods' readiness (a crash-looping agent is no live agent)",
    ),
    Call(EPO + "nodes.all_pods", "", "pods", ("list",), Scope.CLUSTER, PERSON, "preflight"),
    Call(EPO + "nodes.agent_pods", "", "pods", ("list",), Scope.CLUSTER, PERSON, "status, preflight"),
    Call(
        EPO + "nodes.agent_pods_in",
        "",
        "pods",
        ("list",),
        # Granted cluster-wide: the cleanup hook runs after uninstall has put a chart-made agent
        # namespace into deletion, where no Role can be created any more.
        Scope.CLUSTER,
        PERSON + CLEANUP,
        "release-nodes --wait-for-agents: no agent left to mark its Node",
    ),
    # Drain helpers: PDBs that could never let a pod go, Namespaces' labels, other maintenance owners.
    Call(
        EPO + "drain._list", "policy", "poddisruptionbudgets", ("list",), Scope.CLUSTER, OP, "never-allowed"
    ),
    Call(
        EPO + "drain.all_pdbs",
        "policy",
        "poddisruptionbudgets",
        ("list",),
        Scope.CLUSTER,
        PERSON,
        "preflight",
    ),
    Call(
        EPO + "drain._list",
        "nodemaintenance.medik8s.io",
        "nodemaintenances",
        ("list",),
        Scope.CLUSTER,
        OP + PERSON,
        "a node another maintenance owner holds is not taken",
    ),
    Call(
        EPO + "drain._all_namespaces",
        "",
        "namespaces",
        ("list",),
        Scope.CLUSTER,
        OP + PERSON,
        "drain.rules[].namespaceSelector (asked only when a rule has one)",
        value="drain.listNamespaces",
    ),
    # The rendered drop-ins: created by the operator (immutable, hash-named), read by the agents.
    Call(EPO + "configmaps._create", "", "configmaps", ("create",), Scope.RELEASE, OP, "rendered drop-ins"),
    Call(EPO + "configmaps.read", "", "configmaps", ("get",), Scope.RELEASE, AGENT + PERSON, "drop-ins"),
    # Leader election: one Lease of a known name.
    Call(
        EPO + "lease.LeaseLock._create",
        "coordination.k8s.io",
        "leases",
        ("create",),
        Scope.RELEASE,
        OP,
        "Lease",
    ),
    Call(
        EPO + "lease.LeaseLock._read",
        "coordination.k8s.io",
        "leases",
        ("get",),
        Scope.RELEASE,
        OP,
        "Lease",
        names=(c.LEASE_NAME,),
    ),
    Call(
        EPO + "lease.LeaseLock._replace",
        "coordination.k8s.io",
        "leases",
        ("update",),
        Scope.RELEASE,
        OP,
        "renew, release",
        names=(c.LEASE_NAME,),
    ),
    # Events: ours about Nodes and NodeConfigs in `default`; kopf's (WARNING and above: a handler failed)
    # about a NodeConfig in the namespace of its login, the operator's own.
    Call(EPO + "events.EventRecorder._create", "", "events", ("create",), Scope.DEFAULT, BOTH, "Events"),
    Call("kopf:posting", "", "events", ("create",), Scope.RELEASE, OP, "kopf's handler-failure Events"),
)


def calls_of(account: Account, values: Iterable[str] = ()) -> tuple[Call, ...]:
    """What `account` calls when the chart values named in `values` are on."""
    on = set(values)
    return tuple(x for x in CALLS if account in x.accounts and (not x.value or x.value in on))
