"""eventedpleg_lab.lab.installdoc: the README's install block and the NOTES' commands as the lab runs them,
with only the declared substitutions made (tests/lab/test_lab_readme_install.py runs them)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from eventedpleg_lab.lab import installdoc
from eventedpleg_lab.lab.installdoc import InstallDocError, Substitution

REPO = Path(__file__).resolve().parents[4]
REGISTRY = "172.16.77.1:5000"


def test_the_readme_block_with_the_lab_substitutions() -> None:
    readme = (REPO / "README.md").read_text()
    block = installdoc.commands(installdoc.readme_block(readme))
    ran = installdoc.substitute(block, installdoc.readme_substitutions(REGISTRY))
    # Exactly one command dropped (the build from a checkout), the others kept in order.
    assert len(ran) == len(block) - 1
    assert block[0].startswith("sudo bash hack/release.sh ")
    assert ran[0].startswith("cd dist/") and "sha256sum -c SHA256SUMS" in ran[0]
    assert not any("registry.example" in cmd or "hack/" in cmd or cmd.startswith("sudo") for cmd in ran)
    push = next(cmd for cmd in ran if cmd.startswith("crane push"))
    assert push.startswith(f"crane push --insecure image {REGISTRY}/evented-pleg-operator:")
    install = next(cmd for cmd in ran if cmd.startswith("helm install"))
    assert f"--set image.repository={REGISTRY}/evented-pleg-operator" in install and "\\" not in install
    # What the block applies is in the release directory (hack/release.sh copies it there).
    assert "kubectl apply -f nodeconfig.yaml" in "\n".join(ran)
    assert 'cp examples/nodeconfig.yaml "$out/nodeconfig.yaml"' in (REPO / "hack" / "release.sh").read_text()
    assert ran[-1].startswith("kubectl wait --for=condition=Ready nodeconfig/cluster")


def test_a_substitution_that_matches_nothing_is_an_error() -> None:
    with pytest.raises(InstallDocError, match="matches no command"):
        installdoc.substitute(["helm list"], [Substitution(r"registry\.nowhere", "x", "why")])


def test_no_block_no_section() -> None:
    with pytest.raises(InstallDocError, match="no section"):
        installdoc.readme_block("# nothing\n")
    with pytest.raises(InstallDocError, match="no ```bash block"):
        installdoc.readme_block("\n### Install and watch\n\ntext only\n")


def test_continuations_join_and_blank_lines_go() -> None:
    block = "a --x \\\n  --y\n\nb  # note\n"
    assert installdoc.commands(block) == ["a --x --y", "b  # note"]


def test_notes_commands_in_order() -> None:
    out = "NAME: epo\nSTATUS: deployed\nNOTES:\nNext:\n  operator  Deployment x\n     helm test epo -n s\n" \
          "text kubectl in prose\n     kubectl apply -f nodeconfig.yaml\n"  # fmt: skip
    assert installdoc.notes_commands(installdoc.notes(out)) == [
        "helm test epo -n s",
        "kubectl apply -f nodeconfig.yaml",
    ]
    with pytest.raises(InstallDocError):
        installdoc.notes("NAME: epo\n")


def test_the_script_runs_on_after_a_failure_and_splits_by_command(tmp_path: Path) -> None:
    marker = "@@ install-step"
    cmds = [
        "echo one",
        "echo why >&2; (exit 3)  # a trailing comment",
        "cd sub && printf 'two\\nthree\\n'",
        "basename $PWD",
    ]
    (tmp_path / "sub").mkdir()
    text = installdoc.script(cmds, marker)
    done = subprocess.run(["bash", "-c", text], capture_output=True, text=True, check=False, cwd=tmp_path)
    # Each command's stderr is in its own output; a `cd` holds for the commands after it, as when pasted.
    assert installdoc.split_output(done.stdout, marker, cmds) == [
        installdoc.Ran("echo one", "one\n", 0),
        installdoc.Ran(cmds[1], "why\n", 3),
        installdoc.Ran(cmds[2], "two\nthree\n", 0),
        installdoc.Ran(cmds[3], "sub\n", 0),
    ]
    # A command that never ended (the run was cut off) has no exit code.
    cut = f"{marker} 0\npartial output\n"
    assert installdoc.split_output(cut, marker, cmds[:1]) == [
        installdoc.Ran("echo one", "partial output\n", None)
    ]
