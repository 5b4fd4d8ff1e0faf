"""The Helm chart installed by the real helm onto the real control plane (RBAC and Pod Security admission
on, kwok nodes): every object admitted, the operator admitted under "restricted", the agent only in its
privileged namespace, each ServiceAccount able to do what it needs and no more, the agent pod's own token
confined to its node, clean uninstall.

kwok runs no containers, so the pods never execute the image; they are scheduled and marked Running,
which is what admission, scheduling and the token binding need.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from eventedpleg import constants as c
from eventedpleg.protocol import (
    ANN_AGENT_OPTIONS,
    ANN_APPROVED,
    ANN_CORDONED_BY_US,
    ANN_CURRENT,
    ANN_DESIRED,
    ANN_EVIDENCE,
    ANN_OWNER,
    ANN_REASON,
    ANN_STATE,
    ANN_TAINT,
    ANN_WAS_UNSCHEDULABLE,
    GROUP,
    LABEL_STATE,
    WRITERS,
    Writer,
)
from eventedpleg_lab.kube.fakenodes import KWOK_TOLERATION, FakeNode
from eventedpleg_lab.localcluster.cluster import LocalCluster
from tests.chart.chartlib import CHART, REPO, helm, set_json_args
from tests.cluster.chartrelease import Release, install
from tests.cluster.rollout_harness import wait_for

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def release(cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Release]:
    suffix = uuid.uuid4().hex[:5]
    restricted = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": f"chart-{suffix}",
            "labels": {f"pod-security.kubernetes.io/{m}": "restricted" for m in ("enforce", "warn")},
        },
    }
    cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(restricted), check=True)
    nodes = cluster.add_nodes([FakeNode(f"chart-{suffix}-{x}", labels={"chart-test": suffix}) for x in "ab"])
    values = {
        # kwok nodes are tainted; the operator's two replicas go to this test's two nodes.
        "operator.tolerations": [KWOK_TOLERATION],
        "operator.nodeSelector": {"chart-test": suffix},
        # Two nodes the replicas spread over: where the chart's (off by default) budget is worth having.
        "operator.podDisruptionBudget.enabled": True,
    }
    home = tmp_path_factory.mktemp("helm-home")
    with install(cluster, home, tag="chart", suffix=suffix, nodes=nodes, values=values) as rel:
        yield rel


def test_install_prints_what_to_do_next(release: Release) -> None:
    out = release.install_output
    assert "STATUS: deployed" in out
    notes = out.split("NOTES:", 1)[1]
    assert f"DaemonSet  {release.agent_ns}/{release.agent}" in notes
    assert f"Deployment {release.namespace}/{release.operator}" in notes
    for step in (
        "kubectl apply -f nodeconfig.yaml",
        "kubectl get nodeconfig cluster",
        f"kubectl get nodes -L {LABEL_STATE}",
        "kubectl wait --for=condition=Ready nodeconfig/cluster",
        f"helm test {release.name} -n {release.namespace}",
        "eventedpleg status",
    ):
        assert step in notes
    assert (REPO / "examples" / "nodeconfig.yaml").exists()


def test_every_object_is_admitted(release: Release) -> None:
    manifest = release.manifest()
    assert len(manifest) >= 20
    for doc in manifest:
        meta = doc["metadata"]
        ns = ["-n", meta["namespace"]] if "namespace" in meta else []
        kind = (
            f"{doc['kind'].lower()}.{doc['apiVersion'].split('/')[0]}"
            if "/" in doc["apiVersion"]
            else doc["kind"]
        )
        got = release.get(kind, meta["name"], *ns)
        assert got["metadata"]["labels"]["app.kubernetes.io/instance"] == release.name
        assert got["metadata"]["annotations"]["meta.helm.sh/release-name"] == release.name
    # The CRD (applied before the chart, crds.enabled=false): served and established.
    release.cluster.wait_established(c.CRD_NAME)


def test_a_second_release_is_refused_with_the_reason(release: Release) -> None:
    """Other name, other namespace, other cluster-wide names (nameOverride): still refused, because its
    operator and agents would fight the first release's over the same nodes. Nothing is created."""
    other = f"{release.prefix}-2"
    done = helm(
        "install", other, str(CHART), "-n", other, "--create-namespace",
        f"--kubeconfig={release.cluster.kubeconfig}",
        *set_json_args({"nameOverride": other, "agent.namespace": f"{other}-agent",
                        "crds": {"enabled": False, "keep": True}}),
        env=release.env,
    )  # fmt: skip
    assert done.returncode != 0
    assert "evented-pleg-operator is already installed in this cluster" in done.stderr
    assert f'release "{release.name}" in namespace "{release.namespace}"' in done.stderr
    made = release.cluster.kubectl("get", "daemonset", "-n", f"{other}-agent", f"{other}-agent")
    assert made.returncode != 0, made.stdout
    release.cluster.kubectl("delete", "namespace", other, "--ignore-not-found", "--wait=false")
    # An upgrade of the first release is not a second release.
    release.helm("upgrade", release.name, str(CHART), "-n", release.namespace, "--reuse-values")


def test_agent_namespace_is_privileged_and_the_release_namespace_is_not_touched(release: Release) -> None:
    agent_ns = release.get("namespace", release.agent_ns)["metadata"]["labels"]
    assert agent_ns["pod-security.kubernetes.io/enforce"] == "privileged"
    assert agent_ns["app.kubernetes.io/instance"] == release.name
    ours = release.get("namespace", release.namespace)["metadata"]["labels"]
    assert ours["pod-security.kubernetes.io/enforce"] == "restricted"  # as the test made it


