"""The values platform teams set, rendered by the real helm: security contexts merged field by
field over today's (the agent stays privileged unless those very fields are changed), extra args, env and
volumes (a proxy, a CA bundle), ServiceAccounts the chart creates or the user brings (the RBAC bindings
and the admission policies follow the name), fullnameOverride and global.imageRegistry. The golden case
`platform-values` in test_chart.py holds the whole rendering."""

from __future__ import annotations

from typing import Any

import pytest

from tests.chart.chartlib import Doc, Rendered, pod_specs, render, template

OPERATOR, AGENT = "evented-pleg-operator", "evented-pleg-agent"
NAMESPACE, AGENT_NS = "evented-pleg-system", "evented-pleg-agent"

# What the pods carried before these values existed: the defaults must render exactly these.
OPERATOR_POD_CONTEXT = {
    "runAsNonRoot": True,
    "runAsUser": 65532,
    "runAsGroup": 65532,
    "fsGroup": 65532,
    "seccompProfile": {"type": "RuntimeDefault"},
}
OPERATOR_CONTEXT = {
    "allowPrivilegeEscalation": False,
    "privileged": False,
    "readOnlyRootFilesystem": True,
    "runAsNonRoot": True,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}
AGENT_CONTEXT = {
    "privileged": True,
    "runAsUser": 0,
    "runAsGroup": 0,
    "runAsNonRoot": False,
    "readOnlyRootFilesystem": True,
}


def _pod(rendered: Rendered, kind: str, name: str) -> Doc:
    spec: Doc = rendered.find(kind, name)["spec"]["template"]["spec"]
    return spec


def _container(rendered: Rendered, kind: str, name: str) -> Doc:
    (container,) = _pod(rendered, kind, name)["containers"]
    result: Doc = container
    return result


@pytest.fixture(scope="module")
def default() -> Rendered:
    return render()


# --- security contexts ----------------------------------------------------------------------------------


def test_default_security_contexts_are_the_ones_the_pods_always_had(default: Rendered) -> None:
    assert _pod(default, "Deployment", OPERATOR)["securityContext"] == OPERATOR_POD_CONTEXT
    assert _container(default, "Deployment", OPERATOR)["securityContext"] == OPERATOR_CONTEXT
    assert "securityContext" not in _pod(default, "DaemonSet", AGENT)
    assert _container(default, "DaemonSet", AGENT)["securityContext"] == AGENT_CONTEXT


