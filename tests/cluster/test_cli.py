"""`eventedpleg cluster up/status/down` as a user runs them: separate processes, PIDs recorded, stopped.
And the product's read-only commands as kubectl users run them against the real API server: --context from
a kubeconfig with two contexts, `kubectl eventedpleg` as a plugin, `status -o json`, `status --watch` driven
by a watch, and LISTs read in pages."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from eventedpleg import constants as c
from eventedpleg import protocol
from eventedpleg.cli import main as eventedpleg_main
from eventedpleg.k8s import client as k8s_client
from eventedpleg_lab.kube.fakenodes import KWOK_TOLERATION, FakeNode
from eventedpleg_lab.localcluster.cluster import LocalCluster, kubectl_path, remove_state

pytestmark = pytest.mark.cluster


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "eventedpleg", "cluster", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def test_up_survives_the_cli_and_down_stops_exactly_its_pids(tmp_path: Path) -> None:
    directory = tmp_path / "cl"
    up = cli("up", "--nodes", "3", "--dir", str(directory))
    try:
        assert up.returncode == 0, up.stderr
        kubeconfig = directory / "admin.kubeconfig"
        assert f"kubeconfig: {kubeconfig}" in up.stdout
        assert f"export KUBECONFIG={kubeconfig}" in up.stdout

        # The `up` process has exited; the control plane it started keeps running.
        status = cli("status", "--dir", str(directory))
        assert status.returncode == 0, status.stdout
        pids = [p["pid"] for p in json.loads((directory / "state.json").read_text())["processes"]]
        assert len(pids) == 5
        assert all(alive(pid) for pid in pids)

        nodes = subprocess.run(
            [kubectl_path(), f"--kubeconfig={kubeconfig}", "get", "nodes", "--no-headers"],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "KUBECONFIG": ""},
        ).stdout.splitlines()
        assert len(nodes) == 3
        assert all(line.split()[1] == "Ready" for line in nodes)
        assert sum("control-plane" in line for line in nodes) == 1

        again = cli("up", "--dir", str(directory))
        assert again.returncode != 0
        assert "already running" in again.stderr
    finally:
        down = cli("down", "--dir", str(directory))
    assert down.returncode == 0, down.stderr
    assert "kube-apiserver" in down.stdout
    assert not any(alive(pid) for pid in pids)
    assert not directory.exists()
    assert cli("status", "--dir", str(directory)).returncode != 0


def test_down_removes_only_what_the_cluster_wrote(tmp_path: Path) -> None:
    (tmp_path / "pki").mkdir()
    (tmp_path / "pki" / "ca.key").write_text("x")
    (tmp_path / "admin.kubeconfig").write_text("x")
    (tmp_path / "notes.txt").write_text("mine")
    remove_state(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


# --- the product's read-only commands, as kubectl users run them ------------------------------------------

REPO = Path(__file__).resolve().parents[2]
NAME = "cli-watch"  # this module's NodeConfig; no operator runs here, the test writes its status itself


def product(*args: str, env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "eventedpleg", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env=env,
    )


@pytest.fixture(scope="module")
def nodeconfig(cluster: LocalCluster) -> Iterator[str]:
    cluster.apply_crd(path=REPO / "crds", name=c.CRD_NAME)
    body = {
        "apiVersion": f"{protocol.GROUP}/{c.VERSION}",
        "kind": "NodeConfig",
        "metadata": {"name": NAME},
        # drain.force: the pods of crowded_node have no controller, and only force lets a drain take them.
        "spec": {
            "eventedPleg": True,
            "nodeSelector": {"matchLabels": {"cli-test": NAME}},
            "drain": {"force": True},
        },
    }
    cluster.kubectl("apply", "-f", "-", stdin=json.dumps(body), check=True)
    yield NAME
    cluster.kubectl("delete", "nodeconfig", NAME, "--ignore-not-found", "--wait=false")


@pytest.fixture(scope="module")
def two_contexts(cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The admin kubeconfig with a second context, `dead`, on a port nobody listens on, as current."""
    doc = yaml.safe_load(cluster.kubeconfig.read_text())
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    live = doc["contexts"][0]
    dead_cluster = {**doc["clusters"][0], "name": "dead"}
    dead_cluster["cluster"] = {**dead_cluster["cluster"], "server": f"https://127.0.0.1:{closed}"}
    doc["clusters"].append(dead_cluster)
    doc["contexts"] = [
        {"name": "live", "context": {**live["context"], "namespace": "from-context"}},
        {"name": "dead", "context": {**live["context"], "cluster": "dead"}},
    ]
    doc["current-context"] = "dead"
    path = tmp_path_factory.mktemp("contexts") / "kubeconfig"
    path.write_text(yaml.safe_dump(doc))
    return path