def test_operator_runs_under_restricted_on_two_nodes(release: Release) -> None:
    rolled = release.cluster.kubectl(
        "rollout", "status", "-n", release.namespace, f"deployment/{release.operator}", "--timeout=90s"
    )
    assert rolled.returncode == 0, rolled.stderr
    pods = release.pods(release.namespace, "operator")
    assert len(pods) == 2
    assert {p["spec"]["nodeName"] for p in pods} == set(release.nodes)  # spread by the anti-affinity
    for pod in pods:
        env = {e["name"]: e for e in pod["spec"]["containers"][0]["env"]}
        assert env["EVENTEDPLEG_NAMESPACE"]["value"] == release.namespace
        assert pod["spec"]["serviceAccountName"] == release.operator
    pdb = wait_for(
        lambda: (
            (s := release.get("pdb", "-n", release.namespace, release.operator).get("status", {})).get(
                "currentHealthy"
            )
            == 2
            and s
        ),
        what="the operator PDB's status",
    )
    assert pdb["disruptionsAllowed"] == 1  # a drain may take one replica at a time, never both


def test_agent_runs_on_every_node(release: Release) -> None:
    def on_our_nodes() -> list[dict[str, Any]] | None:
        pods = [
            p for p in release.pods(release.agent_ns, "agent") if p["spec"].get("nodeName") in release.nodes
        ]
        running = [p for p in pods if p.get("status", {}).get("phase") == "Running"]
        return running if len(running) == len(release.nodes) else None

    pods = wait_for(on_our_nodes, what="an agent pod Running on each test node")
    for pod in pods:
        spec = pod["spec"]
        assert spec["hostPID"] and spec["hostNetwork"]
        assert spec["containers"][0]["securityContext"]["privileged"] is True
        assert spec["priorityClassName"] == "system-node-critical" and spec["priority"] > 2_000_000_000
        assert spec["containers"][0]["args"][:2] == ["--node=$(NODE_NAME)", "--host-root=/host"]
    ds = release.get("daemonset", "-n", release.agent_ns, release.agent)
    linux = release.get("nodes", "-l", "kubernetes.io/os=linux")["items"]
    assert ds["status"]["desiredNumberScheduled"] == len(linux)  # tolerates every taint


def test_pod_security_admits_the_agent_only_in_its_namespace(release: Release) -> None:
    """The agent's pod, as the DaemonSet makes it, is refused in the (restricted) release namespace: the
    privileged label on the agent's namespace is what admits it, and admission is really on."""
    template = release.get("daemonset", "-n", release.agent_ns, release.agent)["spec"]["template"]
    for ns, allowed in ((release.namespace, False), (release.agent_ns, True)):
        # ServiceAccount admission runs first: outside its namespace the agent's SA does not exist.
        spec = {**template["spec"], "serviceAccountName": release.agent if allowed else "default"}
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "agent-probe", "namespace": ns},
            "spec": spec,
        }
        done = release.cluster.kubectl("create", "--dry-run=server", "-f", "-", stdin=json.dumps(pod))
        if allowed:
            assert done.returncode == 0, done.stderr
        else:
            assert done.returncode != 0
            assert 'violates PodSecurity "restricted:latest"' in done.stderr
            for reason in ("privileged", "host namespaces", '"hostPath"', "runAsUser=0"):
                assert reason in done.stderr, done.stderr


def test_agent_pod_token_is_confined_to_its_node(release: Release) -> None:
    """The token the DaemonSet's pod gets is bound to it, so the chart's admission policy lets that pod's
    agent change its own Node's eventedpleg.io/* annotations and nothing else."""
    node_a, node_b = release.nodes
    (pod,) = [p for p in release.pods(release.agent_ns, "agent") if p["spec"]["nodeName"] == node_a]
    kubeconfig = release.cluster.service_account_kubeconfig(
        release.agent_ns, release.agent, bound_pod=pod["metadata"]["name"], create=False
    )
    who = json.loads(release.kubectl("auth", "whoami", "-o", "json", kubeconfig=kubeconfig))["status"]
    assert who["userInfo"]["extra"]["authentication.kubernetes.io/node-name"] == [node_a]
    mine = f"{GROUP}/chart-test"
    release.kubectl("annotate", "node", node_a, f"{mine}=1", "--overwrite", kubeconfig=kubeconfig)
    assert release.get("node", node_a)["metadata"]["annotations"][mine] == "1"
    for node, annotation, because in (
        (node_b, f"{mine}=1", "may only change its own Node"),
        (node_a, "example.com/other=1", "may only change eventedpleg.io/* annotations"),
    ):
        done = release.cluster.kubectl("annotate", "node", node, annotation, kubeconfig=kubeconfig)
        assert done.returncode != 0 and because in done.stderr, done.stderr


def test_agent_may_not_write_the_operator_owned_keys(release: Release) -> None:
    """One writer per key: with its own pod-bound token on its own Node, the agent writes the keys it owns
    and is denied adding, changing or removing desired-config, agent-options and the other operator keys
    (node-keys-vap.yaml)."""
    node_a = release.nodes[0]
    (pod,) = [p for p in release.pods(release.agent_ns, "agent") if p["spec"]["nodeName"] == node_a]
    kubeconfig = release.cluster.service_account_kubeconfig(
        release.agent_ns, release.agent, bound_pod=pod["metadata"]["name"], create=False
    )
    own = {ANN_STATE: "Verifying", ANN_REASON: "restarting", ANN_CURRENT: "abc", ANN_EVIDENCE: "{}"}
    release.kubectl("annotate", "node", node_a, "--overwrite", *(f"{k}={v}" for k, v in own.items()),
                    kubeconfig=kubeconfig)  # fmt: skip
    annotations = release.get("node", node_a)["metadata"]["annotations"]
    assert {k: annotations[k] for k in own} == own
    # As the operator sets them, with its own token (nobody else may).
    op = release.cluster.service_account_kubeconfig(release.namespace, release.operator, create=False)
    release.kubectl(
        "annotate", "node", node_a, "--overwrite", f"{ANN_DESIRED}=h1", f"{ANN_OWNER}=cluster",
        kubeconfig=op,
    )  # fmt: skip
    for change in (
        f"{ANN_DESIRED}=h2", f"{ANN_DESIRED}-", f"{ANN_AGENT_OPTIONS}={{}}", f"{ANN_OWNER}=other",
        f"{ANN_CORDONED_BY_US}=true", f"{ANN_WAS_UNSCHEDULABLE}=true",
    ):  # fmt: skip
        key = change.split("=")[0].rstrip("-")
        done = release.cluster.kubectl(
            "annotate", "node", node_a, "--overwrite", change, kubeconfig=kubeconfig
        )
        assert done.returncode != 0, change
        assert (
            f"only the eventedpleg operator may set, change or remove {key} on Node {node_a}" in done.stderr
        )
    annotations = release.get("node", node_a)["metadata"]["annotations"]
    assert annotations[ANN_DESIRED] == "h1" and annotations[ANN_OWNER] == "cluster"
    assert ANN_AGENT_OPTIONS not in annotations


