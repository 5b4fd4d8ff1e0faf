"""The Helm chart rendered by the real helm: lint, golden manifests, and what each object must say.

Golden files live in tests/golden/chart/; regenerate with UPDATE_GOLDEN=1 after an intended change and
review the diff. The targeted tests below say why each field matters, so a golden update cannot quietly
drop a security property.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import click
import pytest
import yaml
from prometheus_client import generate_latest

from eventedpleg import constants as c
from eventedpleg import protocol
from eventedpleg.agent import health
from eventedpleg.agent.metrics import AgentMetrics
from eventedpleg.cli import main as cli_main
from eventedpleg.controller.metrics import OperatorMetrics
from eventedpleg.core.node.facts.promtext import parse_metrics
from eventedpleg.core.rollout.drain import pods as drainpods
from eventedpleg.models.nodeconfig import RESERVED_TAINT_KEYS, RESERVED_TAINT_PREFIXES
from eventedpleg_lab import image
from eventedpleg_lab.kube.fakenodes import KWOK_TOLERATION
from tests.chart.chartlib import (
    CHART,
    NAMESPACE,
    Doc,
    Rendered,
    helm,
    parse,
    pod_specs,
    render,
    set_json_args,
    template,
)

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "tests" / "golden" / "chart"
UPDATE = os.environ.get("UPDATE_GOLDEN") == "1"
OPERATOR = "evented-pleg-operator"
AGENT = "evented-pleg-agent"
AGENT_NS = "evented-pleg-agent"

CASES: dict[str, dict[str, Any]] = {
    "default": {},
    "monitoring": {
        "serviceMonitor": {
            "enabled": True,
            "interval": "15s",
            "labels": {"release": "kube-prometheus-stack"},
        },
        "podMonitor": {"enabled": True, "interval": "20s", "labels": {"release": "kube-prometheus-stack"}},
        "prometheusRule": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}},
        "grafanaDashboard": {"enabled": True, "annotations": {"grafana_folder": "Kubernetes"}},
        "operator.replicas": 3,
        "operator.podDisruptionBudget.enabled": True,
        "operator.logLevel": "debug",
        "operator.logFormat": "json",
        "agent.logLevel": "debug",
        "agent.logFormat": "json",
        "image.digest": "sha256:" + "ab" * 32,
        "drain.allowForceDelete": True,
    },
    "single-replica-own-namespace": {
        "nameOverride": "epo",
        "operator.replicas": 1,
        "operator.tolerations": [KWOK_TOLERATION],
        "operator.affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "node-role.kubernetes.io/infra", "operator": "Exists"}]}
                    ]
                }
            }
        },
        "agent.namespace": "platform-agents",
        "agent.createNamespace": False,
        "agent.nodeSelector": {"eventedpleg.io/managed": "true"},
        "agent.tolerations": [KWOK_TOLERATION],
        "agent.priorityClassName": "",
        "agent.updateStrategy": {"maxSurge": 0, "maxUnavailable": 5},
        "imagePullSecrets": [{"name": "registry"}],
    },
    "network-policy": {
        "networkPolicy": {
            "enabled": True,
            "prometheus": {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "observability"}},
                "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
            },
            "nodeCIDRs": ["10.0.0.0/16", "fd00::/64"],
        },
        "agent.health.port": 9555,
        "agent.metrics.port": 9556,
    },
    # What platform teams set (tests/chart/test_chart_platform.py): a mirror, their own ServiceAccounts
    # and names, a proxy and a CA bundle, a stricter seccomp profile.
    "platform-values": {
        "fullnameOverride": "pleg",
        "global.imageRegistry": "mirror.example.com",
        "operator.serviceAccount": {"create": False, "name": "platform-operator"},
        "agent.serviceAccount": {"name": "platform-agent", "annotations": {"example.com/owner": "platform"}},
        "operator.podSecurityContext": {"runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 1000},
        "operator.securityContext": {"seccompProfile": {"type": "Localhost", "localhostProfile": "p.json"}},
        "agent.securityContext": {"seLinuxOptions": {"type": "spc_t"}},
        "operator.extraArgs": ["--verbose"],
        "operator.extraEnv": [{"name": "HTTPS_PROXY", "value": "http://proxy.example.com:3128"}],
        "operator.extraVolumes": [{"name": "corp-ca", "configMap": {"name": "corp-ca-bundle"}}],
        "operator.extraVolumeMounts": [{"name": "corp-ca", "mountPath": "/etc/ssl/corp", "readOnly": True}],
        "agent.extraEnv": [{"name": "SSL_CERT_FILE", "value": "/etc/ssl/corp/ca.crt"}],
        "agent.extraVolumes": [{"name": "corp-ca", "configMap": {"name": "corp-ca-bundle"}}],
        "agent.extraVolumeMounts": [{"name": "corp-ca", "mountPath": "/etc/ssl/corp", "readOnly": True}],
    },
    # An image imported straight into each node's runtime (`eventedpleg lab image`), no registry to pull from.
    "local-image": {
        "image.repository": "localhost/evented-pleg-operator",
        "image.tag": "0.1.0",
        "image.pullPolicy": "Never",
    },
}


@pytest.fixture(scope="module")
def default() -> Rendered:
    return render()


def _container(doc: Doc) -> Doc:
    containers = doc["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    container: Doc = containers[0]
    return container


# --- lint and golden ---------------------------------------------------------------------------------


@pytest.mark.parametrize("case", sorted(CASES))
def test_helm_lint_strict_is_clean(case: str) -> None:
    done = helm("lint", "--strict", str(CHART), "-n", NAMESPACE, *set_json_args(CASES[case]))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "[ERROR]" not in done.stdout
    assert "[WARNING]" not in done.stdout, done.stdout


def without_crd(text: str) -> str:
    """The render less templates/crd.yaml: the CRD is the generated one (crdgen --check, and
    test_chart_conventions compares it), so a model change does not rewrite every golden file."""
    parts = text.split("---\n# Source: ")
    return "---\n# Source: ".join(p for p in parts if not p.startswith(f"{CHART.name}/templates/crd.yaml"))


@pytest.mark.parametrize("case", sorted(CASES))
def test_rendered_chart_matches_golden(case: str) -> None:
    text = without_crd(render(CASES[case]).text)
    path = GOLDEN / f"{case}.yaml"
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert text == path.read_text(), f"{path.name} changed; rerun with UPDATE_GOLDEN=1 if intended"


def test_golden_files_have_a_case_each() -> None:
    assert {p.stem for p in GOLDEN.glob("*.yaml")} == set(CASES)


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_object_is_well_formed(case: str) -> None:
    rendered = render(CASES[case])  # parse() already refused duplicate keys
    names = [(d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"]) for d in rendered.docs]
    assert len(names) == len(set(names)), "two objects with one name"
    cluster_scoped = {
        "Namespace", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition",
        "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
    }  # fmt: skip
    for doc in rendered.docs:
        meta = doc["metadata"]
        assert meta["labels"]["app.kubernetes.io/part-of"] == "evented-pleg-operator", doc["kind"]
        assert ("namespace" in meta) == (doc["kind"] not in cluster_scoped), (doc["kind"], meta)


def test_default_objects(default: Rendered) -> None:
    assert default.kinds() == sorted(
        [
            f"ClusterRole/{AGENT}", f"ClusterRole/{OPERATOR}",
            "ClusterRole/evented-pleg-view", "ClusterRole/evented-pleg-edit",  # aggregated, for the CLI
            f"ClusterRoleBinding/{AGENT}", f"ClusterRoleBinding/{OPERATOR}",
            f"CustomResourceDefinition/{c.CRD_NAME}",
            f"DaemonSet/{AGENT}", f"Deployment/{OPERATOR}", f"Namespace/{AGENT_NS}",
            f"Pod/{OPERATOR}-test",  # `helm test` and the five below: hooks, made only by `helm test`
            f"Role/{AGENT}", f"Role/{AGENT}-events", f"Role/{OPERATOR}", f"Role/{OPERATOR}-agent-pods",
            f"Role/{OPERATOR}-events", f"Role/{OPERATOR}-test", f"Role/{OPERATOR}-test-agents",
            f"RoleBinding/{AGENT}", f"RoleBinding/{AGENT}-events", f"RoleBinding/{OPERATOR}",
            f"RoleBinding/{OPERATOR}-agent-pods", f"RoleBinding/{OPERATOR}-events",
            f"RoleBinding/{OPERATOR}-test", f"RoleBinding/{OPERATOR}-test-agents",
            f"Service/{OPERATOR}-metrics",
            f"ServiceAccount/{AGENT}", f"ServiceAccount/{OPERATOR}", f"ServiceAccount/{OPERATOR}-test",
            f"ValidatingAdmissionPolicy/{AGENT}-own-events", f"ValidatingAdmissionPolicy/{AGENT}-own-node",
            f"ValidatingAdmissionPolicy/{OPERATOR}-approval",
            f"ValidatingAdmissionPolicy/{OPERATOR}-node-fields",
            f"ValidatingAdmissionPolicy/{OPERATOR}-node-keys",
            f"ValidatingAdmissionPolicy/{OPERATOR}-node-taint-key",
            f"ValidatingAdmissionPolicy/{OPERATOR}-nodeconfig-spec",
            f"ValidatingAdmissionPolicyBinding/{AGENT}-own-events",
            f"ValidatingAdmissionPolicyBinding/{AGENT}-own-node",
            f"ValidatingAdmissionPolicyBinding/{OPERATOR}-approval",
            f"ValidatingAdmissionPolicyBinding/{OPERATOR}-node-fields",
            f"ValidatingAdmissionPolicyBinding/{OPERATOR}-node-keys",
            f"ValidatingAdmissionPolicyBinding/{OPERATOR}-node-taint-key",
            f"ValidatingAdmissionPolicyBinding/{OPERATOR}-nodeconfig-spec",
        ]
    )  # fmt: skip


# --- the operator --------------------------------------------------------------------------------------


def test_operator_pod_is_unprivileged(default: Rendered) -> None:
    deploy = default.find("Deployment", OPERATOR)
    pod = deploy["spec"]["template"]["spec"]
    assert pod["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": 65532,  # the image's USER
        "runAsGroup": 65532,
        "fsGroup": 65532,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert _container(deploy)["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "privileged": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    for key in ("hostPID", "hostNetwork", "hostIPC"):
        assert key not in pod
    assert all("hostPath" not in v for v in pod["volumes"])


def test_operator_pod_meets_pod_security_restricted(default: Rendered) -> None:
    """The rules of the "restricted" level (k8s.io/pod-security-admission) that a pod template can break;
    tests/cluster/test_chart_install.py proves the same with the real admission plugin."""
    pod = default.find("Deployment", OPERATOR)["spec"]["template"]["spec"]
    allowed_volumes = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
                       "projected", "secret"}  # fmt: skip
    for volume in pod.get("volumes", []):
        assert set(volume) - {"name"} <= allowed_volumes, volume
    for container in pod["containers"]:
        sc = container["securityContext"]
        assert sc["allowPrivilegeEscalation"] is False
        assert sc["capabilities"]["drop"] == ["ALL"]
        assert set(sc["capabilities"].get("add", [])) <= {"NET_BIND_SERVICE"}
        assert sc.get("runAsNonRoot", pod["securityContext"]["runAsNonRoot"]) is True
        assert sc.get("runAsUser", pod["securityContext"]["runAsUser"]) != 0
        assert "seccompProfile" in sc or "seccompProfile" in pod["securityContext"]
        assert not any(p.get("hostPort") for p in container.get("ports", []))


def test_operator_deployment_runs_two_replicas_one_active(default: Rendered) -> None:
    deploy = default.find("Deployment", OPERATOR)
    spec = deploy["spec"]
    assert spec["replicas"] == 2
    # The standby must start before an old replica stops; readiness must not wait for the Lease, or a
    # rolling update could never finish (see the template's comment): it is the node cache being synced,
    # which the standby's is too. Liveness is the loops' progress.
    assert spec["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1},
    }
    container = _container(deploy)
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert container["ports"] == [{"name": "metrics", "containerPort": 8080, "protocol": "TCP"}]
    anti = spec["template"]["spec"]["affinity"]["podAntiAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"
    ]
    assert anti[0]["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert anti[0]["podAffinityTerm"]["labelSelector"]["matchLabels"] == spec["selector"]["matchLabels"]
    assert container["resources"] == {
        "requests": {"cpu": "50m", "memory": "96Mi"},
        "limits": {"memory": "256Mi"},
    }


def test_operator_env_and_argv_are_accepted_by_the_cli(default: Rendered) -> None:
    deploy = default.find("Deployment", OPERATOR)
    container = _container(deploy)
    env = {e["name"]: e for e in container["env"]}
    assert env["POD_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert env["EVENTEDPLEG_NAMESPACE"]["value"] == NAMESPACE
    params = _parse_cli(container, {"POD_NAME": "op-abc", "EVENTEDPLEG_NAMESPACE": NAMESPACE})
    assert params == {
        "namespace": NAMESPACE,
        "kubeconfig": None,  # in-cluster credentials
        "context": None,
        "metrics_port": 8080,
        "leader_elect": True,
        "identity": "op-abc",
        # client-go's rules: the leader stops (renew deadline) before a standby may take over (duration).
        "lease_duration": 15.0,
        "renew_deadline": 10.0,
        "retry_period": 2.0,
        "lease_request_timeout": 5.0,
        "rollout_stale_seconds": 120.0,
        "informer_stale_seconds": 420.0,
        "allow_force_delete": False,
        "list_namespaces": True,  # drain.listNamespaces
        "agent_namespace": "evented-pleg-agent",  # its pods' readiness is watched there
        "log_format": "text",
        "verbose": False,
    }
    lease = render(
        {"operator.leaderElection": {"leaseDuration": 30, "renewDeadline": 20, "retryPeriod": 4}}
    ).find("Deployment", OPERATOR)
    params = _parse_cli(_container(lease), {"POD_NAME": "op-abc", "EVENTEDPLEG_NAMESPACE": NAMESPACE})
    assert (params["lease_duration"], params["renew_deadline"], params["retry_period"]) == (30, 20, 4)
    assert deploy["spec"]["template"]["spec"]["serviceAccountName"] == OPERATOR


def test_pods_delete_only_when_force_delete_is_allowed(default: Rendered) -> None:
    """`pods delete` bypasses PodDisruptionBudgets: granted, and honoured by the operator, only together."""

    def pod_verbs(rendered: Rendered) -> set[str]:
        rules = rendered.find("ClusterRole", OPERATOR)["rules"]
        return {v for r in rules if r["apiGroups"] == [""] and "pods" in r["resources"] for v in r["verbs"]}

    env = {"POD_NAME": "op-abc", "EVENTEDPLEG_NAMESPACE": NAMESPACE}
    assert pod_verbs(default) == {"list"}  # the agent pods' watch is a Role in the agent's namespace
    assert _parse_cli(_container(default.find("Deployment", OPERATOR)), env)["allow_force_delete"] is False
    allowed = render({"drain.allowForceDelete": True})
    assert pod_verbs(allowed) == {"list", "delete"}
    assert _parse_cli(_container(allowed.find("Deployment", OPERATOR)), env)["allow_force_delete"] is True


def test_namespaces_are_listed_only_with_list_namespaces(default: Rendered) -> None:
    """`namespaces list` (drain.rules[].namespaceSelector) is granted and used together: off, the operator
    refuses such a NodeConfig in its status instead of failing its drains."""

    def granted(rendered: Rendered) -> bool:
        rules = rendered.find("ClusterRole", OPERATOR)["rules"]
        return any("namespaces" in r["resources"] and "list" in r["verbs"] for r in rules)

    env = {"POD_NAME": "op-abc", "EVENTEDPLEG_NAMESPACE": NAMESPACE}
    assert granted(default)
    assert _parse_cli(_container(default.find("Deployment", OPERATOR)), env)["list_namespaces"] is True
    off = render({"drain.listNamespaces": False})
    assert not granted(off)
    assert _parse_cli(_container(off.find("Deployment", OPERATOR)), env)["list_namespaces"] is False
    unset = render({"drain.listNamespaces": None})  # values of a chart without the key (--reuse-values)
    assert granted(unset)
    assert _parse_cli(_container(unset.find("Deployment", OPERATOR)), env)["list_namespaces"] is True


def test_node_keys_policy_names_every_operator_owned_key(default: Rendered) -> None:
    """One writer per key: node-keys-vap.yaml keeps everyone but the operator (nodes' credentials, the
    agent, people) off the eventedpleg.io/* keys protocol.WRITERS gives the operator alone, and off no
    key the agent writes."""
    policy = default.find("ValidatingAdmissionPolicy", f"{OPERATOR}-node-keys")
    (changed,) = [v["expression"] for v in policy["spec"]["variables"] if v["name"] == "changed"]
    listed = json.loads(changed.split(".filter(")[0])
    operator_only = {
        key
        for key, writer in protocol.WRITERS.items()
        if writer is protocol.Writer.OPERATOR and key.startswith(f"{protocol.GROUP}/")
    }  # the autoscalers' keys are outside eventedpleg.io/*: node-fields keeps the operator to them
    assert set(listed) == operator_only and len(listed) == len(operator_only)
    agent_writes = {
        key
        for key, writer in protocol.WRITERS.items()
        if writer in (protocol.Writer.AGENT, protocol.Writer.HANDOFF)
    }
    assert not agent_writes & set(listed)
    (condition,) = policy["spec"]["matchConditions"]
    assert condition["expression"] == (
        f"request.userInfo.username != 'system:serviceaccount:{NAMESPACE}:{OPERATOR}'"
    )
    (rule,) = policy["spec"]["matchConstraints"]["resourceRules"]
    assert rule["operations"] == ["CREATE", "UPDATE"] and rule["resources"] == ["nodes", "nodes/status"]
    binding = default.find("ValidatingAdmissionPolicyBinding", f"{OPERATOR}-node-keys")
    assert binding["spec"] == {"policyName": f"{OPERATOR}-node-keys", "validationActions": ["Deny"]}


def test_operator_policy_admits_exactly_the_autoscaler_keys_the_operator_writes(default: Rendered) -> None:
    """The operator's node-fields policy names the autoscaler annotations of protocol.py, no more."""
    policy = default.find("ValidatingAdmissionPolicy", f"{OPERATOR}-node-fields")
    (ours,) = [v["expression"] for v in policy["spec"]["variables"] if v["name"] == "ours"]
    assert tuple(json.loads(ours)) == protocol.AUTOSCALER_ANNOTATIONS


def test_operator_policy_refuses_the_reserved_taint_keys_the_crd_refuses(default: Rendered) -> None:
    """The node-fields policy pins the same reserved taint keys as the NodeConfig model, no fewer."""
    policy = default.find("ValidatingAdmissionPolicy", f"{OPERATOR}-node-fields")
    variables = {v["name"]: v["expression"] for v in policy["spec"]["variables"]}
    assert tuple(json.loads(variables["reservedPrefixes"])) == RESERVED_TAINT_PREFIXES
    assert tuple(json.loads(variables["reservedKeys"])) == RESERVED_TAINT_KEYS


@pytest.mark.parametrize("policy_name", [f"{OPERATOR}-node-fields", f"{AGENT}-own-node"])
def test_node_policies_let_only_the_state_label_change(default: Rendered, policy_name: str) -> None:
    """The operator's and the agent's Node policies: the labels are read in the two validations of
    epo.stateLabelOnly alone, which name the protocol's label key (protocol.LABEL_STATE) and hold it to
    the state annotation (ANN_STATE) of the same write; no other validation lets labels through. The
    real API server runs them in tests/cluster/test_chart_install.py."""
    policy = default.find("ValidatingAdmissionPolicy", policy_name)
    variables = {v["name"]: v["expression"] for v in policy["spec"]["variables"]}
    assert variables["oldLabels"] == "oldObject.metadata.?labels.orValue({})"
    assert variables["newLabels"] == "object.metadata.?labels.orValue({})"
    reading = [v["expression"] for v in policy["spec"]["validations"] if "Labels" in v["expression"]]
    assert len(reading) == 2, reading
    only, mirror = reading
    assert only.count(f"k == '{protocol.LABEL_STATE}'") == 2  # added, changed or removed: that key alone
    assert f"variables.newAnnotations[?'{protocol.ANN_STATE}']" in mirror
    assert not [v for v in policy["spec"]["validations"] if "labels" in v["expression"]]  # no other rule


def test_operator_taint_key_policy_reads_every_nodeconfig(default: Rendered) -> None:
    """Layer 2 of operator-vap.yaml: every NodeConfig is a param. With none the binding allows: the API
    server applies parameterNotFoundAction before any match condition, so Deny would refuse every Node
    update by anyone (the agents' included; tests/cluster/test_chart_install.py runs them)."""
    policy = default.find("ValidatingAdmissionPolicy", f"{OPERATOR}-node-taint-key")
    assert policy["spec"]["paramKind"] == {
        "apiVersion": f"{protocol.GROUP}/{c.VERSION}",
        "kind": "NodeConfig",
    }
    binding = default.find("ValidatingAdmissionPolicyBinding", f"{OPERATOR}-node-taint-key")
    assert binding["spec"]["paramRef"] == {"selector": {}, "parameterNotFoundAction": "Allow"}
    assert binding["spec"]["validationActions"] == ["Deny"]


def test_network_policies_only_when_enabled(default: Rendered) -> None:
    assert default.all("NetworkPolicy") == []
    rendered = render(CASES["network-policy"])
    operator = rendered.find("NetworkPolicy", OPERATOR)
    deploy = rendered.find("Deployment", OPERATOR)
    assert operator["metadata"]["namespace"] == NAMESPACE
    assert operator["spec"]["podSelector"]["matchLabels"] == deploy["spec"]["selector"]["matchLabels"]
    assert operator["spec"]["policyTypes"] == ["Ingress"]  # egress to the API server stays open
    (rule,) = operator["spec"]["ingress"]
    ports = [p["name"] for p in _container(deploy)["ports"]]
    assert rule["ports"] == [{"port": "metrics", "protocol": "TCP"}] and ports == ["metrics"]
    prometheus = CASES["network-policy"]["networkPolicy"]["prometheus"]
    assert rule["from"] == [
        {"namespaceSelector": prometheus["namespaceSelector"], "podSelector": prometheus["podSelector"]},
        {"ipBlock": {"cidr": "10.0.0.0/16"}},
        {"ipBlock": {"cidr": "fd00::/64"}},
    ]
    agent = rendered.find("NetworkPolicy", AGENT)
    daemonset = rendered.find("DaemonSet", AGENT)
    assert agent["metadata"]["namespace"] == AGENT_NS
    assert agent["spec"]["podSelector"]["matchLabels"] == daemonset["spec"]["selector"]["matchLabels"]
    metrics_port = _parse_cli(_container(daemonset), {"NODE_NAME": "n"})["metrics_port"]
    assert metrics_port == 9556  # the probes' port is on the node's loopback: no policy to write for it
    (agent_rule,) = agent["spec"]["ingress"]
    assert agent_rule["ports"] == [{"port": metrics_port, "protocol": "TCP"}]
    assert agent_rule["from"] == rule["from"]  # the same Prometheus and nodes as the operator's /metrics
    # Without nodeCIDRs: the default Prometheus; without /metrics: nothing at all.
    bare = render({"networkPolicy.enabled": True})
    (bare_rule,) = bare.find("NetworkPolicy", AGENT)["spec"]["ingress"]
    assert bare_rule["ports"] == [{"port": 9442, "protocol": "TCP"}] and len(bare_rule["from"]) == 1
    closed = render({"networkPolicy.enabled": True, "agent.metrics.port": 0})
    assert closed.find("NetworkPolicy", AGENT)["spec"]["ingress"] == []
    (default_rule,) = bare.find("NetworkPolicy", OPERATOR)["spec"]["ingress"]
    assert default_rule["from"] == [
        {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
            "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
        }
    ]


def test_metrics_service_and_pdb(default: Rendered) -> None:
    deploy = default.find("Deployment", OPERATOR)
    service = default.find("Service", f"{OPERATOR}-metrics")
    assert service["spec"]["selector"] == deploy["spec"]["selector"]["matchLabels"]
    assert service["spec"]["ports"] == [
        {"name": "metrics", "port": 8080, "targetPort": "metrics", "protocol": "TCP"}
    ]
    # Off by default: both replicas on one node (a one-worker cluster) would make it refuse a drain for good.
    assert default.all("PodDisruptionBudget") == []
    on = render({"operator.podDisruptionBudget.enabled": True})
    pdb = on.find("PodDisruptionBudget", OPERATOR)
    assert pdb["spec"]["maxUnavailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"] == deploy["spec"]["selector"]["matchLabels"]
    # A single replica gets no PDB: maxUnavailable 1 of 1 protects nothing and min 1 would block drains.
    one = {"operator.podDisruptionBudget.enabled": True, "operator.replicas": 1}
    assert render(one).all("PodDisruptionBudget") == []


def test_the_operators_own_drains_never_evict_its_pods(default: Rendered) -> None:
    """The operator's pods carry the drain opt-out the drain's own filter reads, whatever podAnnotations
    add: they stay on the node being changed, as the agent's DaemonSet pods do."""
    for rendered in (default, render({"operator.podAnnotations": {"example.com/team": "platform"}})):
        pod = rendered.find("Deployment", OPERATOR)["spec"]["template"]
        annotations = pod["metadata"]["annotations"]
        assert annotations[drainpods.OPT_OUT_ANNOTATION] == drainpods.OPT_OUT_VALUE
        ref = {"metadata": {**pod["metadata"], "namespace": "x", "name": "operator-1",
                            "ownerReferences": [{"kind": "ReplicaSet", "controller": True}]},
               "spec": pod["spec"], "status": {"phase": "Running"}}  # fmt: skip
        selection = drainpods.select_pods([ref], drainpods.Options(delete_empty_dir_data=True, force=True))
        assert selection.evict == () and selection.done


# --- the agent ------------------------------------------------------------------------------------------


def test_agent_daemonset_has_the_host(default: Rendered) -> None:
    ds = default.find("DaemonSet", AGENT)
    assert ds["metadata"]["namespace"] == AGENT_NS
    pod = ds["spec"]["template"]["spec"]
    assert pod["hostPID"] is True  # nsenter -t 1, the kubelet's /proc entries
    assert pod["hostNetwork"] is True  # 127.0.0.1:10248 and :10250 are the host's loopback
    assert pod["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert pod["priorityClassName"] == "system-node-critical"
    assert pod["serviceAccountName"] == AGENT
    # Surge, so an image the nodes cannot pull leaves the old agents running (agent/hostlock.py).
    assert ds["spec"]["updateStrategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": "10%", "maxUnavailable": 0},
    }
    assert pod["tolerations"] == [{"operator": "Exists"}]
    assert pod["nodeSelector"] == {"kubernetes.io/os": "linux"}
    container = _container(ds)
    assert container["securityContext"]["privileged"] is True
    assert container["securityContext"]["runAsUser"] == 0  # the image defaults to 65532
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["host-root"]["hostPath"] == {"path": "/", "type": "Directory"}
    assert mounts["host-root"]["mountPath"] == "/host"
    assert not mounts["host-root"].get("readOnly", False)  # it writes drop-ins and its state there


def test_agent_token_is_the_pod_bound_one(default: Rendered) -> None:
    """agent-vap.yaml reads the node from the pod-bound token; the default projected token is one."""
    pod = default.find("DaemonSet", AGENT)["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is True
    sa = default.find("ServiceAccount", AGENT)
    assert sa["metadata"]["namespace"] == AGENT_NS
    assert sa["automountServiceAccountToken"] is True
    assert not [v for v in pod["volumes"] if "secret" in v or "projected" in v]
    vap = default.find("ValidatingAdmissionPolicy", f"{AGENT}-own-node")
    condition = vap["spec"]["matchConditions"][0]["expression"]
    assert f"system:serviceaccount:{AGENT_NS}:{AGENT}" in condition


def test_agent_argv_is_accepted_by_the_cli(default: Rendered) -> None:
    container = _container(default.find("DaemonSet", AGENT))
    assert container["command"] == ["eventedpleg", "agent"]
    env = {e["name"]: e for e in container["env"]}
    assert env["NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    params = _parse_cli(container, {"NODE_NAME": "node-1"})
    assert params["node"] == "node-1"
    assert (params["health_port"], params["health_stale_seconds"]) == (9441, 180.0)
    assert (params["metrics_port"], params["metrics_address"]) == (9442, "0.0.0.0")  # its own listener
    assert params["host_root"] == Path("/host")
    assert params["namespace"] == NAMESPACE  # where the operator writes the rendered ConfigMaps
    assert "simulate" not in params and "profile" not in params  # the image's agent has no simulator
    assert params["once"] is False


def test_agent_probes_use_its_health_endpoint(default: Rendered) -> None:
    container = _container(default.find("DaemonSet", AGENT))
    # No ports entry: on hostNetwork a containerPort is a hostPort, and the scheduler (NodePorts) would
    # keep the surge pod off the node its old pod still holds the port on.
    assert "ports" not in container
    # The node's loopback, where the agent's probe listener is (agent.health.PROBE_HOST): the kubelet
    # probes a hostNetwork pod from the node's network namespace.
    for probe in ("livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"] == {"host": "127.0.0.1", "path": "/healthz", "port": 9441}
    assert health.PROBE_HOST == "127.0.0.1"
    # The probe must tolerate a quiet watch (60 s) plus its read timeout before restarting the agent.
    liveness = container["livenessProbe"]
    assert liveness["periodSeconds"] * liveness["failureThreshold"] >= 60


def test_agent_namespace_is_the_only_privileged_one(default: Rendered) -> None:
    ns = default.find("Namespace", AGENT_NS)
    labels = ns["metadata"]["labels"]
    for mode in ("enforce", "audit", "warn"):
        assert labels[f"pod-security.kubernetes.io/{mode}"] == "privileged"
    assert len(default.all("Namespace")) == 1  # the release namespace is the user's (helm --create-namespace)


@pytest.mark.parametrize("case", sorted(CASES))
def test_nothing_but_the_agent_is_privileged(case: str) -> None:
    rendered = render(CASES[case])
    agent_ns = CASES[case].get("agent.namespace", AGENT_NS)
    for doc, pod in pod_specs(rendered.docs):
        is_agent = doc["kind"] == "DaemonSet" and doc["metadata"]["namespace"] == agent_ns
        host = {k for k in ("hostPID", "hostNetwork", "hostIPC") if pod.get(k)}
        host_paths = [v for v in pod.get("volumes", []) if "hostPath" in v]
        privileged = [x["name"] for x in pod["containers"] if x.get("securityContext", {}).get("privileged")]
        if is_agent:
            assert host == {"hostPID", "hostNetwork"} and privileged and host_paths
        else:
            assert not host and not privileged and not host_paths, doc["metadata"]["name"]


def test_no_role_grants_secrets_or_wildcards(default: Rendered) -> None:
    for doc in default.all("ClusterRole") + default.all("Role"):
        for rule in doc["rules"]:
            assert "*" not in rule["verbs"] and "*" not in rule["resources"], doc["metadata"]["name"]
            assert "secrets" not in rule["resources"], doc["metadata"]["name"]
            assert not {"escalate", "bind", "impersonate"} & set(rule["verbs"])


# --- values ---------------------------------------------------------------------------------------------


def test_values_reach_the_objects() -> None:
    rendered = render(CASES["single-replica-own-namespace"], namespace="ops")
    assert rendered.all("Namespace") == []  # createNamespace: false
    ds = rendered.find("DaemonSet", "epo-agent")
    pod = ds["spec"]["template"]["spec"]
    assert ds["metadata"]["namespace"] == "platform-agents"
    # helm merges maps: the default os selector stays unless set to null.
    assert pod["nodeSelector"] == {"kubernetes.io/os": "linux", "eventedpleg.io/managed": "true"}
    assert pod["tolerations"] == [KWOK_TOLERATION]
    assert "priorityClassName" not in pod
    assert pod["imagePullSecrets"] == [{"name": "registry"}]
    assert ds["spec"]["updateStrategy"]["rollingUpdate"] == {"maxSurge": 0, "maxUnavailable": 5}
    deploy = rendered.find("Deployment", "epo-operator")
    op_pod = deploy["spec"]["template"]["spec"]
    # The given affinity replaces the default (no anti-affinity); its term gains the image's architectures.
    infra = {"key": "node-role.kubernetes.io/infra", "operator": "Exists"}
    arch = {"key": "kubernetes.io/arch", "operator": "In", "values": list(image.ARCHES)}
    assert op_pod["affinity"] == {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [infra, arch]}]
            }
        }
    }
    assert op_pod["tolerations"] == [KWOK_TOLERATION]
    # nameOverride renames the cluster-wide objects, and the admission policy follows the agent's new name.
    vap = rendered.find("ValidatingAdmissionPolicy", "epo-agent-own-node")
    assert (
        "system:serviceaccount:platform-agents:epo-agent" in vap["spec"]["matchConditions"][0]["expression"]
    )
    binding = rendered.find("ClusterRoleBinding", "epo-operator")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "epo-operator", "namespace": "ops"}]


def test_image_tag_digest_and_debug() -> None:
    default_image = _container(render().find("Deployment", OPERATOR))["image"]
    assert default_image == "ghcr.io/eventedpleg/evented-pleg-operator:0.1.0"  # the chart's appVersion
    rendered = render(CASES["monitoring"])
    for kind, name in (("Deployment", OPERATOR), ("DaemonSet", AGENT)):
        container = _container(rendered.find(kind, name))
        assert container["image"] == "ghcr.io/eventedpleg/evented-pleg-operator@sha256:" + "ab" * 32
        assert "--verbose" in container["args"]


ARCH = "kubernetes.io/arch"


def _affinity(rendered: Rendered, kind: str, name: str) -> Doc:
    affinity: Doc = rendered.find(kind, name)["spec"]["template"]["spec"]["affinity"]
    return affinity


def test_pods_land_only_on_the_architectures_the_image_has(default: Rendered) -> None:
    """image.architectures is what a release's image index holds (the builder's ARCHES; a release's chart
    package sets it to the platforms it built), and both pods require one of them."""
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["image"]["architectures"] == list(image.ARCHES)
    arch = {"key": ARCH, "operator": "In", "values": list(image.ARCHES)}
    for kind, name in (("Deployment", OPERATOR), ("DaemonSet", AGENT)):
        node = _affinity(default, kind, name)["nodeAffinity"]
        terms = node["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        assert terms == [{"matchExpressions": [arch]}], kind
    # The operator's default spreading stays.
    assert "podAntiAffinity" in _affinity(default, "Deployment", OPERATOR)


def test_the_architecture_joins_every_required_term_of_a_given_affinity() -> None:
    """Required node selector terms are ORed: each one carries the architecture, or a term without it
    would schedule a pod where the image cannot run. The rest of the given affinity is kept as it is."""
    infra = {"key": "node-role.kubernetes.io/infra", "operator": "Exists"}
    pool = {"key": "pool", "operator": "In", "values": ["a"]}
    preferred = [{"weight": 1, "preference": {"matchExpressions": [pool]}}]
    zone = {"topologyKey": "topology.kubernetes.io/zone", "labelSelector": {"matchLabels": {"a": "b"}}}
    spread = {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 5, "podAffinityTerm": zone}]}
    given = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [infra]}, {"matchExpressions": [pool]}]
            },
            "preferredDuringSchedulingIgnoredDuringExecution": preferred,
        },
        "podAntiAffinity": spread,
    }
    rendered = render({"image.architectures": ["arm64"], "operator.affinity": given, "agent.affinity": given})
    arch = {"key": ARCH, "operator": "In", "values": ["arm64"]}
    for kind, name in (("Deployment", OPERATOR), ("DaemonSet", AGENT)):
        affinity = _affinity(rendered, kind, name)
        assert affinity["nodeAffinity"] == {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [infra, arch]}, {"matchExpressions": [pool, arch]}]
            },
            "preferredDuringSchedulingIgnoredDuringExecution": preferred,
        }, kind
        assert affinity["podAntiAffinity"] == spread, kind
        assert set(affinity) == {"nodeAffinity", "podAntiAffinity"}, kind


def test_local_image_is_never_pulled() -> None:
    """The lab's image exists only in each node's runtime: both pods name it and must not try a registry."""
    rendered = render(CASES["local-image"])
    for kind, name in (("Deployment", OPERATOR), ("DaemonSet", AGENT)):
        container = _container(rendered.find(kind, name))
        assert container["image"] == "localhost/evented-pleg-operator:0.1.0"
        assert container["imagePullPolicy"] == "Never"
    assert not rendered.find("Deployment", OPERATOR)["spec"]["template"]["spec"].get("imagePullSecrets")


BAD_VALUES = [
    ({"operator.replicas": "two"}, "/operator/replicas", "got string, want integer"),
    ({"operator.replicas": 0}, "/operator/replicas", "minimum"),
    ({"operator.metricsPort": 80}, "/operator/metricsPort", "minimum"),  # uid 65532 cannot bind it
    ({"operator.logLevel": "trace"}, "/operator/logLevel", "value must be one of"),
    ({"operator.bogus": 1}, "/operator", "additional properties 'bogus' not allowed"),
    ({"image.pullPolicy": "Sometimes"}, "/image/pullPolicy", "value must be one of"),
    ({"image.digest": "latest"}, "/image/digest", "does not match pattern"),
    ({"image.architectures": ["s390x"]}, "/image/architectures/0", "value must be one of"),
    ({"image.architectures": []}, "/image/architectures", "minItems"),
    ({"agent.namespace": "Agents_NS"}, "/agent/namespace", "does not match pattern"),
    ({"agent.createNamespace": "yes"}, "/agent/createNamespace", "want boolean"),
    ({"agent.updateStrategy": {"maxUnavailable": -1}}, "/agent/updateStrategy/maxUnavailable", "oneOf"),
    ({"agent.updateStrategy": {"maxSurge": "150%"}}, "/agent/updateStrategy/maxSurge", "oneOf"),
    ({"agent.tolerations": [{"operator": "Sometimes"}]}, "/agent/tolerations/0/operator", "one of"),
    ({"agent.resources": {"requests": {"cpu": "lots"}}}, "/agent/resources/requests/cpu", "pattern"),
    ({"serviceMonitor": {"enabled": "true"}}, "/serviceMonitor/enabled", "want boolean"),
    ({"podMonitor": {"enabled": True, "interval": "soon"}}, "/podMonitor/interval", "pattern"),
    ({"prometheusRule": {"enabled": True, "degradedFor": "5 min"}}, "/prometheusRule/degradedFor", "pattern"),
    ({"nameOverride": "Evented_PLEG"}, "/nameOverride", "does not match pattern"),
    ({"networkPolicy": {"enabled": True, "nodeCIDRs": ["10.0.0.1"]}}, "/networkPolicy/nodeCIDRs/0", "pattern"),  # noqa: E501
    ({"networkPolicy": {"enabled": True, "prometheus": {"podSelector": {"app": "x"}}}},
     "/networkPolicy/prometheus/podSelector", "additional properties 'app' not allowed"),
    ({"typo": True}, "", "additional properties 'typo' not allowed"),
]  # fmt: skip


@pytest.mark.parametrize(("values", "path", "message"), BAD_VALUES, ids=[str(v[0]) for v in BAD_VALUES])
def test_schema_rejects_bad_values(values: dict[str, Any], path: str, message: str) -> None:
    done = template(values)
    assert done.returncode != 0, f"accepted {values}"
    assert "values don't meet the specifications of the schema" in done.stderr
    assert f"at '{path}" in done.stderr and message in done.stderr, done.stderr


def test_agent_update_strategy_that_could_never_roll_is_refused() -> None:
    done = template({"agent.updateStrategy": {"maxSurge": "0%", "maxUnavailable": 0}})
    assert done.returncode != 0
    assert "agent.updateStrategy: maxSurge and maxUnavailable cannot both be 0" in done.stderr
    assert template({"agent.updateStrategy": {"maxSurge": 0, "maxUnavailable": 1}}).returncode == 0


def test_agent_namespace_must_differ_from_the_release_namespace() -> None:
    done = template(namespace=AGENT_NS)
    assert done.returncode != 0
    assert "agent.namespace (evented-pleg-agent) must differ from the release namespace" in done.stderr
    # Allowed when the user owns (and labels) the namespace: the chart then labels nothing.
    assert template({"agent.createNamespace": False}, namespace=AGENT_NS).returncode == 0


# --- monitoring -----------------------------------------------------------------------------------------


def test_monitoring_objects_only_when_enabled(default: Rendered) -> None:
    assert default.all("ServiceMonitor") == [] and default.all("PrometheusRule") == []
    assert default.all("PodMonitor") == []
    rendered = render(CASES["monitoring"])
    monitor = rendered.find("ServiceMonitor", OPERATOR)
    deploy = rendered.find("Deployment", OPERATOR)
    assert monitor["spec"]["selector"]["matchLabels"] == deploy["spec"]["selector"]["matchLabels"]
    assert monitor["spec"]["endpoints"] == [{"port": "metrics", "path": "/metrics", "interval": "15s"}]
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert rendered.find("PodDisruptionBudget", OPERATOR)["spec"]["maxUnavailable"] == 1


def test_pod_monitor_scrapes_each_agent_on_its_metrics_port_with_its_node() -> None:
    """The agent declares no container port (hostNetwork): the PodMonitor sets the address to the pod's
    IP and the metrics listener's port (the probes are on the node's loopback), and labels each series
    with the node the agent acts on. No metrics listener: no PodMonitor."""
    rendered = render({**CASES["monitoring"], "agent.health.port": 9555, "agent.metrics.port": 9557})
    monitor = rendered.find("PodMonitor", AGENT)
    daemonset = rendered.find("DaemonSet", AGENT)
    assert monitor["metadata"]["namespace"] == AGENT_NS
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert monitor["spec"]["selector"]["matchLabels"] == daemonset["spec"]["selector"]["matchLabels"]
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [AGENT_NS]}
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    assert (endpoint["path"], endpoint["interval"]) == ("/metrics", "20s")
    container = _container(daemonset)
    assert "ports" not in container
    assert container["livenessProbe"]["httpGet"]["port"] == 9555
    assert endpoint["relabelings"] == [
        {
            "sourceLabels": ["__meta_kubernetes_pod_container_name"],
            "regex": container["name"],
            "action": "keep",
        },
        {
            "sourceLabels": ["__meta_kubernetes_pod_ip"],
            "targetLabel": "__address__",
            "replacement": "$1:9557",
        },
        {"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node"},
    ]
    assert render({**CASES["monitoring"], "agent.metrics.port": 0}).all("PodMonitor") == []


def test_alerts_use_metrics_the_operator_exports() -> None:
    """Every `eventedpleg_*{label="value"}` selector in the alert rules matches a series the operator's or
    the agent's registry really exposes (names and label values taken from controller/metrics.py and
    agent/metrics.py, not retyped)."""
    metrics = OperatorMetrics()
    for kind in c.ConditionType:
        metrics.condition.labels("cluster", kind.value).set(0)
    metrics.failures.labels("cluster").inc()
    metrics.failed_cordoned.labels("cluster").set(1)
    metrics.held_seconds.labels("cluster").set(7200)
    metrics.leader.set(1)
    agent = AgentMetrics()  # every failure reason is exported from the start
    exported = parse_metrics(
        generate_latest(metrics.registry).decode() + generate_latest(agent.registry).decode()
    )
    rule = render(CASES["monitoring"]).find("PrometheusRule", OPERATOR)
    alerts = {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"]}
    assert {
        "EventedPlegRolloutDegraded", "EventedPlegNodeFailures", "EventedPlegNoLeader",
        "EventedPlegOperatorAbsent", "EventedPlegNodeFailedAndCordoned", "EventedPlegRolloutStalled",
        "EventedPlegNodeHeldTooLong", "EventedPlegAgentFailures", "EventedPlegNodeWedged",
        "EventedPlegGuardRolledBack",
    } <= set(alerts)  # fmt: skip
    selector = re.compile(r"(eventedpleg_[a-z_]+)(?:\{([^}]*)\})?")
    for name, alert in alerts.items():
        found = selector.findall(alert["expr"])
        assert found, name
        for metric, matchers in found:
            labels = dict(re.findall(r'(\w+)="([^"]*)"', matchers))
            labels.pop("namespace", None)  # added by Prometheus' Kubernetes discovery, not the operator
            assert exported.find(metric, **labels), f"{name}: no series {metric}{labels}"
        assert alert["labels"]["severity"] in {"info", "warning", "critical"}
        assert alert["annotations"]["summary"]


def test_alerts_cover_no_operator_and_failed_cordoned_nodes() -> None:
    """absent() fires when no replica exports at all (the no-leader alert needs a series to compare);
    a node left Failed and cordoned alerts after the configured time."""
    rule = render({**CASES["monitoring"], "prometheusRule.failedCordonedFor": "30m"}).find(
        "PrometheusRule", OPERATOR
    )
    alerts = {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"]}
    absent = alerts["EventedPlegOperatorAbsent"]
    assert absent["expr"] == f'absent(eventedpleg_leader{{namespace="{NAMESPACE}"}})'
    assert absent["for"] == "10m"
    stuck = alerts["EventedPlegNodeFailedAndCordoned"]
    assert stuck["expr"] == "max by (nodeconfig) (eventedpleg_failed_cordoned_nodes) > 0"
    assert stuck["for"] == "30m"
    assert "{{ $labels.nodeconfig }}" in stuck["annotations"]["summary"]


def test_every_alert_has_a_runbook_section() -> None:
    """Each alert's runbook_url is the configured base plus the anchor of its own section of
    docs/runbooks.md, and that section says what it means, how to confirm it and what to do."""
    base = "https://runbooks.example/runbooks.md"
    rule = render({**CASES["monitoring"], "prometheusRule.runbookBaseUrl": base}).find(
        "PrometheusRule", OPERATOR
    )
    alerts = [r for g in rule["spec"]["groups"] for r in g["rules"]]
    runbooks = (REPO / "docs" / "runbooks.md").read_text()
    sections = dict(re.findall(r"^## (\w+)\n(.*?)(?=^## |\Z)", runbooks, flags=re.M | re.S))
    assert set(sections) == {alert["alert"] for alert in alerts}
    for alert in alerts:
        assert alert["annotations"]["runbook_url"] == f"{base}#{alert['alert'].lower()}"
        body = sections[alert["alert"]]
        assert all(part in body for part in ("**Means.**", "**Confirm.**", "**Do.**")), alert["alert"]


@pytest.mark.parametrize("app_version", ["tree", "2.3.4-rc.1"])
def test_runbooks_default_to_the_installed_versions_tag(tmp_path: Path, app_version: str) -> None:
    """Without runbookBaseUrl every runbook_url is docs/runbooks.md at the tag of the chart's appVersion:
    the runbooks of the alerts that fire, not of whatever main says later. The tree's chart, and a package
    of it with another appVersion (as hack/release.sh packages it)."""
    chart = CHART
    version = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
    if app_version != "tree":
        done = helm("package", str(CHART), "--app-version", app_version, "-d", str(tmp_path))
        assert done.returncode == 0, done.stderr
        (chart,) = tmp_path.glob("*.tgz")
        version = app_version
    rule = render(CASES["monitoring"], chart=chart).find("PrometheusRule", OPERATOR)
    alerts = [r for g in rule["spec"]["groups"] for r in g["rules"]]
    assert alerts
    base = f"https://github.com/eventedpleg/evented-pleg-operator/blob/v{version}/docs/runbooks.md"
    for alert in alerts:
        assert alert["annotations"]["runbook_url"] == f"{base}#{alert['alert'].lower()}"


def test_stalled_and_held_node_alerts_follow_their_values() -> None:
    values = {
        **CASES["monitoring"],
        "prometheusRule.stalledFor": "45m",
        "prometheusRule.heldNodeSeconds": 5400,
    }
    rule = render(values).find("PrometheusRule", OPERATOR)
    alerts = {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"]}
    stalled = alerts["EventedPlegRolloutStalled"]
    assert stalled["expr"] == 'max by (nodeconfig) (eventedpleg_condition{type="Stalled"}) == 1'
    assert stalled["for"] == "45m"
    held = alerts["EventedPlegNodeHeldTooLong"]
    assert held["expr"] == "max by (nodeconfig) (eventedpleg_held_node_seconds) > 5400"


def test_grafana_dashboard_only_when_enabled(default: Rendered) -> None:
    assert not [d for d in default.all("ConfigMap") if d["metadata"]["name"].endswith("-dashboard")]
    rendered = render(CASES["monitoring"])
    dashboard = rendered.find("ConfigMap", f"{OPERATOR}-dashboard")
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert dashboard["metadata"]["annotations"] == {"grafana_folder": "Kubernetes"}
    shipped = json.loads((CHART / "files" / "grafana-dashboard.json").read_text())
    assert json.loads(dashboard["data"]["evented-pleg-operator.json"]) == shipped


def test_log_format_reaches_both_commands() -> None:
    rendered = render(CASES["monitoring"])
    operator = rendered.find("Deployment", OPERATOR)["spec"]["template"]["spec"]["containers"][0]
    agent = rendered.find("DaemonSet", AGENT)["spec"]["template"]["spec"]["containers"][0]
    assert "--log-format=json" in operator["args"]
    assert "--log-format=json" in agent["args"]


# --- helpers ---------------------------------------------------------------------------------------------


def _parse_cli(container: Doc, env: dict[str, str]) -> dict[str, Any]:
    """Parse command + args with the real click command, $(VAR) expanded as the kubelet does."""
    argv = [
        re.sub(r"\$\((\w+)\)", lambda m: env[m.group(1)], a) for a in container["command"] + container["args"]
    ]
    assert argv[0] == "eventedpleg"
    group_ctx = cli_main.make_context("eventedpleg", argv[1:2])
    command = cli_main.get_command(group_ctx, argv[1])
    assert isinstance(command, click.Command), argv[1]
    # auto_envvar/envvar defaults must not leak in from the test's environment.
    saved = {k: os.environ.pop(k) for k in list(os.environ) if k in {"KUBECONFIG", "NODE_NAME", "POD_NAME",
             "EVENTEDPLEG_NAMESPACE", "EVENTEDPLEG_HOST_ROOT", "EVENTEDPLEG_METRICS_PORT",
             "EVENTEDPLEG_HEALTH_PORT", "EVENTEDPLEG_ALLOW_FORCE_DELETE",
             "EVENTEDPLEG_LOG_FORMAT"}}  # fmt: skip
    try:
        ctx = command.make_context(argv[1], argv[2:], parent=group_ctx)
    finally:
        os.environ.update(saved)
    return dict(ctx.params)


def test_parse_refuses_duplicate_keys() -> None:
    with pytest.raises(Exception, match="duplicate key 'a'"):
        parse("a: 1\nb: 2\na: 3\n")
