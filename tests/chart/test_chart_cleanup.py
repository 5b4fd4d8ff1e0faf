"""cleanup.onUninstall: the post-delete hook Job that runs `eventedpleg release-nodes`, rendered only when
asked, with an account of its own whose rules are exactly the cleanup rows of eventedpleg.k8s.access."""

from __future__ import annotations

from typing import Any

from eventedpleg.k8s import access
from eventedpleg.k8s.access import Account, Scope
from tests.chart.chartlib import NAMESPACE, Rendered, render

NAME = "evented-pleg-operator-cleanup"
ON = {"cleanup.onUninstall": True}
HOOK = {
    "helm.sh/hook": "post-delete",
    "helm.sh/hook-delete-policy": "before-hook-creation,hook-succeeded",
}


def _cleanup_docs(rendered: Rendered) -> list[dict[str, Any]]:
    return [d for d in rendered.docs if d["metadata"]["name"] == NAME]


def test_off_by_default() -> None:
    assert _cleanup_docs(render()) == []
    assert _cleanup_docs(render({"cleanup.onUninstall": False})) == []


def test_on_renders_the_hook_resources() -> None:
    docs = _cleanup_docs(render(ON))
    assert sorted(str(d["kind"]) for d in docs) == [
        "ClusterRole",
        "ClusterRoleBinding",
        "Job",
        "ServiceAccount",
    ]
    for doc in docs:
        annotations = doc["metadata"]["annotations"]
        assert {k: annotations[k] for k in HOOK} == HOOK, doc["kind"]


def test_the_job_runs_release_nodes_as_its_own_account_after_the_agents() -> None:
    rendered = render({**ON, "agent.namespace": "node-agents"})
    job = rendered.find("Job", NAME)
    pod = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["command"] == ["eventedpleg", "release-nodes"]
    assert container["args"] == ["--force", "--wait-for-agents", "node-agents"]
    assert pod["serviceAccountName"] == NAME and job["metadata"]["namespace"] == NAMESPACE
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    # The account and its rights exist before the Job (lower hook weight), in the same hook.
    weights = {
        d["kind"]: int(d["metadata"]["annotations"].get("helm.sh/hook-weight", "0"))
        for d in _cleanup_docs(rendered)
    }
    assert max(weights[k] for k in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding")) < weights["Job"]


def test_its_rules_are_the_cleanup_calls() -> None:
    rendered = render(ON)
    binding = rendered.find("ClusterRoleBinding", NAME)
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}]
    assert binding["roleRef"]["name"] == NAME
    role = rendered.find("ClusterRole", NAME)
    rules = {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    rows = access.calls_of(Account.CLEANUP)
    assert all(row.scope is Scope.CLUSTER and not row.names for row in rows)
    calls = {(row.group, row.resource, verb) for row in rows for verb in row.verbs}
    assert (
        rules
        == calls
        == {("", "nodes", "get"), ("", "nodes", "list"), ("", "nodes", "patch"), ("", "pods", "list")}
    )
    # Nothing else is bound to it.
    others = [
        d
        for kind in ("ClusterRoleBinding", "RoleBinding")
        for d in rendered.all(kind)
        if d["metadata"]["name"] != NAME and any(s["name"] == NAME for s in d["subjects"])
    ]
    assert others == []