def test_operator_may_change_only_cordon_and_its_annotations(release: Release, taint_nodeconfig: str) -> None:
    """With the operator's own ServiceAccount token: cordon, uncordon, eventedpleg.io/* and the autoscaler
    annotations are admitted; a label, a taint or another annotation is denied by the chart's policy."""
    node = release.nodes[1]
    kubeconfig = release.cluster.service_account_kubeconfig(release.namespace, release.operator, create=False)
    # drain.taintBeforeCordon: its own taint, named in eventedpleg.io/taint in the write that adds it
    # (before the cordon, whose node.kubernetes.io/unschedulable taint the node controller adds)
    ours = {"key": MINE, "value": "x", "effect": "PreferNoSchedule"}
    _taint_write(release, node, kubeconfig, add=ours, mark=MINE, owner=taint_nodeconfig)
    assert ours in release.get("node", node)["spec"]["taints"]
    denied = release.cluster.kubectl("taint", "node", node, f"{MINE}:NoExecute", kubeconfig=kubeconfig)
    assert denied.returncode != 0 and "may add only its own taint" in denied.stderr, denied.stderr
    _taint_write(release, node, kubeconfig, remove=MINE, mark=None)
    assert ours not in release.get("node", node)["spec"].get("taints", [])
    release.kubectl("annotate", "node", node, f"{ANN_OWNER}-", kubeconfig=kubeconfig)
    release.kubectl("cordon", node, kubeconfig=kubeconfig)
    assert release.get("node", node)["spec"]["unschedulable"] is True
    allowed = (
        f"{ANN_STATE}=Cordoned", f"{ANN_DESIRED}=h1",
        "karpenter.sh/do-not-disrupt=true", "cluster-autoscaler.kubernetes.io/scale-down-disabled=true",
    )  # fmt: skip
    release.kubectl("annotate", "node", node, "--overwrite", *allowed, kubeconfig=kubeconfig)
    annotations = release.get("node", node)["metadata"]["annotations"]
    assert all(annotations[a.split("=")[0]] == a.split("=")[1] for a in allowed)
    release.kubectl("annotate", "node", node, "karpenter.sh/do-not-disrupt-", kubeconfig=kubeconfig)
    release.kubectl("uncordon", node, kubeconfig=kubeconfig)
    assert not release.get("node", node)["spec"].get("unschedulable", False)
    for args, because in (
        (("label", "node", node, "steer=here"), "labels may not change, but eventedpleg.io/state"),
        (("taint", "node", node, "steer=here:NoSchedule"), "may add only its own taint"),
        (("annotate", "node", node, "example.com/other=1"), "may change only eventedpleg.io/*"),
    ):
        done = release.cluster.kubectl(*args, kubeconfig=kubeconfig)
        assert done.returncode != 0 and because in done.stderr, (args, done.stderr)
    after = release.get("node", node)
    assert "steer" not in after["metadata"].get("labels", {})
    assert not any(t["key"] == "steer" for t in after["spec"].get("taints", []))


def _state_write(node: str, state: str | None, label: str | None) -> str:
    """A merge patch setting (None: removing) the state annotation and the state label, as node_patch
    builds one."""
    meta = {"annotations": {ANN_STATE: state}, "labels": {LABEL_STATE: label}}
    return json.dumps({"metadata": meta})


@pytest.mark.parametrize("writer", ["operator", "agent"])
def test_the_state_label_is_the_one_label_either_writer_may_change(release: Release, writer: str) -> None:
    """`kubectl get nodes -L eventedpleg.io/state`: the operator's and the agent's policies admit the state
    label written with the state annotation of the same value, and its removal with the annotation; a
    label of another value, without the annotation, or any other label is denied."""
    node = release.nodes[0]
    if writer == "operator":
        kubeconfig = release.cluster.service_account_kubeconfig(
            release.namespace, release.operator, create=False
        )
    else:
        (pod,) = [p for p in release.pods(release.agent_ns, "agent") if p["spec"]["nodeName"] == node]
        kubeconfig = release.cluster.service_account_kubeconfig(
            release.agent_ns, release.agent, bound_pod=pod["metadata"]["name"], create=False
        )

    def patch(body: str) -> tuple[int, str]:
        done = release.cluster.kubectl(
            "patch", "node", node, "--type=merge", "-p", body, kubeconfig=kubeconfig
        )
        return done.returncode, done.stderr

    code, err = patch(_state_write(node, "Verifying", "Verifying"))
    assert code == 0, err
    shown = release.kubectl("get", "node", node, "-L", LABEL_STATE, "--no-headers").split()
    assert shown[-1] == "Verifying", shown
    for body, because in (
        (_state_write(node, "Done", "Failed"), "may change only to the value of the annotation"),
        (json.dumps({"metadata": {"labels": {LABEL_STATE: "Done"}}}), "may change only to the value"),
        (
            json.dumps({"metadata": {"labels": {"steer": "here"}}}),
            "labels may not change, but eventedpleg.io/state",
        ),
        (json.dumps({"metadata": {"labels": {"chart-test": None}}}), "labels may not change"),
    ):
        code, err = patch(body)
        assert code != 0 and because in err, (body, err)
    labels = release.get("node", node)["metadata"]["labels"]
    assert labels[LABEL_STATE] == "Verifying" and "steer" not in labels and "chart-test" in labels
    code, err = patch(_state_write(node, None, None))
    assert code == 0, err
    after = release.get("node", node)["metadata"]
    assert LABEL_STATE not in after["labels"] and ANN_STATE not in after.get("annotations", {})


