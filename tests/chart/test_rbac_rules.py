"""Every RBAC rule the chart renders for the operator and the agent is a row of eventedpleg.k8s.access (the
API calls the code makes, held to the code by tests/unit/test_access.py), and every row has its rule:
the same resource, verb, namespace and resourceNames, nothing wider, nothing missing. The CLI's aggregated
roles are held to the person's rows the same way."""

from __future__ import annotations

from typing import Any

import pytest

from eventedpleg.k8s import access
from eventedpleg.k8s.access import Account, Scope
from tests.chart.chartlib import NAMESPACE, Rendered, render

AGENT_NAMESPACE = "evented-pleg-agent"  # values.yaml agent.namespace
SERVICE_ACCOUNTS = {Account.OPERATOR: "evented-pleg-operator", Account.AGENT: "evented-pleg-agent"}
NAMESPACE_SCOPES = {NAMESPACE: Scope.RELEASE, AGENT_NAMESPACE: Scope.AGENT, "default": Scope.DEFAULT}
VALUES = {"drain.allowForceDelete", "drain.listNamespaces"}

# (scope, apiGroup, resource, verb, resourceNames)
Atom = tuple[Scope, str, str, str, tuple[str, ...]]


def granted(rendered: Rendered, account: Account) -> set[Atom]:
    """What the chart binds to the account's ServiceAccount, rule by rule, verb by verb."""
    name = SERVICE_ACCOUNTS[account]
    roles = {(d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"]): d for d in rendered.docs}
    atoms: set[Atom] = set()
    for kind in ("ClusterRoleBinding", "RoleBinding"):
        for binding in rendered.all(kind):
            if not any(s["kind"] == "ServiceAccount" and s["name"] == name for s in binding["subjects"]):
                continue
            namespace = binding["metadata"].get("namespace", "")
            scope = Scope.CLUSTER if kind == "ClusterRoleBinding" else NAMESPACE_SCOPES[namespace]
            ref = binding["roleRef"]
            role = roles[ref["kind"], "" if ref["kind"] == "ClusterRole" else namespace, ref["name"]]
            atoms |= {
                (scope, group, resource, verb, tuple(rule.get("resourceNames", ())))
                for rule in role["rules"]
                for group in rule["apiGroups"]
                for resource in rule["resources"]
                for verb in rule["verbs"]
            }
    return atoms


def needed(account: Account, values: set[str]) -> set[Atom]:
    """What the rows need as rules: a kubelet's API is authorized cluster-wide (nodes/metrics), a
    non-resource URL every authenticated user may read needs none."""
    atoms: set[Atom] = set()
    for row in access.calls_of(account, values):
        if row.scope is Scope.NONE:
            continue
        scope = Scope.CLUSTER if row.scope is Scope.KUBELET else row.scope
        atoms |= {(scope, row.group, row.resource, verb, row.names) for verb in row.verbs}
    return atoms


def _values(on: set[str]) -> dict[str, Any]:
    return {name: name in on for name in VALUES}


@pytest.mark.parametrize("on", [set(), {"drain.listNamespaces"}, VALUES], ids=["none", "namespaces", "all"])
@pytest.mark.parametrize("account", [Account.OPERATOR, Account.AGENT])
def test_rules_are_the_calls_the_code_makes(account: Account, on: set[str]) -> None:
    rendered = render(_values(on))
    rules, calls = granted(rendered, account), needed(account, on)
    assert sorted(rules - calls) == [], "granted, but no call in eventedpleg/k8s/access.py uses it"
    assert sorted(calls - rules) == [], "a call in eventedpleg/k8s/access.py with no rule"


def test_the_comparison_sees_each_value() -> None:
    """The values change the rules (a comparison that read nothing would pass above)."""
    none, every = (
        granted(render(_values(set())), Account.OPERATOR),
        granted(render(_values(VALUES)), Account.OPERATOR),
    )
    assert every - none == {
        (Scope.CLUSTER, "", "pods", "delete", ()),
        (Scope.CLUSTER, "", "namespaces", "list", ()),
    }
    assert (Scope.AGENT, "", "pods", "watch", ()) in none
    assert not any(a[0] is Scope.CLUSTER and a[2:4] == ("pods", "watch") for a in none)


def test_defaults_list_namespaces_and_refuse_force_delete() -> None:
    default = granted(render(), Account.OPERATOR)
    assert (Scope.CLUSTER, "", "namespaces", "list", ()) in default
    assert (Scope.CLUSTER, "", "pods", "delete", ()) not in default


# --- the CLI's aggregated roles -------------------------------------------------------------------------

READS = {"get", "list", "watch"}
# What Kubernetes' own `view` already grants cluster-wide (bootstrap policy): the CLI's rows on these need no
# rule of ours.
BUILTIN_VIEW = {("", "pods"), ("policy", "poddisruptionbudgets"), ("", "namespaces"), ("", "configmaps")}
# What `eventedpleg approve` and `retry` write (eventedpleg.io/approved, eventedpleg.io/retry).
CLI_WRITES = {"eventedpleg.k8s.nodeconfigs.patch_annotations"}


def _role_atoms(rendered: Rendered, name: str) -> set[tuple[str, str, str]]:
    role = rendered.find("ClusterRole", name)
    return {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def test_view_role_is_what_the_cli_reads_that_view_does_not_grant() -> None:
    rendered = render()
    role = rendered.find("ClusterRole", "evented-pleg-view")
    labels = role["metadata"]["labels"]
    assert labels["rbac.authorization.k8s.io/aggregate-to-view"] == "true"
    rows = {
        (row.group, row.resource, verb)
        for row in access.calls_of(Account.PERSON, VALUES)
        if row.scope is Scope.CLUSTER and (row.group, row.resource) not in BUILTIN_VIEW
        for verb in row.verbs
        if verb in READS
    }
    assert _role_atoms(rendered, "evented-pleg-view") == rows


def test_edit_role_is_what_approve_and_retry_write() -> None:
    rendered = render()
    role = rendered.find("ClusterRole", "evented-pleg-edit")
    labels = role["metadata"]["labels"]
    assert labels["rbac.authorization.k8s.io/aggregate-to-edit"] == "true"
    assert labels["rbac.authorization.k8s.io/aggregate-to-admin"] == "true"
    assert "rbac.authorization.k8s.io/aggregate-to-view" not in labels
    writes = {
        (row.group, row.resource, verb)
        for row in access.calls_of(Account.PERSON, VALUES)
        if row.site in CLI_WRITES
        for verb in row.verbs
    }
    assert writes and _role_atoms(rendered, "evented-pleg-edit") == writes


def test_aggregated_roles_follow_their_value() -> None:
    off = render({"aggregatedRoles.enabled": False})
    names = {d["metadata"]["name"] for d in off.all("ClusterRole")}
    assert not {"evented-pleg-view", "evented-pleg-edit"} & names
    assert {"evented-pleg-view", "evented-pleg-edit"} <= {
        d["metadata"]["name"] for d in render().all("ClusterRole")
    }