def _env(kubeconfig: Path | str, **extra: str) -> dict[str, str]:
    return {**os.environ, "KUBECONFIG": str(kubeconfig), **extra}


def test_context_chooses_among_two_contexts_and_json_parses(two_contexts: Path, nodeconfig: str) -> None:
    env = _env(two_contexts)
    current = product("status", nodeconfig, env=env)
    assert current.returncode == 5, current.stderr  # the current context's server is down
    assert "cannot reach the API server" in current.stderr

    chosen = product("status", nodeconfig, "--context", "live", "-o", "json", env=env)
    assert chosen.returncode == 3, chosen.stderr  # no operator has written a status: in progress
    doc = json.loads(chosen.stdout)
    assert doc["kind"] == "StatusReport"
    assert doc["nodeConfig"]["name"] == nodeconfig
    assert doc["nodeConfig"]["eventedPleg"] is True
    assert doc["nodeConfig"]["observedGeneration"] < doc["nodeConfig"]["generation"]
    assert doc["nodes"] == []

    missing = product("status", nodeconfig, "--context", "nope", env=env)
    assert missing.returncode == 2
    assert "nope" in missing.stderr

    # The same through kubectl's plugin mechanism: kubectl finds kubectl-eventedpleg on PATH.
    plugin_dir = Path(sys.executable).parent
    assert (plugin_dir / "kubectl-eventedpleg").exists()
    path = f"{plugin_dir}{os.pathsep}{os.environ.get('PATH', '')}"
    through_kubectl = subprocess.run(
        [kubectl_path(), "eventedpleg", "status", nodeconfig, "--context", "live", "-o", "yaml"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=_env(two_contexts, PATH=path),
    )
    assert through_kubectl.returncode == 3, through_kubectl.stderr
    assert yaml.safe_load(through_kubectl.stdout)["nodeConfig"]["name"] == nodeconfig


def test_kubeconfig_files_merge_as_kubectl_first_current_context_wins(
    cluster: LocalCluster, two_contexts: Path, nodeconfig: str, tmp_path: Path
) -> None:
    first = tmp_path / "picks-live"
    first.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Config", "current-context": "live"}))
    env = _env(f"{first}{os.pathsep}{two_contexts}")
    result = product("status", nodeconfig, "-o", "json", env=env)
    assert result.returncode == 3, result.stderr
    # kubectl reads the same files the same way.
    view = subprocess.run(
        [kubectl_path(), "config", "current-context"], capture_output=True, text=True, env=env, check=True
    )
    assert view.stdout.strip() == "live"


def _patch_status(cluster: LocalCluster, name: str, ready: str) -> None:
    generation = int(
        cluster.kubectl("get", "nodeconfig", name, "-o", "jsonpath={.metadata.generation}", check=True).stdout
    )
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    condition = {
        "type": "Ready",
        "status": ready,
        "reason": "Test",
        "message": "written by the test",
        "lastTransitionTime": now,
        "observedGeneration": generation,
    }
    status = {"observedGeneration": generation, "conditions": [condition]}
    cluster.kubectl(
        "patch", "nodeconfig", name, "--subresource=status", "--type=merge",
        "-p", json.dumps({"status": status}), check=True,
    )  # fmt: skip


def test_watch_redraws_on_changes_only_and_ends_when_ready(cluster: LocalCluster, nodeconfig: str) -> None:
    env = _env(cluster.kubeconfig)
    argv = [sys.executable, "-m", "eventedpleg", "status", nodeconfig, "--watch", "-o", "json"]
    watch = subprocess.Popen(
        [*argv, "--timeout", "90"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    try:
        time.sleep(6)  # a poller would have printed several documents by now; a watch prints one
        assert watch.poll() is None
        _patch_status(cluster, nodeconfig, "True")
        out, err = watch.communicate(timeout=60)
    finally:
        if watch.poll() is None:
            watch.kill()
            watch.wait()
    assert watch.returncode == 0, err
    docs = [json.loads(doc) for doc in out.replace("}\n{", "}\x00{").split("\x00") if doc.strip()]
    assert len(docs) == 2, out  # the state at start, then the state after the one change
    assert docs[0]["nodeConfig"]["conditions"] == []
    assert docs[-1]["nodeConfig"]["conditions"][0]["status"] == "True"

    # Bounded: nothing changes, --timeout ends it with the last state's code.
    _patch_status(cluster, nodeconfig, "False")
    started = time.monotonic()
    bounded = product("status", nodeconfig, "--watch", "--timeout", "3", "-o", "json", env=env, timeout=60)
    assert bounded.returncode == 3, bounded.stderr
    assert time.monotonic() - started < 30


PODS, PAGE = 23, 5


@pytest.fixture(scope="module")
def crowded_node(cluster: LocalCluster) -> Iterator[str]:
    """A kwok node with PODS pods bound to it (spec.nodeName: no scheduler), in their own namespace."""
    node = "cli-pages-0"
    cluster.add_nodes([FakeNode(node, "v1.36.4", "containerd://2.2.9", labels={"cli-test": NAME})])
    namespace = "cli-pages"
    objects: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
    ]
    objects += [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"p{i}", "namespace": namespace, "labels": {"app": "pages"}},
            "spec": {
                "nodeName": node,
                "tolerations": [KWOK_TOLERATION],
                "containers": [{"name": "c", "image": "registry.invalid/pages:1"}],
            },
        }
        for i in range(PODS)
    ]
    cluster.kubectl(
        "apply",
        "-f",
        "-",
        stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}),
        check=True,
    )
    yield node
    cluster.kubectl("delete", "namespace", namespace, "--wait=false")
    cluster.delete_nodes([node])