# --- the operator's taint (drain.taintBeforeCordon): operator-vap.yaml's three layers ------------------

MINE = "example.com/mine"  # the key of this module's NodeConfig
FOREIGN = "example.com/foreign"  # someone else's taint


@pytest.fixture(scope="module")
def taint_nodeconfig(release: Release) -> Iterator[str]:
    """A NodeConfig whose taint key is MINE: only the policy's param (no operator runs on kwok nodes)."""
    name = f"{release.prefix}-taint"
    body = {
        "apiVersion": f"{GROUP}/{c.VERSION}",
        "kind": "NodeConfig",
        "metadata": {"name": name},
        "spec": {
            "eventedPleg": True,
            "nodeSelector": {"matchLabels": {"chart-test": "no-node"}},
            "drain": {"taintBeforeCordon": {"key": MINE}},
        },
    }
    release.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(body))
    try:
        yield name
    finally:
        release.kubectl("delete", "nodeconfig", name, "--ignore-not-found", "--wait=false")


def _taint_patch(
    release: Release,
    node: str,
    *,
    add: dict[str, str] | None = None,
    remove: str | None = None,
    mark: str | None = "",
    owner: str | None = None,
) -> str:
    """One merge patch as the operator writes it: the node's taints with `add` added / `remove` removed,
    eventedpleg.io/taint set to `mark` (None removes it, "" leaves it) and eventedpleg.io/owner."""
    current = release.get("node", node)
    taints = [t for t in current["spec"].get("taints", []) if t["key"] != remove]
    annotations: dict[str, str | None] = {}
    if mark != "":
        annotations[ANN_TAINT] = mark
    if owner is not None:
        annotations[ANN_OWNER] = owner
    # Conditional on what was read, as the operator's writes are: a taint added meanwhile is never lost.
    metadata = {"annotations": annotations, "resourceVersion": current["metadata"]["resourceVersion"]}
    return json.dumps({"metadata": metadata, "spec": {"taints": taints + ([add] if add else [])}})


def _taint_write(release: Release, node: str, kubeconfig: Path, **change: Any) -> None:
    for _ in range(5):
        patch = _taint_patch(release, node, **change)
        done = release.cluster.kubectl(
            "patch", "node", node, "--type=merge", "-p", patch, kubeconfig=kubeconfig
        )
        if done.returncode == 0 or "the object has been modified" not in done.stderr:
            break
    assert done.returncode == 0, done.stderr


def _taint_denied(release: Release, node: str, kubeconfig: Path, **change: Any) -> str:
    patch = _taint_patch(release, node, **change)
    done = release.cluster.kubectl("patch", "node", node, "--type=merge", "-p", patch, kubeconfig=kubeconfig)
    assert done.returncode != 0, f"admitted: {patch}"
    return done.stderr


def test_operator_taints_only_with_the_key_of_the_nodeconfig_holding_the_node(
    release: Release, taint_nodeconfig: str
) -> None:
    """With the operator's token: it adds and removes its NodeConfig's key, in one write with the mark;
    it cannot take off a foreign taint by naming it first, nor add another key, a reserved one or
    NoExecute, nor change the NodeConfig's key."""
    node = release.nodes[0]
    op = release.cluster.service_account_kubeconfig(release.namespace, release.operator, create=False)
    foreign = {"key": FOREIGN, "value": "db", "effect": "PreferNoSchedule"}
    release.kubectl("taint", "node", node, f"{FOREIGN}=db:PreferNoSchedule")  # someone else's
    try:
        # The NodeConfig's key: on, then off, each in one write with eventedpleg.io/taint.
        mine = {"key": MINE, "effect": "NoSchedule"}
        _taint_write(release, node, op, add=mine, mark=MINE, owner=taint_nodeconfig)
        assert mine in release.get("node", node)["spec"]["taints"]
        stderr = _taint_denied(release, node, op, remove=MINE, mark="")
        assert "may remove only the taint it added" in stderr, stderr  # the mark goes with the taint
        _taint_write(release, node, op, remove=MINE, mark=None)
        assert mine not in release.get("node", node)["spec"].get("taints", [])
        # The two-write hole: naming the foreign taint is refused, so its removal is too.
        stderr = _taint_denied(release, node, op, mark=FOREIGN)
        assert "eventedpleg.io/taint may name only a taint the operator adds in the same write" in stderr
        stderr = _taint_denied(release, node, op, remove=FOREIGN, mark=None)
        assert "may remove only the taint it added" in stderr, stderr
        stderr = _taint_denied(release, node, op, remove=FOREIGN, mark=FOREIGN)
        assert "may remove only the taint it added" in stderr, stderr
        # Another key than the NodeConfig's: refused by the NodeConfig param, naming the key it allows.
        stderr = _taint_denied(
            release, node, op, add={"key": "example.com/other", "effect": "NoSchedule"},
            mark="example.com/other", owner=taint_nodeconfig,
        )  # fmt: skip
        assert f"may add only the taint key of NodeConfig {taint_nodeconfig}" in stderr, stderr
        assert f"spec.drain.taintBeforeCordon.key: {MINE}" in stderr, stderr
        # A reserved key, even with an owner naming no NodeConfig (which escapes the param's layer).
        reserved = {"key": "node.kubernetes.io/out-of-service", "effect": "NoSchedule"}
        stderr = _taint_denied(release, node, op, add=reserved, mark=reserved["key"], owner="no-such-config")
        assert "may not add or remove a reserved taint key" in stderr, stderr
        # NoExecute with the right key, and the key of a taint already on the node.
        stderr = _taint_denied(
            release, node, op, add={"key": MINE, "effect": "NoExecute"}, mark=MINE, owner=taint_nodeconfig
        )
        assert "may add only its own taint" in stderr, stderr
        # The NodeConfig's key comes from people: the operator may annotate it, not change its spec.
        key = {"spec": {"drain": {"taintBeforeCordon": {"key": FOREIGN}}}}
        done = release.cluster.kubectl(
            "patch", "nodeconfig", taint_nodeconfig, "--type=merge", "-p", json.dumps(key), kubeconfig=op
        )
        assert done.returncode != 0 and "may not change a NodeConfig's spec" in done.stderr, done.stderr
        release.kubectl("annotate", "nodeconfig", taint_nodeconfig, "kopf.zalando.org/x=1", kubeconfig=op)
        after = release.get("node", node)["spec"]["taints"]
        assert foreign in after and not any(t["key"] in (MINE, reserved["key"]) for t in after)
        assert (
            release.get("nodeconfig", taint_nodeconfig)["spec"]["drain"]["taintBeforeCordon"]["key"] == MINE
        )
    finally:
        release.kubectl("taint", "node", node, f"{FOREIGN}-")
        release.kubectl("annotate", "node", node, f"{ANN_TAINT}-", f"{ANN_OWNER}-", kubeconfig=op)


