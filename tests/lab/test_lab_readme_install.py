"""The README's install block, pasted: extracted from README.md and run on the lab with only the declared
substitutions (installdoc.readme_substitutions: the registry, the build that needs a checkout), from a
copy of the release directory alone (no checkout on PATH or in the working directory, the CLI from the
release's wheel through pipx); then every command the NOTES of its `helm install` print, in order, which
ends with the uninstall. The lab conftest runs this module before any test installs the product.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from eventedpleg import constants as c
from eventedpleg import protocol
from eventedpleg_lab import release
from eventedpleg_lab.lab import chart, installdoc
from eventedpleg_lab.lab.lab import Lab
from eventedpleg_lab.lab.nodes import REGISTRY, NodeSpec
from eventedpleg_lab.localcluster import build
from eventedpleg_lab.localcluster import cluster as lc

pytestmark = pytest.mark.lab

REPO = Path(__file__).resolve().parents[2]
MARKER = "@@ readme-install step"
# The README's names (its block installs these, the test looks them up).
RELEASE_NAME, RELEASE_NS = "evented-pleg", "evented-pleg-system"


def _user_env(tmp_path: Path, lab: Lab) -> dict[str, str]:
    """A user's shell: helm, kubectl, crane and pipx on PATH (the versions the lab uses), pipx's bin
    directory, the system's; the lab's kubeconfig; nothing of this checkout."""
    tools = tmp_path / "tools"
    tools.mkdir()
    for name, path in (
        ("helm", build.ensure(("helm",))["helm"]),
        ("crane", build.ensure_component(build.CRANE)["crane"]),
        ("kubectl", Path(lc.kubectl_path())),
        ("pipx", Path(sys.executable).parent / "pipx"),
    ):
        (tools / name).symlink_to(path)
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in {"VIRTUAL_ENV", "PYTHONPATH", "KUBECONFIG"} and not key.startswith("HELM_")
    }
    env.update(
        PATH=os.pathsep.join([str(tools), str(tmp_path / "bin"), "/usr/local/bin", "/usr/bin", "/bin"]),
        KUBECONFIG=str(lab.kubeconfig),
        PIPX_HOME=str(tmp_path / "pipx"),
        PIPX_BIN_DIR=str(tmp_path / "bin"),
        PIPX_MAN_DIR=str(tmp_path / "man"),
        PIPX_DEFAULT_PYTHON=sys.executable,
    )
    return env


# Commands whose documented exit code is not 0 on the lab, and why: preflight's 3 is "some would be
# skipped" (eventedpleg preflight --help), which the lab's table says of three of its nodes.
EXPECTED_RC = {"eventedpleg preflight": 3}


def _run(cmds: list[str], cwd: Path, env: dict[str, str]) -> list[installdoc.Ran]:
    """Run `cmds` as pasted, and assert each ended with its exit code: 0, or EXPECTED_RC's."""
    text = installdoc.script(cmds, MARKER)
    done = subprocess.run(
        ["bash", "-c", text], cwd=cwd, env=env, capture_output=True, text=True, check=False, timeout=5400
    )
    ran = installdoc.split_output(done.stdout, MARKER, cmds)
    for one in ran:
        print(f"$ {one.command}  # rc {one.rc}\n{one.stdout[-3000:]}")
    print(done.stderr[-4000:])
    expected = [(cmd, EXPECTED_RC.get(cmd.split("  #")[0].strip(), 0)) for cmd in cmds]
    wrong = [f"$ {one.command}  # rc {one.rc}, expected {rc}\n{one.stdout[-1500:]}"
             for one, (_, rc) in zip(ran, expected, strict=False) if one.rc != rc]  # fmt: skip
    assert [(one.command, one.rc) for one in ran] == expected, "\n".join([*wrong, done.stderr[-1500:]])
    return ran


@pytest.fixture
def uninstalled_after(lab: Lab) -> Iterator[None]:
    """Whatever the test's end, the lab is left without the product, as the tests after it expect (they
    install their own release; one per cluster): a failure here must not turn into their setup errors."""
    yield
    # --all: a release whose uninstall failed half-way is "uninstalling", which a plain `helm list` hides.
    if RELEASE_NAME in chart.helm(lab, "list", "-A", "-q", "--all").split():
        # Deleting a NodeConfig reverts its Done nodes first (minutes): kubectl's wait is the bound.
        lab.kubectl("delete", "nodeconfigs", "--all", "--timeout=600s", timeout=660)
        chart.helm(lab, "uninstall", RELEASE_NAME, "-n", RELEASE_NS, "--wait", "--timeout=300s", timeout=360)


# One rollout of the example (its canary soaks 300 s) and one revert of the lab's nodes.
@pytest.mark.timeout(2400)
@pytest.mark.usefixtures("uninstalled_after")
def test_the_readme_install_block_and_the_notes_run_as_pasted(
    lab: Lab, lab_specs: tuple[NodeSpec, ...], released: release.ReleaseFiles, tmp_path: Path
) -> None:
    readme = (REPO / "README.md").read_text()
    cmds = installdoc.substitute(
        installdoc.commands(installdoc.readme_block(readme)), installdoc.readme_substitutions(REGISTRY)
    )
    # The release directory alone, where the block's `cd dist/VERSION` finds it.
    work = tmp_path / "work"
    shutil.copytree(released.directory, work / "dist" / released.version)
    env = _user_env(tmp_path, lab)

    ran = {one.command: one.stdout for one in _run(cmds, work, env)}
    tested = next(out for cmd, out in ran.items() if cmd.startswith("helm test"))
    assert "Phase:          Succeeded" in tested, tested
    # The CLI the block ran is the release's wheel in pipx's venv, not this checkout.
    where = shutil.which("eventedpleg", path=env["PATH"])
    assert where == str(tmp_path / "bin" / "eventedpleg"), where
    # The installed image is the release's, pulled by digest from the registry the block pushed it to.
    operators = chart.get_json(
        lab, "deployments", "-n", RELEASE_NS, "-l", "app.kubernetes.io/component=operator"
    )
    (deployment,) = operators["items"]
    image = deployment["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image == f"{REGISTRY}/evented-pleg-operator@{released.image_digest}"
    # `kubectl wait` ended: Ready for the applied generation, and every node where the lab expects it.
    body = chart.get_json(lab, "nodeconfig", chart.NODECONFIG)
    assert chart.conditions(body).get(c.ConditionType.READY.value) == "True", body.get("status")
    assert body["status"]["observedGeneration"] == body["metadata"]["generation"]
    assert chart.outcome_problems(lab_specs, lab.nodes(), body) == []

    # The NOTES of that `helm install`, each command as printed, from the same directory.
    install = next(out for cmd, out in ran.items() if cmd.startswith("helm install"))
    notes = installdoc.notes_commands(installdoc.notes(install))
    assert len(notes) >= 12, notes
    assert notes[-1] == "eventedpleg release-nodes"  # every node given back, the agents' host checks too
    _run(notes, work / "dist" / released.version, env)
    # They ended with the product gone: no release, no CRD, no host check, no node left cordoned.
    assert lab.kubectl("get", "crd", c.CRD_NAME).returncode != 0
    helm_ls = chart.helm(lab, "list", "-A", "-q")
    assert RELEASE_NAME not in helm_ls.split(), helm_ls
    for name, node in lab.nodes().items():
        annotations = node["metadata"].get("annotations") or {}
        assert protocol.ANN_HOST_CHECK not in annotations, name
        assert protocol.LABEL_STATE not in (node["metadata"].get("labels") or {}), name
        assert not node["spec"].get("unschedulable"), name