def test_preflight_reads_pods_in_pages(
    cluster: LocalCluster, nodeconfig: str, crowded_node: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[tuple[str, dict[str, str]]] = []
    get_json = k8s_client.get_json

    def spy(api: Any, path: str, query: Any = None) -> dict[str, Any]:
        asked.append((path, dict(query or {})))
        return get_json(api, path, query)

    monkeypatch.setattr(k8s_client, "get_json", spy)
    monkeypatch.setenv("KUBECONFIG", str(cluster.kubeconfig))
    result = CliRunner().invoke(
        eventedpleg_main, ["preflight", "--nodeconfig", nodeconfig, "--chunk-size", str(PAGE), "-o", "json"]
    )
    assert result.exit_code in (0, 3, 4), result.output
    rows = json.loads(result.output)
    assert [row["node"] for row in rows] == [crowded_node]
    assert rows[0]["drain"]["evict"] == PODS  # every page counted

    # Every pod of the cluster (the agent pods' own LIST has a labelSelector and pages the same way).
    pod_pages = [query for path, query in asked if path == "/api/v1/pods" and "labelSelector" not in query]
    assert all(query["limit"] == str(PAGE) for query in pod_pages)
    assert len(pod_pages) >= -(-PODS // PAGE)  # at least ceil(PODS / PAGE) pages, each with a limit
    assert all("continue" in query for query in pod_pages[1:])
    assert "continue" not in pod_pages[0]
    assert any(path == "/api/v1/nodes" and query["limit"] == str(PAGE) for path, query in asked)