# --- no node steers the operator: node-keys-vap.yaml, operator-vap.yaml, approval on the NodeConfig ---------

RESERVED = "karpenter.sh/disrupted"  # a reserved taint key (Karpenter's own disruption taint)
OPERATOR_KEYS = sorted(k for k, w in WRITERS.items() if w is Writer.OPERATOR and k.startswith(f"{GROUP}/"))


def _refused_for_keys(release: Release, node: str, kubeconfig: Path | None, user: str, *changes: str) -> None:
    """Each annotate (k=v or k-) is refused with the one-line message naming its key and the user (the
    admin's kubeconfig when None)."""
    for change in changes:
        key = change.split("=")[0].rstrip("-")
        done = release.cluster.kubectl("annotate", "node", node, "--overwrite", change, kubeconfig=kubeconfig)
        assert done.returncode != 0, f"admitted for {user}: {change}"
        message = (
            f"only the eventedpleg operator may set, change or remove {key} on Node {node} ({user} may not)"
        )
        assert message in done.stderr, done.stderr


def test_a_node_credential_may_not_write_any_operator_owned_key(
    release: Release, taint_nodeconfig: str
) -> None:
    """Root on a node holds its kubelet credential (system:node:<name>), which NodeRestriction lets patch
    its own Node's annotations. The chart refuses it setting, changing or removing every key only the
    operator writes (those the operator acts on when it gives a node back); the operator's account writes
    each of them. The node still writes the agent's keys, and a person is refused like the node."""
    node = release.nodes[1]
    user = f"system:node:{node}"
    kubelet = release.cluster.node_kubeconfig(node)
    who = json.loads(release.kubectl("auth", "whoami", "-o", "json", kubeconfig=kubelet))["status"][
        "userInfo"
    ]
    assert who["username"] == user and "system:nodes" in who["groups"]
    op = release.cluster.service_account_kubeconfig(release.namespace, release.operator, create=False)
    assert len(OPERATOR_KEYS) == 12  # the list node-keys-vap.yaml holds (tests/chart checks the two agree)
    # The credential works on its own Node (NodeRestriction admits the agent's keys) ...
    release.kubectl(
        "annotate", "node", node, "--overwrite", f"{ANN_REASON}=from the node", kubeconfig=kubelet
    )
    assert release.get("node", node)["metadata"]["annotations"][ANN_REASON] == "from the node"
    # ... but not on another (NodeRestriction), and not the operator's keys (the chart's policy).
    other = release.cluster.kubectl(
        "annotate", "node", release.nodes[0], f"{ANN_REASON}=x", kubeconfig=kubelet
    )
    assert other.returncode != 0 and "forbidden" in other.stderr.lower(), other.stderr
    # The mark and the owner go with the operator's taint (operator-vap.yaml); the rest are plain values.
    rest = [k for k in OPERATOR_KEYS if k not in (ANN_TAINT, ANN_OWNER)]
    release.kubectl(
        "annotate", "node", node, *(f"{k}-" for k in OPERATOR_KEYS), kubeconfig=op
    )  # a clean start
    try:
        _refused_for_keys(release, node, kubelet, user, *(f"{k}=set-by-node" for k in OPERATOR_KEYS))
        _taint_write(
            release, node, op, add={"key": MINE, "effect": "NoSchedule"}, mark=MINE, owner=taint_nodeconfig
        )
        release.kubectl("annotate", "node", node, "--overwrite", *(f"{k}=v1" for k in rest), kubeconfig=op)
        _refused_for_keys(release, node, kubelet, user, *(f"{k}=changed-by-node" for k in OPERATOR_KEYS))
        _refused_for_keys(release, node, kubelet, user, *(f"{k}-" for k in OPERATOR_KEYS))
        # The mark pointed at a foreign taint would have the operator remove that taint on give-back.
        _refused_for_keys(release, node, kubelet, user, f"{ANN_TAINT}={FOREIGN}")
        # The node cannot take off the operator's taint itself either (NodeRestriction).
        untaint = release.cluster.kubectl("taint", "node", node, f"{MINE}-", kubeconfig=kubelet)
        assert untaint.returncode != 0 and "not allowed to modify taints" in untaint.stderr, untaint.stderr
        # A person (the admin here) is refused the same way: break-glass is deleting the binding.
        _refused_for_keys(release, node, None, "eventedpleg-admin", f"{ANN_OWNER}=by-hand")
        annotations = release.get("node", node)["metadata"]["annotations"]
        assert {k: annotations[k] for k in rest} == dict.fromkeys(rest, "v1")
        assert (annotations[ANN_TAINT], annotations[ANN_OWNER]) == (MINE, taint_nodeconfig)
    finally:
        _taint_write(release, node, op, remove=MINE, mark=None)
        release.kubectl("annotate", "node", node, f"{ANN_OWNER}-", *(f"{k}-" for k in rest), kubeconfig=op)
    after = release.get("node", node)
    assert not set(OPERATOR_KEYS) & set(after["metadata"]["annotations"])  # the operator removed each
    assert not any(t["key"] == MINE for t in after["spec"].get("taints", []))