def test_a_security_context_field_replaces_only_itself() -> None:
    rendered = render(
        {
            "operator.podSecurityContext": {"runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 1000},
            "operator.securityContext": {
                "seccompProfile": {"type": "Localhost", "localhostProfile": "p.json"}
            },
            "agent.podSecurityContext": {"supplementalGroups": [5]},
            "agent.securityContext": {"readOnlyRootFilesystem": False, "seLinuxOptions": {"type": "spc_t"}},
        }
    )
    pod = _pod(rendered, "Deployment", OPERATOR)["securityContext"]
    assert pod == {**OPERATOR_POD_CONTEXT, "runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 1000}
    container = _container(rendered, "Deployment", OPERATOR)["securityContext"]
    assert container == {
        **OPERATOR_CONTEXT,
        "seccompProfile": {"type": "Localhost", "localhostProfile": "p.json"},
    }
    assert _pod(rendered, "DaemonSet", AGENT)["securityContext"] == {"supplementalGroups": [5]}
    agent = _container(rendered, "DaemonSet", AGENT)["securityContext"]
    # Still privileged and root: the user changed other fields.
    assert agent == {**AGENT_CONTEXT, "readOnlyRootFilesystem": False, "seLinuxOptions": {"type": "spc_t"}}


def test_the_agent_is_unprivileged_only_when_that_field_is_set() -> None:
    agent = _container(render({"agent.securityContext": {"privileged": False}}), "DaemonSet", AGENT)
    assert agent["securityContext"] == {**AGENT_CONTEXT, "privileged": False}


# --- extra args, env, volumes ---------------------------------------------------------------------------

PROXY = [
    {"name": "HTTPS_PROXY", "value": "http://proxy.example.com:3128"},
    {"name": "NO_PROXY", "value": "10.0.0.0/8,.svc"},
    {"name": "SSL_CERT_FILE", "value": "/etc/ssl/corp/ca.crt"},
]
CA_VOLUME = {"name": "corp-ca", "configMap": {"name": "corp-ca-bundle"}}
CA_MOUNT = {"name": "corp-ca", "mountPath": "/etc/ssl/corp", "readOnly": True}


@pytest.mark.parametrize(
    ("component", "kind", "name"), [("operator", "Deployment", OPERATOR), ("agent", "DaemonSet", AGENT)]
)
def test_extra_args_env_and_volumes_come_after_the_charts_own(component: str, kind: str, name: str) -> None:
    base = render()
    rendered = render(
        {
            f"{component}.extraArgs": ["--verbose"],
            f"{component}.extraEnv": PROXY,
            f"{component}.extraVolumes": [CA_VOLUME],
            f"{component}.extraVolumeMounts": [CA_MOUNT],
        }
    )
    before, after = _container(base, kind, name), _container(rendered, kind, name)
    assert after["args"] == [*before["args"], "--verbose"]
    assert after["env"] == [*before["env"], *PROXY]
    assert after["volumeMounts"] == [*before["volumeMounts"], CA_MOUNT]
    assert _pod(rendered, kind, name)["volumes"] == [*_pod(base, kind, name)["volumes"], CA_VOLUME]
    # Only the component asked for changes.
    other = ("DaemonSet", AGENT) if component == "operator" else ("Deployment", OPERATOR)
    assert _container(rendered, *other) == _container(base, *other)


# --- ServiceAccounts ------------------------------------------------------------------------------------


def _subjects(rendered: Rendered) -> set[tuple[str, str]]:
    return {
        (s["namespace"], s["name"])
        for kind in ("ClusterRoleBinding", "RoleBinding")
        for b in rendered.all(kind)
        for s in b["subjects"]
        if s["kind"] == "ServiceAccount" and not b["metadata"].get("annotations", {}).get("helm.sh/hook")
    }


def _policy_expressions(rendered: Rendered) -> str:
    return "\n".join(
        cond["expression"]
        for policy in rendered.all("ValidatingAdmissionPolicy")
        for cond in policy["spec"].get("matchConditions", [])
    )


def test_the_chart_creates_both_service_accounts_by_default(default: Rendered) -> None:
    accounts = {(d["metadata"]["namespace"], d["metadata"]["name"]) for d in default.all("ServiceAccount")}
    assert {(NAMESPACE, OPERATOR), (AGENT_NS, AGENT)} <= accounts
    assert _subjects(default) == {(NAMESPACE, OPERATOR), (AGENT_NS, AGENT)}
    annotated = render({"operator.serviceAccount.annotations": {"eks.amazonaws.com/role-arn": "arn:x"}})
    sa = annotated.find("ServiceAccount", OPERATOR)
    assert sa["metadata"]["annotations"] == {"eks.amazonaws.com/role-arn": "arn:x"}
    assert "annotations" not in default.find("ServiceAccount", OPERATOR)["metadata"]


def test_a_service_account_the_user_brings_is_what_bindings_pods_and_policies_name() -> None:
    rendered = render(
        {
            "operator.serviceAccount": {"create": False, "name": "platform-operator"},
            "agent.serviceAccount": {"create": False, "name": "platform-agent"},
        }
    )
    names = {d["metadata"]["name"] for d in rendered.all("ServiceAccount")}
    assert names == {f"{OPERATOR}-test"}  # only the helm test's own
    assert _pod(rendered, "Deployment", OPERATOR)["serviceAccountName"] == "platform-operator"
    assert _pod(rendered, "DaemonSet", AGENT)["serviceAccountName"] == "platform-agent"
    assert _subjects(rendered) == {(NAMESPACE, "platform-operator"), (AGENT_NS, "platform-agent")}
    expressions = _policy_expressions(rendered)
    # node-keys (not the operator), node-fields (the operator), own-node/own-events/approval (the agent).
    assert expressions.count(f"system:serviceaccount:{NAMESPACE}:platform-operator") >= 2
    assert expressions.count(f"system:serviceaccount:{AGENT_NS}:platform-agent") >= 3
    assert f":{OPERATOR}'" not in expressions and f":{AGENT}'" not in expressions


def test_a_named_service_account_the_chart_creates() -> None:
    rendered = render({"agent.serviceAccount.name": "node-agent"})
    assert rendered.find("ServiceAccount", "node-agent")["metadata"]["namespace"] == AGENT_NS
    assert _pod(rendered, "DaemonSet", AGENT)["serviceAccountName"] == "node-agent"
    assert (AGENT_NS, "node-agent") in _subjects(rendered)


@pytest.mark.parametrize("component", ["operator", "agent"])
def test_create_false_without_a_name_is_refused(component: str) -> None:
    done = template({f"{component}.serviceAccount.create": False})
    assert done.returncode != 0
    message = f"{component}.serviceAccount.name is required when {component}.serviceAccount.create is false"
    assert message in done.stderr, done.stderr


# --- names and the image --------------------------------------------------------------------------------


def test_fullname_override_names_every_object_and_wins_over_name_override() -> None:
    rendered = render({"fullnameOverride": "pleg", "nameOverride": "ignored"})
    named = {d["metadata"]["name"] for d in rendered.docs if d["kind"] != "CustomResourceDefinition"}
    assert {"pleg-operator", "pleg-agent", "pleg-operator-metrics", "pleg-operator-node-keys"} <= named
    strays = sorted(n for n in named if not n.startswith("pleg-") and n != "evented-pleg-agent")
    assert strays == [], "objects not under fullnameOverride"
    assert not any("ignored" in n for n in named)
    assert "system:serviceaccount:evented-pleg-agent:pleg-agent" in _policy_expressions(rendered)


def _images(rendered: Rendered) -> set[str]:
    return {k["image"] for _, spec in pod_specs(rendered.docs) for k in spec["containers"]}


REPOSITORY = "ghcr.io/eventedpleg/evented-pleg-operator"
DIGEST = "sha256:" + "cd" * 32


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ({}, f"{REPOSITORY}:0.1.0"),
        ({"global.imageRegistry": "mirror.example.com"}, f"mirror.example.com/{REPOSITORY}:0.1.0"),
        (
            {"global.imageRegistry": "mirror.example.com:5000/p/"},
            f"mirror.example.com:5000/p/{REPOSITORY}:0.1.0",
        ),
        (
            {"global.imageRegistry": "m.example.com", "image.digest": DIGEST},
            f"m.example.com/{REPOSITORY}@{DIGEST}",
        ),
    ],
)
def test_global_image_registry_prefixes_every_pods_image(values: dict[str, Any], expected: str) -> None:
    assert _images(render(values)) == {expected}


