"""How the kubelet is started: /proc cmdline, kubeadm's unit drop-in and env files (docs/compatibility.md
§3)."""

from __future__ import annotations

import pytest

from eventedpleg.core.node.facts.kubeletflags import (
    expand_exec,
    gate_listed_in_help,
    parse_cmdline,
    parse_env_file,
    parse_environ,
    parse_flags,
    parse_units,
    unit_environment,
)

KUBEADM_DROPIN = """\
# Note: This dropin only works with kubeadm and kubelet v1.11+
[Service]
Environment="KUBELET_KUBECONFIG_ARGS=--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf --kubeconfig=/etc/kubernetes/kubelet.conf"
Environment="KUBELET_CONFIG_ARGS=--config=/var/lib/kubelet/config.yaml"
EnvironmentFile=-/var/lib/kubelet/kubeadm-flags.env
EnvironmentFile=-/etc/default/kubelet
ExecStart=
ExecStart=/usr/bin/kubelet $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS $KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS
"""  # noqa: E501 - verbatim kubeadm drop-in
UNIT = "[Unit]\nDescription=kubelet\n[Service]\nExecStart=/usr/bin/kubelet\nRestart=always\n"


def test_cmdline_and_environ_are_nul_separated() -> None:
    assert parse_cmdline(b"/usr/bin/kubelet\0--config=/x\0--v=2\0") == (
        "/usr/bin/kubelet",
        "--config=/x",
        "--v=2",
    )
    assert parse_environ(b"PATH=/bin\0KUBELET_CONFIG_DROPIN_DIR_ALPHA=on\0junk\0") == {
        "PATH": "/bin",
        "KUBELET_CONFIG_DROPIN_DIR_ALPHA": "on",
    }


def test_env_file_quotes_and_comments() -> None:
    text = "# comment\nKUBELET_EXTRA_ARGS=\"--config-dir=/d --v=2\"\nexport A='b c'\n; other\nBROKEN\n"
    assert parse_env_file(text) == {"KUBELET_EXTRA_ARGS": "--config-dir=/d --v=2", "A": "b c"}


def test_kubeadm_unit_expands_to_the_real_command_line() -> None:
    unit = parse_units([UNIT, KUBEADM_DROPIN])
    assert [f.path for f in unit.environment_files] == [
        "/var/lib/kubelet/kubeadm-flags.env",
        "/etc/default/kubelet",
    ]
    env_files = {
        "/var/lib/kubelet/kubeadm-flags.env": 'KUBELET_KUBEADM_ARGS="--container-runtime-endpoint=unix:///c.sock"\n',
        "/etc/default/kubelet": 'KUBELET_EXTRA_ARGS="--config-dir=/etc/kubernetes/kubelet.conf.d --v=2"\n',
    }
    argv = expand_exec(unit.exec_start, unit_environment(unit, env_files))
    assert argv == (
        "/usr/bin/kubelet",
        "--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf",
        "--kubeconfig=/etc/kubernetes/kubelet.conf",
        "--config=/var/lib/kubelet/config.yaml",
        "--container-runtime-endpoint=unix:///c.sock",
        "--config-dir=/etc/kubernetes/kubelet.conf.d",
        "--v=2",
    )


def test_env_files_override_environment_and_missing_optional_files_are_fine() -> None:
    unit = parse_units(["[Service]\nEnvironment=A=1 B=2\nEnvironmentFile=-/missing\nEnvironmentFile=/f\n"])
    assert unit_environment(unit, {"/f": "B=3\n"}) == {"A": "1", "B": "3"}


def test_braced_variables_stay_one_word() -> None:
    assert expand_exec(["/k", "${A}", "$A", "--x=$B"], {"A": "a b", "B": "c"}) == (
        "/k",
        "a b",
        "a",
        "b",
        "--x=c",
    )


@pytest.mark.parametrize(
    ("argv", "config", "config_dir", "gates", "verbosity"),
    [
        (["k", "--config=/c", "--config-dir=/d", "--v=4"], "/c", "/d", {}, 4),
        (["k", "--config", "/c", "--config_dir", "/d"], "/c", "/d", {}, None),
        (
            ["k", "--feature-gates=EventedPLEG=true,Foo=false", "--feature-gates", "AllAlpha=true"],
            None,
            None,
            {"EventedPLEG": True, "Foo": False, "AllAlpha": True},
            None,
        ),
        (["k", "--feature-gates=EventedPLEG=maybe"], None, None, {}, None),
        (["k", "--config"], None, None, {}, None),
    ],
)
def test_flags(
    argv: list[str], config: str | None, config_dir: str | None, gates: dict[str, bool], verbosity: int | None
) -> None:
    flags = parse_flags(argv)
    assert (flags.config, flags.config_dir, flags.gates, flags.verbosity) == (
        config,
        config_dir,
        gates,
        verbosity,
    )


def test_gate_listed_in_help_uses_the_feature_gate_format() -> None:
    help_text = (
        "      --feature-gates mapStringBool  A set of key=value pairs ... Options are:\n"
        "                                     AllAlpha=true|false (ALPHA - default=false)\n"
        "                                     EventedPLEG=true|false (ALPHA - default=false)\n"
    )
    assert gate_listed_in_help(help_text, "EventedPLEG")
    assert not gate_listed_in_help(help_text.replace("EventedPLEG=", "NotEventedPLEG="), "EventedPLEG")
    assert not gate_listed_in_help("EventedPLEG is mentioned in prose only", "EventedPLEG")