def test_a_node_may_not_register_itself_with_operator_owned_keys(release: Release) -> None:
    """A node may delete and re-create its own Node (NodeRestriction); carrying one of the operator's
    keys into the new object is refused as a write of it is."""
    name = f"{release.prefix}-reregistered"
    kubelet = release.cluster.node_kubeconfig(name)

    def node(annotations: dict[str, str]) -> str:
        return yaml.safe_dump(
            {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "annotations": annotations}}
        )

    try:
        refused = release.cluster.kubectl(
            "create", "-f", "-", stdin=node({ANN_CORDONED_BY_US: "true"}), kubeconfig=kubelet
        )
        message = (
            f"only the eventedpleg operator may set, change or remove {ANN_CORDONED_BY_US} on Node {name}"
        )
        assert refused.returncode != 0 and message in refused.stderr, refused.stderr
        release.kubectl("create", "-f", "-", stdin=node({ANN_REASON: "registered"}), kubeconfig=kubelet)
        assert release.get("node", name)["metadata"]["annotations"][ANN_REASON] == "registered"
    finally:
        release.cluster.kubectl("delete", "node", name, "--ignore-not-found")


def test_approval_needs_patch_on_the_nodeconfig_which_no_node_has(
    release: Release, taint_nodeconfig: str
) -> None:
    """`eventedpleg approve` writes the NodeConfig's eventedpleg.io/approved: a node's credential may
    neither read nor patch a NodeConfig, so it cannot approve itself; a person with `patch` can."""
    node = release.nodes[1]
    kubelet = release.cluster.node_kubeconfig(node)
    for verb in ("patch", "update", "get"):
        can = release.cluster.kubectl("auth", "can-i", verb, f"nodeconfigs.{GROUP}", kubeconfig=kubelet)
        assert can.stdout.strip() == "no", (verb, can.stdout, can.stderr)
    approval = json.dumps({node: "h1"})
    denied = release.cluster.kubectl(
        "annotate", "nodeconfig", taint_nodeconfig, f"{ANN_APPROVED}={approval}", kubeconfig=kubelet
    )
    assert denied.returncode != 0 and "forbidden" in denied.stderr.lower(), denied.stderr
    # The CLI as the node: refused too (it reads the NodeConfig first).
    generation = release.get("nodeconfig", taint_nodeconfig)["metadata"]["generation"]
    status = {"status": {"observedGeneration": generation, "renderedHash": "h1"}}
    release.kubectl(
        "patch",
        "nodeconfig",
        taint_nodeconfig,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps(status),
    )

    def approve(kubeconfig: Path) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "eventedpleg", "approve", node, "--nodeconfig", taint_nodeconfig]
        return subprocess.run(
            [*argv, f"--kubeconfig={kubeconfig}"], capture_output=True, text=True, timeout=60, check=False
        )

    as_node = approve(kubelet)
    assert as_node.returncode != 0 and "forbidden" in as_node.stderr.lower(), as_node.stderr
    annotations = release.get("nodeconfig", taint_nodeconfig)["metadata"].get("annotations", {})
    assert ANN_APPROVED not in annotations
    # A person with `patch` on the NodeConfig (the admin here): the same command approves.
    as_admin = approve(release.cluster.kubeconfig)
    assert as_admin.returncode == 0, as_admin.stderr
    assert f"node {node} approved for config h1 of NodeConfig {taint_nodeconfig}" in as_admin.stdout
    annotations = release.get("nodeconfig", taint_nodeconfig)["metadata"]["annotations"]
    assert json.loads(annotations[ANN_APPROVED]) == {node: "h1"}
    # Were nodes ever granted `patch` on NodeConfigs, the chart's <operator>-approval policy still refuses
    # them the approval (and nothing else).
    widened = f"{release.prefix}-nodes-widened"
    role = {"apiGroups": [GROUP], "resources": ["nodeconfigs"], "verbs": ["get", "patch"]}
    subject = {"kind": "Group", "name": "system:nodes", "apiGroup": "rbac.authorization.k8s.io"}
    ref = {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": widened}
    grant = [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": widened},
         "rules": [role]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": widened}, "roleRef": ref, "subjects": [subject]},
    ]  # fmt: skip
    release.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(grant))
    try:
        can_patch = ("auth", "can-i", "patch", f"nodeconfigs.{GROUP}")
        wait_for(
            lambda: release.cluster.kubectl(*can_patch, kubeconfig=kubelet).stdout.strip() == "yes",
            what="RBAC widened for nodes",
        )
        widened_write = release.cluster.kubectl(
            "annotate", "nodeconfig", taint_nodeconfig, "--overwrite", f"{ANN_APPROVED}={{}}",
            kubeconfig=kubelet,
        )  # fmt: skip
        message = (
            f"a node may not approve: eventedpleg.io/approved on NodeConfig {taint_nodeconfig} is written "
            f"by people (eventedpleg approve), not by system:node:{node}"
        )
        assert widened_write.returncode != 0 and message in widened_write.stderr, widened_write.stderr
        release.kubectl("annotate", "nodeconfig", taint_nodeconfig, "example.com/x=1", kubeconfig=kubelet)
    finally:
        release.kubectl("delete", "clusterrolebinding,clusterrole", widened, "--ignore-not-found")
    annotations = release.get("nodeconfig", taint_nodeconfig)["metadata"]["annotations"]
    assert json.loads(annotations[ANN_APPROVED]) == {node: "h1"}


