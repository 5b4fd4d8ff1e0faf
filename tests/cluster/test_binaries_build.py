"""The build script's pure parts and its binary lookup (no Go needed for these)."""

from __future__ import annotations

from pathlib import Path

import pytest

from eventedpleg_lab.localcluster import build

# An excerpt in the shape of k8s.io/kubernetes's go.mod (v1.36.x).
KUBERNETES_GO_MOD = """\
module k8s.io/kubernetes

go 1.26.0

godebug default=go1.26

godebug (
\twinsymlink=0
)

require (
\tk8s.io/api v0.0.0
\tk8s.io/apimachinery v0.0.0
)

replace (
\tk8s.io/api => ./staging/src/k8s.io/api
\tk8s.io/apimachinery => ./staging/src/k8s.io/apimachinery // a comment
\tk8s.io/cri-streaming => ./staging/src/k8s.io/cri-streaming
\tgithub.com/example/fork => github.com/example/fork v1.2.3
)

replace k8s.io/kms => ./staging/src/k8s.io/kms
"""


def test_staging_replaces_come_from_the_release_go_mod() -> None:
    assert build.staging_replaces(KUBERNETES_GO_MOD) == [
        "k8s.io/api",
        "k8s.io/apimachinery",
        "k8s.io/cri-streaming",
        "k8s.io/kms",
    ]
    assert build.godebug_lines(KUBERNETES_GO_MOD) == ["default=go1.26", "winsymlink=0"]


def test_kustomize_files_follow_resources(tmp_path: Path) -> None:
    (tmp_path / "fast").mkdir()
    (tmp_path / "node").mkdir()
    (tmp_path / "node" / "kustomization.yaml").write_text("resources:\n- init.yaml\n- heartbeat.yaml\n")
    (tmp_path / "fast" / "kustomization.yaml").write_text(
        "kind: Kustomization\nresources:\n- ../node\n- ../pod.yaml\n"
    )
    assert build.kustomize_files(tmp_path / "fast") == [
        tmp_path / "node" / "init.yaml",
        tmp_path / "node" / "heartbeat.yaml",
        tmp_path / "pod.yaml",
    ]
    (tmp_path / "node" / "kustomization.yaml").write_text("resources: []\npatches: []\n")
    with pytest.raises(build.BuildError, match="patches"):
        build.kustomize_files(tmp_path / "fast")


def test_user_binaries_win_over_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mine, assets, cache = tmp_path / "mine", tmp_path / "assets", tmp_path / "cache"
    for directory, name in ((mine, "etcd"), (assets, "etcd"), (assets, "kube-apiserver")):
        directory.mkdir(exist_ok=True)
        (directory / name).write_text("#!/bin/sh\n")
        (directory / name).chmod(0o755)
    (assets / "kube-scheduler").write_text("not executable")
    monkeypatch.setenv(build.ENV_CACHE, str(cache))
    monkeypatch.setenv(build.ENV_BIN_DIR, str(mine))
    monkeypatch.setenv(build.ENV_KUBEBUILDER_ASSETS, str(assets))
    assert build.locate("etcd") == mine / "etcd"
    assert build.locate("kube-apiserver") == assets / "kube-apiserver"
    assert build.locate("kube-scheduler") is None  # present but not executable: built instead
    assert build.locate("kwok") is None


def test_found_binaries_are_not_rebuilt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(build.ENV_CACHE, str(tmp_path / "cache"))
    monkeypatch.setenv(build.ENV_BIN_DIR, str(tmp_path))
    (tmp_path / "helm").write_text("#!/bin/sh\n")
    (tmp_path / "helm").chmod(0o755)
    monkeypatch.setattr(build, "_build", lambda *a: pytest.fail("nothing should be built"))
    assert build.ensure(["helm"]).paths == {"helm": tmp_path / "helm"}
