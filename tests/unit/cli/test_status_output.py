"""`eventedpleg status -o json|yaml|wide`, the kubectl connection flags (--context, --namespace) and the
kubectl plugin's name."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from eventedpleg import protocol
from eventedpleg.cli import main
from eventedpleg.cli.inspect import _status_text
from eventedpleg.cli.kubeflags import Kube
from eventedpleg.cli.report import STATUS_API_VERSION, status_document, status_view
from eventedpleg.core.rollout.snapshot import node_view
from eventedpleg.k8s.client import context_namespace
from eventedpleg.k8s.errors import KubeconfigError

HASH = "0123456789"
NODECONFIG: dict[str, Any] = {
    "metadata": {"name": "cluster", "generation": 4},
    "spec": {"eventedPleg": True},
    "status": {
        "observedGeneration": 4,
        "renderedHash": HASH,
        "nodes": {"total": 3, "eligible": 2, "updated": 1, "updating": 1},
        "conditions": [
            {"type": "Ready", "status": "False", "reason": "RolloutInProgress", "message": "1 of 2"},
            {"type": "Degraded", "status": "False", "reason": "AsExpected"},
        ],
    },
}


def _node(name: str, annotations: dict[str, str], *, cordoned: bool = False) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "resourceVersion": "1", "annotations": annotations, "labels": {}},
        "spec": {"unschedulable": cordoned},
        "status": {
            "nodeInfo": {"kubeletVersion": "v1.36.4", "containerRuntimeVersion": "containerd://2.2.9"}
        },
    }


def _views() -> list[Any]:
    ours = {protocol.ANN_OWNER: "cluster"}
    return [
        node_view(_node("n1", {**ours, protocol.ANN_STATE: "Done", protocol.ANN_CURRENT: HASH})),
        node_view(
            _node(
                "n2",
                {
                    **ours,
                    protocol.ANN_STATE: "Draining",
                    protocol.ANN_REASON: "waiting   for 2 pods",
                    protocol.ANN_STATE_SINCE: "2026-11-27T08:00:00+00:00",
                },
                cordoned=True,
            )
        ),
        node_view(_node("n3", {})),  # not in our hands: no row
    ]


def test_json_document_has_the_summary_and_one_row_per_node_in_our_hands() -> None:
    doc = json.loads(_status_text(NODECONFIG, _views(), "json", watching=False))
    assert doc["apiVersion"] == STATUS_API_VERSION
    assert doc["kind"] == "StatusReport"
    summary = doc["nodeConfig"]
    assert summary["name"] == "cluster"
    assert (summary["generation"], summary["observedGeneration"]) == (4, 4)
    assert summary["renderedHash"] == HASH
    assert summary["nodes"] == {
        "total": 3,
        "eligible": 2,
        "updated": 1,
        "updating": 1,
        "failed": 0,
        "skipped": 0,
    }
    assert summary["conditions"][0] == {
        "type": "Ready",
        "status": "False",
        "reason": "RolloutInProgress",
        "message": "1 of 2",
    }
    assert summary["conditions"][1]["message"] == ""
    assert [row["name"] for row in doc["nodes"]] == ["n1", "n2"]
    done, draining = doc["nodes"]
    assert (done["state"], done["current"], done["cordoned"], done["config"]) == ("Done", True, False, HASH)
    assert done["since"] is None
    assert (draining["state"], draining["current"], draining["cordoned"]) == ("Draining", False, True)
    assert draining["detail"] == "waiting for 2 pods"
    assert draining["since"] == "2026-11-27T08:00:00+00:00"
    assert draining["kubeletVersion"] == "v1.36.4"


def test_yaml_is_the_same_document() -> None:
    text = _status_text(NODECONFIG, _views(), "yaml", watching=False)
    assert text.startswith("---\n")
    assert yaml.safe_load(text) == status_document(NODECONFIG, _views())


def test_wide_adds_config_and_since_and_keeps_the_detail_whole() -> None:
    long_reason = "drain: " + "pod-x " * 40
    views = [
        node_view(
            _node(
                "n9",
                {
                    protocol.ANN_OWNER: "cluster",
                    protocol.ANN_STATE: "Failed",
                    protocol.ANN_REASON: long_reason,
                },
            )
        )
    ]
    narrow = status_view(NODECONFIG, views)
    wide = status_view(NODECONFIG, views, wide=True)
    header = next(line for line in wide.splitlines() if line.startswith("NODE"))
    assert header.split() == ["NODE", "KUBELET", "RUNTIME", "STATE", "CORDONED", "CONFIG", "SINCE", "DETAIL"]
    assert "CONFIG" not in narrow
    assert " ".join(long_reason.split()) in wide
    assert " ".join(long_reason.split()) not in narrow
    assert "…" in narrow


def _kubeconfig(path: Path, current: str) -> Path:
    def context(name: str, namespace: str | None) -> dict[str, Any]:
        extra = {"namespace": namespace} if namespace else {}
        return {"name": name, "context": {"cluster": name, "user": name, **extra}}

    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": current,
        "contexts": [context("one", "ops"), context("two", None)],
        "clusters": [
            {"name": n, "cluster": {"server": f"https://127.0.0.{i}:6443"}}
            for i, n in ((1, "one"), (2, "two"))
        ],
        "users": [{"name": n, "user": {"token": n}} for n in ("one", "two")],
    }
    path.write_text(yaml.safe_dump(doc))
    return path


def test_namespace_follows_the_context_as_kubectl(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    kubeconfig = str(_kubeconfig(tmp_path / "config", "one"))
    assert context_namespace(kubeconfig) == "ops"
    assert context_namespace(kubeconfig, "two") == "default"
    assert Kube(kubeconfig, "one", "mine").resolved_namespace() == "mine"
    assert Kube(kubeconfig, "two").resolved_namespace() == "default"
    with pytest.raises(KubeconfigError, match="'three' not found"):
        context_namespace(kubeconfig, "three")


def test_context_picks_the_server_and_kubeconfig_files_merge(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = _kubeconfig(tmp_path / "a", "two")
    other = tmp_path / "b"
    other.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Config", "current-context": "one"}))
    monkeypatch.setenv("KUBECONFIG", f"{first}:{other}")
    assert Kube().client().configuration.host == "https://127.0.0.2:6443"  # the first current-context wins
    assert Kube(context="one").client().configuration.host == "https://127.0.0.1:6443"
    assert Kube().resolved_namespace() == "default"


def test_kubectl_plugin_names_itself_as_typed() -> None:
    result = CliRunner().invoke(main, ["status", "--help"], prog_name="kubectl eventedpleg")
    assert result.exit_code == 0, result.output
    assert result.output.startswith("Usage: kubectl eventedpleg status [OPTIONS] [NAME]")
    for flag in (
        "--context",
        "--namespace",
        "--kubeconfig",
        "--output",
        "--watch",
        "--timeout",
        "--chunk-size",
    ):
        assert flag in result.output


def _with_ready(status: str) -> dict[str, Any]:
    condition = {"type": "Ready", "status": status, "reason": "R", "message": ""}
    return {**NODECONFIG, "status": {**NODECONFIG["status"], "conditions": [condition]}}


def test_watch_prints_only_what_changed_and_ends_when_ready(monkeypatch: pytest.MonkeyPatch) -> None:
    """The watch loop over what eventedpleg.k8s.follow yields: a change nothing shows (a node heartbeat)
    prints nothing; Ready ends it with 0."""
    import contextlib  # noqa: PLC0415

    from eventedpleg.cli import inspect  # noqa: PLC0415
    from eventedpleg.k8s import follow as following  # noqa: PLC0415

    progressing = _with_ready("False")
    heartbeat = [{**_node("n3", {}), "metadata": {**_node("n3", {})["metadata"], "resourceVersion": "2"}}]
    seen = [
        following.Seen(progressing, (_node("n3", {}),)),
        following.Seen(progressing, tuple(heartbeat)),
        following.Seen(_with_ready("True"), tuple(heartbeat)),
        following.Seen(_with_ready("False"), ()),  # never reached: Ready ended the watch
    ]
    monkeypatch.setattr(Kube, "client", lambda self: contextlib.nullcontext(object()))
    monkeypatch.setattr(inspect, "_nodeconfig", lambda api, name: progressing)
    monkeypatch.setattr(inspect, "_views", lambda api, chunk_size: [])
    monkeypatch.setattr(following, "follow", lambda api, name, stop, page: iter(seen))
    result = CliRunner().invoke(main, ["status", "--watch", "-o", "json"])
    assert result.exit_code == 0, result.output
    docs = [json.loads("{" + part) for part in result.output.strip().lstrip("{").split("\n{")]
    assert [doc["nodeConfig"]["conditions"][0]["status"] for doc in docs] == ["False", "True"]


def test_operator_context_reaches_kopfs_own_login(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`eventedpleg operator --context`: kopf logs in from $KUBECONFIG's current context, which
    select_context makes the chosen one (kubectl's merge rule: the first file to set it wins)."""
    import kopf  # noqa: PLC0415

    from eventedpleg.controller.main import select_context  # noqa: PLC0415

    monkeypatch.setenv("KUBECONFIG", str(_kubeconfig(tmp_path / "config", "two")))
    select_context("one")
    info = kopf.login_with_kubeconfig(settings=kopf.OperatorSettings())
    assert info is not None
    assert info.server == "https://127.0.0.1:6443"
    assert info.default_namespace == "ops"
    assert Kube().client().configuration.host == "https://127.0.0.1:6443"  # our client reads it alike