def test_a_reserved_taint_is_not_removed_even_when_marked(release: Release, taint_nodeconfig: str) -> None:
    """operator-vap.yaml checks reserved keys on removal as on addition. A mark naming a reserved taint can
    only come from outside the policies: here the documented break-glass (the node-keys binding deleted,
    a write by hand, `helm upgrade` puts the binding back). Then neither the operator's account (the
    chart's policy) nor the node's credential (NodeRestriction, and the policy for the mark) removes that
    taint."""
    node = release.nodes[1]
    kubelet = release.cluster.node_kubeconfig(node)
    op = release.cluster.service_account_kubeconfig(release.namespace, release.operator, create=False)
    binding = f"{release.operator}-node-keys"
    saved = release.get("validatingadmissionpolicybinding", binding)
    meta = {k: saved["metadata"][k] for k in ("name", "labels", "annotations") if k in saved["metadata"]}
    restore = yaml.safe_dump({**saved, "metadata": meta})

    def by_hand(*args: str) -> bool:
        return release.cluster.kubectl("annotate", "node", node, "--overwrite", *args).returncode == 0

    release.kubectl("delete", "validatingadmissionpolicybinding", binding)
    try:
        wait_for(lambda: by_hand(f"{ANN_TAINT}={RESERVED}"), what="the mark written by hand, binding gone")
        release.kubectl("taint", "node", node, f"{RESERVED}=x:NoSchedule")
        release.helm("upgrade", release.name, str(CHART), "-n", release.namespace, "--reuse-values")
        assert release.get("validatingadmissionpolicybinding", binding)["spec"] == saved["spec"]
        tries = itertools.count()  # a new value each time: writing the same one again changes nothing
        wait_for(lambda: not by_hand(f"{ANN_OWNER}=by-hand-{next(tries)}"), what="the binding in force again")
        stderr = _taint_denied(release, node, op, remove=RESERVED, mark=None)
        assert "the operator may not add or remove a reserved taint key" in stderr, stderr
        untaint = release.cluster.kubectl("taint", "node", node, f"{RESERVED}-", kubeconfig=kubelet)
        assert untaint.returncode != 0 and "not allowed to modify taints" in untaint.stderr, untaint.stderr
        _refused_for_keys(release, node, kubelet, f"system:node:{node}", f"{ANN_TAINT}-")
        assert any(t["key"] == RESERVED for t in release.get("node", node)["spec"]["taints"])
    finally:  # the binding back whatever failed
        release.cluster.kubectl("apply", "-f", "-", stdin=restore)
        release.cluster.kubectl("annotate", "node", node, f"{ANN_TAINT}-", f"{ANN_OWNER}-", kubeconfig=op)
        release.cluster.kubectl("taint", "node", node, f"{RESERVED}-")


# --- RBAC: what each ServiceAccount can and cannot do -----------------------------------------------------

# (verb, resource, namespace or "" for cluster-wide/all namespaces, allowed); {ns} is the release namespace,
# {agent_ns} the agent's; RESOURCE#NAME asks about one object. eventedpleg/k8s/access.py says why each.
OPERATOR_CAN = [
    ("get", "nodes", "", True), ("list", "nodes", "", True), ("watch", "nodes", "", True),
    ("patch", "nodes", "", True),
    ("get", "nodeconfigs.eventedpleg.io", "", True),
    ("list", "nodeconfigs.eventedpleg.io", "", True), ("watch", "nodeconfigs.eventedpleg.io", "", True),
    ("patch", "nodeconfigs.eventedpleg.io", "", True),
    ("patch", "nodeconfigs.eventedpleg.io/status", "", True),
    ("list", "pods", "", True), ("list", "pods", "{agent_ns}", True), ("watch", "pods", "{agent_ns}", True),
    ("create", "pods/eviction", "default", True),
    ("list", "poddisruptionbudgets.policy", "default", True),
    ("list", "namespaces", "", True),  # drain.listNamespaces, on by default
    ("create", "events", "default", True), ("create", "events", "{ns}", True),  # ours; kopf's
    ("create", "configmaps", "{ns}", True),
    ("get", f"leases.coordination.k8s.io#{c.LEASE_NAME}", "{ns}", True),
    ("create", "leases.coordination.k8s.io", "{ns}", True),
    ("update", f"leases.coordination.k8s.io#{c.LEASE_NAME}", "{ns}", True),
    ("watch", "customresourcedefinitions.apiextensions.k8s.io", "", True),
    # ... and no more:
    ("get", "secrets", "{ns}", False), ("list", "secrets", "", False), ("watch", "secrets", "", False),
    ("patch", "nodes/status", "", False), ("update", "nodes", "", False), ("delete", "nodes", "", False),
    ("get", "pods", "default", False), ("watch", "pods", "", False), ("watch", "pods", "default", False),
    ("create", "pods", "default", False), ("update", "pods", "default", False),
    ("delete", "pods", "default", False), ("delete", "pods", "", False),  # only with drain.allowForceDelete
    ("create", "pods/exec", "default", False),
    ("get", "poddisruptionbudgets.policy", "default", False),
    ("update", "poddisruptionbudgets.policy", "default", False),
    ("create", "nodeconfigs.eventedpleg.io", "", False), ("delete", "nodeconfigs.eventedpleg.io", "", False),
    ("update", "nodeconfigs.eventedpleg.io", "", False),
    ("get", "nodeconfigs.eventedpleg.io/status", "", False),
    ("update", "nodeconfigs.eventedpleg.io/status", "", False),
    ("create", "events", "kube-system", False), ("patch", "events", "default", False),
    ("create", "events.events.k8s.io", "default", False),
    ("create", "configmaps", "kube-system", False), ("update", "configmaps", "{ns}", False),
    ("get", "configmaps", "{ns}", False), ("delete", "configmaps", "{ns}", False),
    ("get", "leases.coordination.k8s.io#another", "{ns}", False),
    ("update", "leases.coordination.k8s.io", "kube-system", False),
    ("create", "serviceaccounts/token", "{ns}", False), ("create", "clusterrolebindings", "", False),
    ("patch", "customresourcedefinitions.apiextensions.k8s.io", "", False),
    ("impersonate", "users", "", False),
]  # fmt: skip

