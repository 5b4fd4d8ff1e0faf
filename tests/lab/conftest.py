"""The lab tier (marker `lab`): a real cluster on this machine, the local control plane plus systemd-nspawn
nodes running real kubelets and real containerd / CRI-O (eventedpleg_lab.lab, `eventedpleg lab up`).

Needs Linux and root. A cold first run builds what is not cached (the rootfs ~4 min, CRI-O ~3 min plus a
1.4 GB module download, and the real-node rig's kubelets and containerd 2.2 if missing), so run it after
`eventedpleg cluster build` and `eventedpleg realnode build`. $EVENTEDPLEG_LAB_NODES replaces the node set
(the `--nodes` syntax of `eventedpleg lab up`); the default is nodes.DEFAULT_SPEC.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Generator, Iterator
from pathlib import Path

import pytest

from eventedpleg_lab import image, release
from eventedpleg_lab.lab import chart, nodes
from eventedpleg_lab.lab.lab import Lab
from tests.tierskip import TierSkips

ENV_NODES = "EVENTEDPLEG_LAB_NODES"


def _why_not() -> str | None:
    if sys.platform != "linux" or os.geteuid() != 0:
        return "needs Linux and root (it boots systemd-nspawn machines running kubelets)"
    return None


TIER = TierSkips("lab", _why_not)


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(TIER, "lab-tier")


# It installs the product from the README and uninstalls it through the NOTES: before `installed` does,
# since the chart allows one release per cluster.
FIRST = "test_lab_readme_install.py"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A failing lab test carries the cluster's state with its report (nodes: readiness, taints, cordons;
    pods that are neither Running nor Succeeded, with why; recent warnings), so a CI log alone says whether
    the failure was the test's own or a node that had stopped running pods."""
    report = yield
    the_lab = getattr(item, "funcargs", {}).get("installed") or getattr(item, "funcargs", {}).get("lab")
    if report.failed and isinstance(the_lab, Lab):
        report.sections.append(("the lab when it failed", chart.cluster_state(the_lab)))
    return report


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: item.path.name != FIRST)  # stable: the rest keep their order


@pytest.fixture(scope="session")
def lab_specs() -> tuple[nodes.NodeSpec, ...]:
    return nodes.parse(os.environ.get(ENV_NODES) or nodes.DEFAULT_SPEC)


@pytest.fixture(scope="session")
def lab(tmp_path_factory: pytest.TempPathFactory, lab_specs: tuple[nodes.NodeSpec, ...]) -> Iterator[Lab]:
    the_lab = Lab(Path(tmp_path_factory.mktemp("lab")))
    the_lab.up(lab_specs, timeout=300)
    try:
        yield the_lab
    finally:
        the_lab.down()


@pytest.fixture(scope="session")
def released() -> release.ReleaseFiles:
    """hack/release.sh's files for this tree (wheel, chart package, image archive, SBOM, SHA256SUMS)."""
    return release.ensure(image.find_repo())


@pytest.fixture(scope="session")
def installed(lab: Lab, lab_specs: tuple[nodes.NodeSpec, ...], released: release.ReleaseFiles) -> Lab:
    """The product installed on the lab as an administrator installs it: the release's image archive and
    chart package pushed to the lab's registry, `helm install oci://...` with the image pinned by digest
    (every node pulls it); plus a Deployment guarded by a PodDisruptionBudget. test_lab_teardown.py
    uninstalls it."""
    chart.install_product(lab, lab_specs, files=released)
    return lab
