"""Every way the read-only commands (and the operator's and agent's start) can fail to reach or read the API
server gives ONE line on stderr, no traceback, and the documented exit code (eventedpleg.cli.failures); -v
adds the traceback. Against a real kube-apiserver with RBAC and real ServiceAccount tokens.

The module runs its own control plane: the missing-CRD rows need a cluster where the CRD was never
installed, and the shared one has it as soon as any rollout or chart test ran."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import yaml

if TYPE_CHECKING:
    from eventedpleg_lab.localcluster.cluster import LocalCluster

pytestmark = pytest.mark.cluster
REPO = Path(__file__).resolve().parents[2]
USAGE, API, NOT_FOUND = 2, 5, 6


@pytest.fixture(scope="module")
def bare(cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A second control plane of the same kind as the session's, without the NodeConfig CRD."""
    with type(cluster)(tmp_path_factory.mktemp("bare")) as local:
        yield local


@pytest.fixture(scope="module")
def kubeconfigs(bare: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("kubeconfigs")
    admin = yaml.safe_load(bare.kubeconfig.read_text())

    def write(name: str, doc: object) -> Path:
        path = out / name
        path.write_text(doc if isinstance(doc, str) else yaml.safe_dump(doc))
        return path

    with socket.socket() as probe:  # a port nobody listens on once closed
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    unreachable = yaml.safe_load(bare.kubeconfig.read_text())
    unreachable["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{closed_port}"
    no_context = {**admin, "current-context": "gone"}
    nobody = bare.service_account_kubeconfig("cli-errors", "nobody")  # a real token, no RBAC rights
    bad_token = yaml.safe_load(nobody.read_text())
    bad_token["users"][0]["user"]["token"] = "not-a-token"
    return {
        "admin": bare.kubeconfig,
        "unreachable": write("unreachable", unreachable),
        "missing": out / "does-not-exist",
        "garbage": write("garbage", "garbage: [unclosed\n"),
        "not-a-kubeconfig": write("scalar", "just a string\n"),
        "no-context": write("no-context", no_context),
        "forbidden": nobody,
        "unauthorized": write("unauthorized", bad_token),
    }


def run(*args: str, kubeconfig: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "HOME": str(kubeconfig.parent)}
    return subprocess.run(
        [sys.executable, "-m", "eventedpleg", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env=env,
    )


def one_line(result: subprocess.CompletedProcess[str]) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: "), lines[0]
    assert "Traceback" not in result.stderr + result.stdout
    return lines[0]


COMMANDS = {
    "status": ["status"],
    "preflight": ["preflight", "--nodeconfig", "cluster"],
    "render": ["render", "--node", "node-0"],
    "retry": ["retry", "cluster"],
}
KUBECONFIG_CASES = [
    ("unreachable", API, "cannot reach the API server: [Errno 111] Connection refused (https://127.0.0.1:"),
    ("missing", USAGE, "no usable kubeconfig: "),
    ("garbage", USAGE, "no usable kubeconfig: while parsing a flow sequence"),
    ("not-a-kubeconfig", USAGE, "no usable kubeconfig: not a kubeconfig"),
    ("no-context", USAGE, "Expected object with name gone"),
    ("forbidden", API, "RBAC denies it (403): "),
    ("unauthorized", API, "the API server did not accept the credentials (401)"),
]


@pytest.mark.parametrize("case,code,text", KUBECONFIG_CASES, ids=[c[0] for c in KUBECONFIG_CASES])
@pytest.mark.parametrize("command", list(COMMANDS))
def test_cli_reach_and_credential_failures_are_one_line(
    kubeconfigs: dict[str, Path], command: str, case: str, code: int, text: str
) -> None:
    result = run(*COMMANDS[command], kubeconfig=kubeconfigs[case])
    line = one_line(result)
    assert text in line
    assert result.returncode == code, (result.returncode, line)
    if case == "forbidden":
        assert "system:serviceaccount:cli-errors:nobody" in line  # the API server's own words


def test_cli_missing_crd_is_told_apart_from_a_missing_nodeconfig(
    bare: LocalCluster, kubeconfigs: dict[str, Path]
) -> None:
    admin = kubeconfigs["admin"]
    for args in (["status"], ["status", "other"], ["preflight", "--nodeconfig", "cluster"], ["retry"]):
        result = run(*args, kubeconfig=admin)
        line = one_line(result)
        assert "NodeConfig CRD (nodeconfigs.eventedpleg.io) is not installed: kubectl apply -f crds/" in line
        assert result.returncode == NOT_FOUND

    bare.apply_crd(path=REPO / "crds", name="nodeconfigs.eventedpleg.io")
    for args in (["status", "nope"], ["preflight", "--nodeconfig", "nope"], ["retry", "nope"]):
        result = run(*args, kubeconfig=admin)
        assert one_line(result) == "error: NodeConfig 'nope' not found (kubectl get nodeconfigs)"
        assert result.returncode == NOT_FOUND
    result = run("render", "--node", "nope", kubeconfig=admin)
    assert one_line(result) == "error: node 'nope' not found (kubectl get nodes)"
    assert result.returncode == NOT_FOUND


def test_cli_verbose_adds_the_traceback(kubeconfigs: dict[str, Path]) -> None:
    for args in (["-v", "status"], ["status", "-v"], ["status", "--verbose"]):
        result = run(*args, kubeconfig=kubeconfigs["unreachable"])
        assert result.returncode == API
        assert "Traceback (most recent call last)" in result.stderr
        assert "MaxRetryError" in result.stderr
        assert result.stderr.strip().splitlines()[-1].startswith("error: cannot reach the API server")


@pytest.mark.parametrize(
    "case,code,text",
    [
        ("unreachable", API, "cannot reach the API server"),
        ("garbage", USAGE, "no usable kubeconfig"),
        ("missing", USAGE, "no usable kubeconfig"),
    ],
)
def test_cli_operator_start_fails_in_one_line(
    kubeconfigs: dict[str, Path], case: str, code: int, text: str
) -> None:
    result = run("operator", "--namespace", "cli-errors", "--metrics-port", "0", kubeconfig=kubeconfigs[case])
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and text in errors[0], result.stderr
    assert "Traceback" not in result.stderr
    assert result.returncode == code


@pytest.mark.parametrize("case", ["garbage", "missing", "no-context"])
def test_cli_agent_start_fails_in_one_line(kubeconfigs: dict[str, Path], case: str) -> None:
    result = run("agent", "--node", "node-0", "--once", kubeconfig=kubeconfigs[case])
    assert one_line(result).startswith("error: no usable kubeconfig")
    assert result.returncode == USAGE


PROBE = """
import sys
from click.testing import CliRunner
from eventedpleg.cli import main
result = CliRunner().invoke(main, sys.argv[1:])
print(result.exit_code, sorted(m for m in sys.modules if m.endswith("_v1_api") or m in ("kopf", "jinja2")))
"""


def test_cli_reads_skip_the_generated_api_classes(bare: LocalCluster, kubeconfigs: dict[str, Path]) -> None:
    """CoreV1Api builds hundreds of pydantic models on first use (seconds); the read-only commands GET the
    JSON directly (eventedpleg.k8s.client.get_json)."""
    env = {**os.environ, "KUBECONFIG": str(kubeconfigs["admin"])}
    for args in (["status", "nope"], ["preflight"], ["render", "--node", "nope"]):
        out = subprocess.run(
            [sys.executable, "-c", PROBE, *args], capture_output=True, text=True, env=env, check=True
        ).stdout.strip()
        code, _, modules = out.partition(" ")
        assert code in ("4", "6"), out  # the command really talked to the API server
        assert modules == "[]", (args, modules)
