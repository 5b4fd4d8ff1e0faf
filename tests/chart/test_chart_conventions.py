"""What users of well-kept charts expect, rendered by the real helm: the recommended labels with
the app version, a CRD switch (crds.enabled / crds.keep) whose CRD is the generated one, a `helm test`
that meets Pod Security "restricted", a guard against a second release, and NOTES.txt that agrees with
the README. A second install refused for real, and `helm test` run for real:
tests/cluster/test_chart_install.py and tests/lab/test_lab_chart.py."""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml

from eventedpleg import __version__, protocol
from eventedpleg import constants as c
from eventedpleg.crdgen import build_crd
from tests.chart.chartlib import CHART, REPO, Doc, Rendered, pod_specs, render, template

OPERATOR = "evented-pleg-operator"


def crd(rendered: Rendered) -> Doc | None:
    found = rendered.all("CustomResourceDefinition", c.CRD_NAME)
    return found[0] if found else None


@pytest.fixture(scope="module")
def default() -> Rendered:
    return render()


def test_every_object_carries_the_recommended_labels(default: Rendered) -> None:
    for doc in default.docs:
        labels = doc["metadata"]["labels"]
        assert labels["app.kubernetes.io/version"] == __version__, doc["kind"]
        assert labels["app.kubernetes.io/managed-by"] == "Helm"
        assert labels["app.kubernetes.io/instance"] == "epo"
        assert labels["helm.sh/chart"] == f"{OPERATOR}-{__version__}"


def test_the_chart_installs_the_generated_crd_and_keeps_it(default: Rendered) -> None:
    rendered = crd(default)
    assert rendered is not None
    generated = build_crd()
    assert rendered["spec"] == generated["spec"]  # exactly what the models generate, nothing lost in helm
    assert rendered["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
    assert rendered["metadata"]["labels"]["app.kubernetes.io/part-of"] == OPERATOR
    # The file the chart reads is the generated one (crdgen --check keeps it so).
    chart_copy = yaml.safe_load((CHART / "files" / "crds" / "nodeconfig.yaml").read_text())
    assert chart_copy == yaml.safe_load((REPO / "crds" / "nodeconfig.yaml").read_text())


def test_crds_keep_false_lets_uninstall_delete_it() -> None:
    rendered = crd(render({"crds": {"enabled": True, "keep": False}}))
    assert rendered is not None and "annotations" not in rendered["metadata"]


def test_crds_disabled_renders_no_crd_and_notes_say_nothing_of_it() -> None:
    assert crd(render({"crds": {"enabled": False, "keep": True}})) is None


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"crds": {"enabled": "yes", "keep": True}}, "want boolean"),
        ({"crds": {"enabled": True, "keep": True, "install": True}}, "additional properties 'install'"),
    ],
)
def test_the_schema_stays_strict_for_crds(values: dict[str, Any], message: str) -> None:
    done = template(values)
    assert done.returncode != 0 and message in done.stderr, done.stderr


# --- helm test ------------------------------------------------------------------------------------------


def test_helm_test_objects_are_test_hooks_removed_after_success(default: Rendered) -> None:
    hooks = [d for d in default.docs if d["metadata"].get("annotations", {}).get("helm.sh/hook") == "test"]
    kinds = ["Pod", "Role", "Role", "RoleBinding", "RoleBinding", "ServiceAccount"]
    assert sorted(d["kind"] for d in hooks) == kinds
    for hook in hooks:
        policy = hook["metadata"]["annotations"]["helm.sh/hook-delete-policy"]
        assert policy == "before-hook-creation,hook-succeeded"


def _test_pod(default: Rendered) -> Doc:
    return default.find("Pod", f"{OPERATOR}-test")