# --- the schema stays strict ----------------------------------------------------------------------------

BAD = [
    ({"operator.serviceAccount": {"nmae": "x"}}, "/operator/serviceAccount", "additional properties 'nmae'"),
    ({"agent.serviceAccount.name": "Not_A_Name"}, "/agent/serviceAccount/name", "oneOf"),
    ({"operator.extraArgs": [1]}, "/operator/extraArgs/0", "want string"),
    ({"agent.extraEnv": [{"value": "x"}]}, "/agent/extraEnv/0", "missing property 'name'"),
    ({"agent.extraVolumeMounts": [{"name": "ca"}]}, "/agent/extraVolumeMounts/0", "missing property"),
    ({"operator.securityContext": "privileged"}, "/operator/securityContext", "want object"),
    ({"fullnameOverride": "Pleg"}, "/fullnameOverride", "does not match pattern"),
    ({"global.imageRegistry": "a b"}, "/global/imageRegistry", "does not match pattern"),
]  # fmt: skip


@pytest.mark.parametrize(("values", "path", "message"), BAD, ids=[str(v[0]) for v in BAD])
def test_the_schema_refuses_bad_platform_values(values: dict[str, Any], path: str, message: str) -> None:
    done = template(values)
    assert done.returncode != 0, f"accepted {values}"
    assert f"at '{path}" in done.stderr and message in done.stderr, done.stderr
