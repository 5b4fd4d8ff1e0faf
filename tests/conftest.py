"""Shared fixtures. `cluster`: one real control plane per test session (see eventedpleg_lab.localcluster)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from eventedpleg_lab.localcluster import build

if TYPE_CHECKING:
    from eventedpleg_lab.localcluster.cluster import LocalCluster

_build_error: list[str] = []


def pytest_collection_finish(session: pytest.Session) -> None:
    # Compile the binaries (about 10 minutes the first time, cached after) before any test starts, so the
    # build does not count against the first cluster test's timeout; a hook is not subject to it.
    if session.config.option.collectonly:
        return
    if any(item.get_closest_marker("cluster") for item in session.items):
        try:
            build.ensure(build.CONTROL_PLANE)
        except build.BuildError as exc:
            _build_error.append(str(exc))


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A running LocalCluster: .kubeconfig (admin), .kubectl(...), .add_nodes([...]),
    .service_account_kubeconfig(ns, name, bound_pod=...). Processes are stopped at session end."""
    if _build_error:
        pytest.fail(f"cannot build the local control plane: {_build_error[0]}", pytrace=False)
    from eventedpleg_lab.localcluster.cluster import LocalCluster  # noqa: PLC0415 - loads the k8s client

    with LocalCluster(tmp_path_factory.mktemp("cluster")) as local:
        yield local
