"""The lab's commands fail like the product's: one line on stderr, `error: ...`, a documented exit code, no
traceback (`demo --lab` on a fresh machine once ended in FileNotFoundError for /bin/busybox)."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from eventedpleg.cli import main
from eventedpleg.cli.failures import EXIT_SETUP
from eventedpleg_lab.lab import assets
from eventedpleg_lab.lab.lab import Lab


def run(argv: list[str]) -> tuple[int, str]:
    result = CliRunner().invoke(main, argv, prog_name="eventedpleg")
    assert not isinstance(result.exception, Exception) or isinstance(result.exception, SystemExit), (
        result.exception
    )
    return result.exit_code, result.stderr


def fail_prepare(exc: BaseException) -> Callable[[Lab, object], None]:
    def prepare(self: Lab, specs: object) -> None:
        raise exc

    return prepare


@pytest.mark.parametrize(
    ("exc", "line"),
    [
        (FileNotFoundError(2, "No such file or directory", "/bin/busybox"),
         "error: No such file or directory: /bin/busybox"),
        (assets.AssetError("mmdebstrap failed (exit 1); see /c/logs/lab-rootfs.log:\nE: no space\nmore"),
         "error: mmdebstrap failed (exit 1); see /c/logs/lab-rootfs.log: (-v for more)"),
        (subprocess.CalledProcessError(2, ["dpkg-deb", "-x", "a.deb", "/x"]),
         "error: dpkg-deb -x a.deb /x failed (exit 2)"),
    ],
)  # fmt: skip
def test_a_setup_failure_is_one_line_and_exit_7(
    monkeypatch: pytest.MonkeyPatch, exc: BaseException, line: str
) -> None:
    monkeypatch.setattr(Lab, "prepare", fail_prepare(exc))
    code, stderr = run(["lab", "build"])
    assert code == EXIT_SETUP == 7
    assert stderr.strip() == line
    assert "Traceback" not in stderr


def test_verbose_adds_the_traceback_and_keeps_the_code(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Lab, "prepare", fail_prepare(FileNotFoundError(2, "No such file", "/bin/busybox")))
    code, stderr = run(["-v", "lab", "build"])
    assert code == EXIT_SETUP
    assert "Traceback" in stderr and stderr.strip().endswith("error: No such file: /bin/busybox")


def test_a_bad_option_is_still_a_usage_error() -> None:
    code, stderr = run(["lab", "build", "--nodes", "n1:1.99:containerd-2.2"])
    assert code == 2
    assert "--nodes" in stderr


def test_the_lab_installs_busybox_when_the_host_lacks_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """What `realnode build` installed for the test command, the lab now installs for itself."""
    busybox = tmp_path / "busybox"
    installed: list[list[str]] = []

    def apt_install(packages: list[str], log: object) -> None:
        installed.append(packages)
        busybox.write_bytes(b"")

    monkeypatch.setattr(assets, "BUSYBOX", busybox)
    monkeypatch.setattr(assets, "_apt_install", apt_install)
    assert assets.ensure_busybox(lambda _m: None) == busybox
    assert installed == [["busybox-static"]]
    assets.ensure_busybox(lambda _m: None)  # present now: nothing installed again
    assert installed == [["busybox-static"]]


def test_no_apt_get_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(assets, "BUSYBOX", tmp_path / "busybox")
    monkeypatch.setattr("shutil.which", lambda _name: None)
    with pytest.raises(assets.AssetError, match="no apt-get"):
        assets.ensure_busybox(lambda _m: None)
