"""Fixtures the cluster tests share: `crd` (the NodeConfig CRD applied, once per module) and `env` (an Env:
nodes and NodeConfigs under a fresh prefix, NodeConfigs removed after the test)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from eventedpleg import constants as c
from eventedpleg_lab.localcluster.cluster import LocalCluster
from tests.cluster.test_rollout import Env


@pytest.fixture(scope="module")
def crd(cluster: LocalCluster) -> None:
    cluster.apply_crd(path=Path(__file__).resolve().parents[2] / "crds", name=c.CRD_NAME)


@pytest.fixture
def env(cluster: LocalCluster, tmp_path: Path, crd: None) -> Iterator[Env]:
    environment = Env(cluster, tmp_path)
    yield environment
    environment.cleanup()