def test_helm_test_pod_meets_restricted_and_runs_the_operator_image(default: Rendered) -> None:
    pod = _test_pod(default)
    deployment = default.find("Deployment", OPERATOR)
    spec = pod["spec"]
    container = spec["containers"][0]
    assert container["image"] == deployment["spec"]["template"]["spec"]["containers"][0]["image"]
    assert spec["restartPolicy"] == "Never"
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    ctx = container["securityContext"]
    assert ctx["allowPrivilegeEscalation"] is False and ctx["capabilities"] == {"drop": ["ALL"]}
    assert ctx["readOnlyRootFilesystem"] is True
    # The hook runs before the pod (weight -1), and the Role may only list EndpointSlices.
    role = default.find("Role", f"{OPERATOR}-test")
    assert role["rules"] == [
        {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list"]}
    ]
    assert role["metadata"]["annotations"]["helm.sh/hook-weight"] == "-1"


def test_helm_test_script_checks_the_crd_and_each_replicas_health(default: Rendered) -> None:
    container = _test_pod(default)["spec"]["containers"][0]
    assert container["command"] == ["python3", "-c"]
    (script,) = container["args"]
    compile(script, "helm-test", "exec")  # valid Python as rendered
    assert f"/apis/{protocol.GROUP}/{c.VERSION}" in script and f'"{c.PLURAL}" not in served' in script
    assert f'service = "{OPERATOR}-metrics"' in script
    assert '"kubernetes.io/service-name=" + service' in script
    port = default.find("Service", f"{OPERATOR}-metrics")["spec"]["ports"][0]["port"]
    assert f":{port}/healthz" in script


def test_helm_test_script_checks_that_every_agent_is_ready(default: Rendered) -> None:
    """The DaemonSet's desired pods are all Ready, and it runs somewhere; the test may get that one
    DaemonSet in the agent's namespace and nothing else there."""
    (script,) = _test_pod(default)["spec"]["containers"][0]["args"]
    assert 'agents = "evented-pleg-agent/evented-pleg-agent"' in script
    assert '"/apis/apps/v1/namespaces/%s/daemonsets/%s"' in script
    assert "if ready != desired:" in script and "if desired == 0:" in script
    role = default.find("Role", f"{OPERATOR}-test-agents")
    assert role["metadata"]["namespace"] == "evented-pleg-agent"
    assert role["rules"] == [
        {
            "apiGroups": ["apps"],
            "resources": ["daemonsets"],
            "resourceNames": ["evented-pleg-agent"],
            "verbs": ["get"],
        }
    ]
    binding = default.find("RoleBinding", f"{OPERATOR}-test-agents")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": f"{OPERATOR}-test", "namespace": "evented-pleg-system"}
    ]
    # The agents' namespace may be the release's (createNamespace: false): the names still differ.
    same = render({"agent.namespace": "evented-pleg-system", "agent.createNamespace": False})
    assert len(same.all("Role")) == len(
        {(r["metadata"]["namespace"], r["metadata"]["name"]) for r in same.all("Role")}
    )


def test_the_test_pod_follows_the_operators_scheduling() -> None:
    values = {"operator.nodeSelector": {"pool": "infra"}, "operator.tolerations": [{"operator": "Exists"}]}
    pod = render(values).find("Pod", f"{OPERATOR}-test")["spec"]
    assert pod["nodeSelector"] == {"pool": "infra"} and pod["tolerations"] == [{"operator": "Exists"}]


def test_only_the_agent_is_privileged_test_pod_included(default: Rendered) -> None:
    privileged = [
        doc["metadata"]["name"]
        for doc, spec in pod_specs(default.docs)
        if any(k.get("securityContext", {}).get("privileged") for k in spec["containers"])
    ]
    assert privileged == ["evented-pleg-agent"]


# --- one release per cluster ----------------------------------------------------------------------------


def test_the_guard_looks_for_every_agent_of_the_chart() -> None:
    """`helm template` cannot look up (it renders as usual); the refusal itself is tested on a real API
    server. Here: the guard matches this chart's agents by the labels the DaemonSet really carries."""
    guard = (CHART / "templates" / "one-per-cluster.yaml").read_text()
    assert 'lookup "apps/v1" "DaemonSet" "" ""' in guard
    agent = render().find("DaemonSet", "evented-pleg-agent")["metadata"]["labels"]
    for key, value in re.findall(r'get \$labels "([^"]+)"\) "([^"]+)"', guard):
        assert agent[key] == value


# --- NOTES.txt and the README ---------------------------------------------------------------------------

COMMAND = re.compile(r"^\s+((?:kubectl|helm|eventedpleg) .+)$", re.MULTILINE)


def notes_commands() -> list[str]:
    return COMMAND.findall((CHART / "templates" / "NOTES.txt").read_text())


def test_every_command_in_notes_is_in_the_readme() -> None:
    """With the README's names (release evented-pleg in evented-pleg-system, the default values), each
    command NOTES.txt prints is one the README shows, character for character."""
    readme = (REPO / "README.md").read_text()
    names = {
        ".Release.Name": "evented-pleg",
        ".Release.Namespace": "evented-pleg-system",
        ".Values.agent.namespace": "evented-pleg-agent",
        'include "epo.agentName" .': "evented-pleg-agent",
    }
    commands = notes_commands()
    assert len(commands) >= 10
    for command in commands:
        concrete = re.sub(r"\{\{\s*(.+?)\s*\}\}", lambda m: names[m.group(1)], command)
        assert concrete in readme, f"NOTES.txt prints `{concrete}`, the README does not"


def test_notes_and_readme_wait_for_the_same_condition() -> None:
    readme = (REPO / "README.md").read_text()
    notes = (CHART / "templates" / "NOTES.txt").read_text()
    pattern = r"kubectl wait --for=condition=(\w+) nodeconfig/"
    assert set(re.findall(pattern, notes)) == set(re.findall(pattern, readme)) == {"Ready"}
    # the state label mirrors the state annotation: both show it where operators look
    assert "kubectl get nodes -L eventedpleg.io/state" in readme
    assert "kubectl get nodes -L eventedpleg.io/state" in notes