AGENT_CAN = [
    ("get", "nodes", "", True), ("watch", "nodes", "", True), ("patch", "nodes", "", True),
    ("get", "nodes/metrics", "", True), ("get", "configmaps", "{ns}", True),
    ("create", "events", "default", True), ("patch", "nodes/status", "", True),
    # ... and no more (the admission policy narrows the allowed ones further to its own Node):
    ("list", "nodes", "", False), ("delete", "nodes", "", False), ("update", "nodes/status", "", False),
    ("get", "nodes/proxy", "", False),
    ("get", "secrets", "{agent_ns}", False), ("list", "secrets", "", False),
    ("list", "configmaps", "{ns}", False), ("get", "configmaps", "{agent_ns}", False),
    ("get", "configmaps", "kube-system", False), ("create", "configmaps", "{ns}", False),
    ("create", "events", "{ns}", False), ("list", "pods", "", False), ("create", "pods", "{agent_ns}", False),
    ("create", "pods/eviction", "default", False), ("patch", "nodeconfigs.eventedpleg.io", "", False),
    ("list", "nodeconfigs.eventedpleg.io", "", False),
]  # fmt: skip


def _can_i(release: Release, kubeconfig: Path, verb: str, resource: str, namespace: str) -> bool:
    ns = namespace.format(ns=release.namespace, agent_ns=release.agent_ns)
    resource, _, name = resource.partition("#")
    resource, _, sub = resource.partition("/")
    target = f"{resource}/{name}" if name else resource
    args = ["auth", "can-i", verb, target, *([f"--subresource={sub}"] if sub else [])]
    args += ["-n", ns] if ns else ["--all-namespaces"]
    done = release.cluster.kubectl(*args, kubeconfig=kubeconfig)
    assert done.stdout.strip() in {"yes", "no"}, done.stdout + done.stderr
    return done.stdout.strip() == "yes"


@pytest.mark.parametrize(("component", "table"), [("operator", OPERATOR_CAN), ("agent", AGENT_CAN)])
def test_service_accounts_can_do_what_they_need_and_no_more(
    release: Release, component: str, table: list[tuple[str, str, str, bool]]
) -> None:
    """Asked with each ServiceAccount's own token (no impersonation), as the pods would be."""
    ns = release.namespace if component == "operator" else release.agent_ns
    sa = release.operator if component == "operator" else release.agent
    kubeconfig = release.cluster.service_account_kubeconfig(ns, sa, create=False)
    wrong = [
        f"{verb} {resource} in {namespace or '*'}: expected {'yes' if allowed else 'no'}"
        for verb, resource, namespace, allowed in table
        if _can_i(release, kubeconfig, verb, resource, namespace) != allowed
    ]
    assert not wrong


@pytest.mark.parametrize(
    ("namespace", "extra"),
    [("{ns}", {"configmaps": {"get"}}), ("default", {"events": {"create"}}), ("{agent_ns}", {})],
)
def test_agent_rules_are_exactly_agent_rbac(
    release: Release, namespace: str, extra: dict[str, set[str]]
) -> None:
    """`kubectl auth can-i --list` for the agent: its whole rule set per namespace, beyond what every
    authenticated user gets, is the agent-rbac.yaml rules."""
    kubeconfig = release.cluster.service_account_kubeconfig(release.agent_ns, release.agent, create=False)
    ns = namespace.format(ns=release.namespace, agent_ns=release.agent_ns)
    listed = release.kubectl("auth", "can-i", "--list", "-n", ns, kubeconfig=kubeconfig)
    rules: dict[str, set[str]] = {}
    for line in listed.splitlines()[1:]:
        resource = line.split()[0]
        if resource.startswith(("selfsubject", "[")):
            continue  # system:basic-user and system:discovery, which every authenticated user has
        verbs = line[line.rindex("[") :].strip("[] ").split()  # the last column
        rules.setdefault(resource, set()).update(verbs)
    expected = {"nodes": {"get", "watch", "patch"}, "nodes/status": {"patch"}, "nodes/metrics": {"get"}}
    assert rules == {**expected, **extra}


# --- examples, upgrade, uninstall -------------------------------------------------------------------------


@pytest.mark.parametrize("example", sorted(p.name for p in (REPO / "examples").glob("nodeconfig*.yaml")))
def test_examples_are_accepted_by_the_api_server(release: Release, example: str) -> None:
    done = release.cluster.kubectl("apply", "--dry-run=server", "-f", str(REPO / "examples" / example))
    assert done.returncode == 0, done.stderr
    assert "nodeconfig.eventedpleg.io/cluster" in done.stdout


def test_upgrade_changes_replicas_in_place(release: Release) -> None:
    before = release.get("deployment", "-n", release.namespace, release.operator)
    release.helm(
        "upgrade", release.name, str(CHART), "-n", release.namespace, "--reuse-values",
        *set_json_args({"operator.replicas": 1}),
    )  # fmt: skip
    after = release.get("deployment", "-n", release.namespace, release.operator)
    assert after["metadata"]["uid"] == before["metadata"]["uid"]  # selectors unchanged: no re-create
    assert after["spec"]["replicas"] == 1
    # One replica: no PDB (it could only block drains).
    gone = release.cluster.kubectl("get", "pdb", "-n", release.namespace, release.operator)
    assert gone.returncode != 0 and "NotFound" in gone.stderr


def test_uninstall_removes_everything_but_the_crd(release: Release) -> None:
    manifest = release.manifest()
    release.helm("uninstall", release.name, "-n", release.namespace, "--wait", "--timeout=120s")

    def leftovers() -> list[str]:
        left = []
        for doc in manifest:
            meta = doc["metadata"]
            ns = ["-n", meta["namespace"]] if "namespace" in meta else []
            got = release.cluster.kubectl("get", doc["kind"], meta["name"], *ns, "-o", "name")
            if got.returncode == 0:
                left.append(got.stdout.strip())
        return left

    # Namespaced objects in the agent namespace go with it; the namespace controller takes a moment.
    wait_for(lambda: not leftovers(), timeout=120, what="no object of the release left")
    assert release.cluster.kubectl("get", "crd", c.CRD_NAME).returncode == 0  # Helm never deletes CRDs
