"""Runtime support as data (core.runtimes): each profile says what docs/compatibility.md says of its
runtime, and a further profile flows through rendering, the host plan, the verdict and the agent without
code changes."""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType
from typing import cast

import pytest

from eventedpleg import constants as c
from eventedpleg.agent.hostread import runtime_of
from eventedpleg.agent.observe import Observer
from eventedpleg.core import compat, render, runtimes
from eventedpleg.core.node.blocks import eventconsumers
from eventedpleg.core.node.blocks.host import CommandResult, Host
from eventedpleg.core.node.blocks.nodeapi import AgentApi, AgentNode
from eventedpleg.core.node.facts import crioconfig
from eventedpleg.core.node.facts.hostplan import ApplyPlan, HostFacts, ManagedState, Refusal, plan_host
from eventedpleg.core.node.facts.verify import Expectation, Observation, Outcome, evaluate
from eventedpleg.core.runtimes import CONTAINERD, CRIO, DropIn, RuntimeProfile
from eventedpleg.core.versions import RuntimeKind, parse_runtime, parse_version

ROOT = Path(__file__).resolve().parents[3]
COMPAT_DOC = (ROOT / "docs" / "compatibility.md").read_text()


def section(number: int) -> str:
    start = COMPAT_DOC.index(f"\n## {number}. ")
    end = COMPAT_DOC.find("\n## ", start + 1)
    return COMPAT_DOC[start : end if end >= 0 else None]


RUNTIMES_DOC = section(2)  # "Container runtimes: containerd and CRI-O"
MEASURED_DOC = section(7)  # "What real kubelets showed"


def test_every_runtime_kind_with_an_events_api_has_one_profile_keyed_by_its_kind() -> None:
    assert set(runtimes.PROFILES) == {RuntimeKind.CONTAINERD, RuntimeKind.CRIO}
    assert all(kind is p.kind for kind, p in runtimes.PROFILES.items())
    assert runtimes.profile(RuntimeKind.OTHER) is None
    assert set(compat.RUNTIME_ROWS) == set(runtimes.PROFILES) == set(compat.PAIR_RULES)


def test_crio_profile_matches_section_2() -> None:
    dropin = CRIO.dropin
    assert dropin is not None
    # "files in `/etc/crio/crio.conf.d/` are sorted by name ... sorted last takes precedence"
    assert f"files in `{dropin.directory}/`" in RUNTIMES_DOC
    # "The valid form, which the operator writes: [crio.runtime] enable_pod_events = true"
    *table, key = dropin.setting
    assert re.search(rf"\[{re.escape('.'.join(table))}\]\n\s*{key} = true", RUNTIMES_DOC)
    # "The option is not reloadable ...: restart crio after changing it."
    assert "not reloadable" in RUNTIMES_DOC and f"restart {CRIO.unit} after changing it" in RUNTIMES_DOC
    assert CRIO.restart_on_dropin_change
    # "`crio status config` asks the running daemon ...; earlier releases have `crio-status config`"; and
    # `crio config` renders what a fresh start would load.
    assert all(f"`{' '.join(argv)}`" in RUNTIMES_DOC for argv in CRIO.config_commands)
    assert CRIO.config_commands[0] == ("crio", "status", "config") and CRIO.reads_back_config
    # §7: "its SIGUSR1 dump was never taken on a real node here, so the agent does not look there"
    assert "so the agent does not look there" in MEASURED_DOC and not CRIO.counts_subscribers
    assert (dropin.name, dropin.configmap_key) == (c.CRIO_DROPIN_NAME, c.CM_KEY_CRIO)


def test_containerd_profile_matches_section_2() -> None:
    # "1.7 implements it (containerd#7073), with no configuration switch: events are always generated"
    assert "with no configuration switch: events are always generated" in RUNTIMES_DOC
    assert CONTAINERD.dropin is None and not CONTAINERD.restart_on_dropin_change
    assert not CONTAINERD.reads_back_config and CONTAINERD.unit == "containerd"
    # §7: "so the agent looks at containerd (`core/node/blocks/eventconsumers.py`)"
    assert "so the agent looks at containerd" in MEASURED_DOC and CONTAINERD.counts_subscribers


def test_each_rendered_drop_in_sets_its_profiles_setting() -> None:
    for dropin in runtimes.dropins():
        for enabled in (True, False):
            text = render.render_file(dropin.template, enabled=enabled, owner="cluster")
            assert crioconfig.pod_events_in(tomllib.loads(text), dropin.setting) is enabled


def test_names_in_messages_come_from_the_profiles() -> None:
    assert runtimes.names() == "containerd and CRI-O"
    found = compat.verdict(compat.NodeFacts("n", "v1.34.1", "docker://24.0.7"), compat.Policy())
    assert "only containerd and CRI-O implement the events API" in found.summary


def test_no_module_branches_on_a_runtime_kind_outside_the_profiles_and_the_matrix() -> None:
    # The profiles (runtimes.py), the matrix tables by kind (compat.py), the parser (versions.py).
    allowed = {"runtimes.py", "compat.py", "versions.py"}
    package = ROOT / "operator" / "eventedpleg"
    naming = [
        str(path.relative_to(package))
        for path in package.rglob("*.py")
        if path.name not in allowed and re.search(r"RuntimeKind\.(CRIO|CONTAINERD)\b", path.read_text())
    ]
    assert naming == []
    compat_text = (package / "core" / "compat.py").read_text()
    # In compat only as keys of its tables, never in a condition.
    assert not re.search(r"(is|==|!=) RuntimeKind\.(CRIO|CONTAINERD)\b", compat_text)


def _made_up(name: str, file: str) -> DropIn:
    """The drop-in of a runtime that does not exist, in a directory of its own; it reuses CRI-O's template
    (the same setting). Its profile is `_profile(...)`."""
    return DropIn(
        directory=f"/etc/{name}/conf.d",
        name=file,
        configmap_key=f"{name}.toml",
        template=runtimes.CRIO_TEMPLATE,
        setting=("crio", "runtime", "enable_pod_events"),
        purpose=f"{name} drop-in",
    )


def _profile(kind: RuntimeKind, dropin: DropIn, commands: tuple[tuple[str, ...], ...]) -> RuntimeProfile:
    name = dropin.purpose.split()[0]
    return RuntimeProfile(
        kind=kind,
        name=name,
        unit=f"{name}d",
        dropin=dropin,
        restart_on_dropin_change=True,
        config_commands=commands,
        check_name=f"{name}Events",
        endpoint_marker=name,
        counts_subscribers=False,
        note=f"{name}: its drop-in",
    )


# A further runtime, put under containerd's kind (RuntimeKind cannot grow in a test): its own drop-in
# directory, file, ConfigMap key, unit, read-back and endpoint.
FAKE_DROPIN = _made_up("fakerun", "50-eventedpleg.toml")
FAKE = _profile(RuntimeKind.CONTAINERD, FAKE_DROPIN, (("fakerun", "config"),))
CRIO_OURS = runtimes.CRIO_DROPIN.path
KUBELET_DIR = "/etc/kubernetes/kubelet.conf.d"
HELP = "  --feature-gates mapStringBool  Options are:\n      EventedPLEG=true|false (ALPHA - default=false)\n"


@pytest.fixture
def fake() -> Iterator[None]:
    saved = runtimes.PROFILES
    runtimes.PROFILES = MappingProxyType({FAKE.kind: FAKE, CRIO.kind: CRIO})
    compat._verdict.cache_clear()
    yield
    runtimes.PROFILES = saved
    compat._verdict.cache_clear()


def host(**changes: object) -> HostFacts:
    argv = ("/usr/bin/kubelet", f"--config-dir={KUBELET_DIR}")
    base = HostFacts(
        kubelet_version=parse_version("v1.34.1"),
        runtime=parse_runtime("containerd://2.1.4"),
        running_argv=argv,
        unit_argv=argv,
        kubelet_help=HELP,
    )
    return replace(base, **changes)  # type: ignore[arg-type]


def applied(enabled: bool, facts: HostFacts, managed: ManagedState) -> ApplyPlan:
    rendered = render.render(enabled=enabled, owner="cluster", kubelet_config_mode="DropInOnly")
    result = plan_host(facts, rendered, managed, allow_static_pods=False)
    assert isinstance(result, ApplyPlan), result
    return result


@pytest.mark.usefixtures("fake")
def test_a_further_profile_is_rendered_and_read_back_from_the_configmap() -> None:
    rendered = render.render(enabled=True, owner="cluster", kubelet_config_mode="DropInOnly")
    assert sorted(key for key, _ in rendered.files) == [c.CM_KEY_CRIO, "fakerun.toml", c.CM_KEY_KUBELET]
    assert rendered.file("fakerun.toml") == rendered.file(c.CM_KEY_CRIO)
    assert render.from_configmap(rendered.configmap_data()) == rendered


@pytest.mark.usefixtures("fake")
def test_a_further_profile_drives_the_host_plan_on_and_off() -> None:
    managed = ManagedState(files={CRIO_OURS: "sha"})  # the node ran CRI-O before
    on = applied(True, host(), managed)
    rendered = render.render(enabled=True, owner="cluster", kubelet_config_mode="DropInOnly")
    changes = {ch.path: ch for ch in on.changes}
    assert changes[FAKE_DROPIN.path].content == rendered.file("fakerun.toml")
    assert changes[FAKE_DROPIN.path].purpose == "fakerun drop-in"
    assert changes[CRIO_OURS].content is None  # the other runtime's drop-in of ours goes
    assert on.restart_runtime and on.runtime_unit == "fakerund"
    assert on.expect.runtime_readback is FAKE  # it reads its config back

    ours = ((FAKE_DROPIN.name, rendered.file("fakerun.toml")),)
    off = applied(False, host(runtime_dropins=ours), ManagedState(files={FAKE_DROPIN.path: "sha"}))
    assert [(ch.path, ch.content) for ch in off.changes if ch.path.startswith("/etc/fakerun")] == [
        (FAKE_DROPIN.path, None)
    ]
    assert off.restart_runtime and off.runtime_unit == "fakerund"


@pytest.mark.usefixtures("fake")
def test_a_further_profiles_directory_is_checked_with_its_own_names() -> None:
    later = (("90-local.toml", "[crio.runtime]\nenable_pod_events = false\n"),)
    result = plan_host(
        host(runtime_dropins=later),
        render.render(enabled=True, owner="cluster", kubelet_config_mode="DropInOnly"),
        ManagedState(),
        allow_static_pods=False,
    )
    assert isinstance(result, Refusal), result
    assert result.reason.startswith("conf.d/90-local.toml sorts after 50-eventedpleg.toml and sets")
    assert result.fix == "fix or remove those files in /etc/fakerun/conf.d, then retry"
    unreadable = crioconfig.analyze_dropins((("x", None),), FAKE_DROPIN, enabling=True, runtime=FAKE.name)
    assert unreadable.blocking == ("conf.d/x is not readable text: fakerun parses every file there",)


@pytest.mark.usefixtures("fake")
def test_a_further_profile_reaches_the_verdict_the_agent_and_its_checks() -> None:
    found = compat.verdict(compat.NodeFacts("n", "v1.34.1", "containerd://2.1.4"), compat.Policy())
    assert found.targets == compat.RenderTargets(True, True, "fakerun: its drop-in")
    assert (
        "only fakerun and CRI-O implement"
        in compat.verdict(compat.NodeFacts("n", "v1.34.1", "docker://24.0.7"), compat.Policy()).summary
    )
    endpoint = ("/usr/bin/kubelet", "--container-runtime-endpoint=unix:///run/fakerun/fakerun.sock")
    guessed = runtime_of(AgentNode("n", runtime_version="garbage"), endpoint)
    assert guessed is not None and guessed.kind is FAKE.kind and guessed.raw == "containerd://unknown"
    # containerd 1.7 has one subscriber by the matrix, but this profile cannot count them.
    assert not eventconsumers.applies(parse_version("v1.34.1"), parse_runtime("containerd://1.7.27"))


def test_the_subscriber_check_follows_the_profile_and_the_matrix() -> None:
    assert eventconsumers.applies(parse_version("v1.34.1"), parse_runtime("containerd://1.7.27"))
    assert not eventconsumers.applies(parse_version("v1.34.1"), parse_runtime("containerd://2.1.4"))
    assert not eventconsumers.applies(parse_version("v1.34.1"), parse_runtime("cri-o://1.27.1"))


# A third runtime beside containerd and CRI-O, under the one kind no profile has (RuntimeKind cannot grow in
# a test): adding it is this profile alone; the renderer, the host plan and the agent's read-back take it
# as it is. It reuses CRI-O's template (the same setting), in a drop-in directory of its own.
THIRD_DROPIN = _made_up("thirdrun", "60-eventedpleg.toml")
THIRD = _profile(RuntimeKind.OTHER, THIRD_DROPIN, (("thirdrun", "status"), ("thirdrun", "config")))
THIRD_NODE = "thirdrun://0.9.1"


@pytest.fixture
def third() -> Iterator[None]:
    saved = runtimes.PROFILES
    runtimes.PROFILES = MappingProxyType({**saved, THIRD.kind: THIRD})
    yield
    runtimes.PROFILES = saved


@pytest.mark.usefixtures("third")
def test_a_third_profile_is_one_more_file_in_the_rendered_set() -> None:
    assert len(runtimes.PROFILES) == 3 and runtimes.profile_of(parse_runtime(THIRD_NODE)) is THIRD
    rendered = render.render(enabled=True, owner="cluster", kubelet_config_mode="DropInOnly")
    assert sorted(key for key, _ in rendered.files) == [c.CM_KEY_CRIO, c.CM_KEY_KUBELET, "thirdrun.toml"]
    text = rendered.file("thirdrun.toml")
    assert text is not None and crioconfig.pod_events_in(tomllib.loads(text), THIRD_DROPIN.setting) is True
    assert render.from_configmap(rendered.configmap_data()) == rendered
    assert render.render(enabled=False, owner="cluster", kubelet_config_mode="DropInOnly").files == ()


@pytest.mark.usefixtures("third")
def test_a_third_profile_gets_its_own_drop_in_restart_and_read_back_from_the_host_plan() -> None:
    rendered = render.render(enabled=True, owner="cluster", kubelet_config_mode="DropInOnly")
    on = applied(True, host(runtime=parse_runtime(THIRD_NODE)), ManagedState())
    runtime_side = [
        (ch.path, ch.content, ch.purpose) for ch in on.changes if not ch.path.startswith(KUBELET_DIR)
    ]
    assert runtime_side == [(THIRD_DROPIN.path, rendered.file("thirdrun.toml"), "thirdrun drop-in")]
    assert on.restart_runtime and on.runtime_unit == "thirdrund"
    assert on.expect.runtime_readback is THIRD

    # Its directory is checked with its own names.
    later = (("90-local.toml", "[crio.runtime]\nenable_pod_events = false\n"),)
    refused = plan_host(
        host(runtime=parse_runtime(THIRD_NODE), runtime_dropins=later),
        rendered,
        ManagedState(),
        allow_static_pods=False,
    )
    assert (
        isinstance(refused, Refusal)
        and refused.fix == f"fix or remove those files in {THIRD_DROPIN.directory}, then retry"
    )

    # Off: our file goes, the runtime restarts to read that.
    ours = ((THIRD_DROPIN.name, rendered.file("thirdrun.toml")),)
    managed = ManagedState(files={THIRD_DROPIN.path: "sha"})
    off = applied(False, host(runtime=parse_runtime(THIRD_NODE), runtime_dropins=ours), managed)
    assert [(ch.path, ch.content) for ch in off.changes] == [(THIRD_DROPIN.path, None)]
    assert off.restart_runtime and off.runtime_unit == "thirdrund"


@pytest.mark.usefixtures("third")
def test_a_third_profile_leaves_the_other_runtimes_plans_as_they_were() -> None:
    crio_node = host(runtime=parse_runtime("cri-o://1.33.2"))
    on = applied(True, crio_node, ManagedState(files={THIRD_DROPIN.path: "sha"}))  # it ran thirdrun before
    by_path = {ch.path: ch.content for ch in on.changes}
    assert by_path[THIRD_DROPIN.path] is None and by_path[CRIO_OURS] is not None
    assert on.runtime_unit == "crio" and on.expect.runtime_readback is CRIO
    containerd = applied(True, host(), ManagedState())
    assert (
        all(ch.path.startswith(KUBELET_DIR) for ch in containerd.changes) and not containerd.restart_runtime
    )


class _ConfigHost:
    """The one host call a read-back makes: `run`, which prints a config for one command only."""

    def __init__(self, answers: tuple[str, ...]) -> None:
        self.answers = answers
        self.ran: list[tuple[str, ...]] = []

    def run(self, argv: Sequence[str], *, timeout: float = 120.0) -> CommandResult:
        self.ran.append(tuple(argv))
        ok = tuple(argv) == self.answers
        return CommandResult(tuple(argv), 0 if ok else 1, "[crio.runtime]\nenable_pod_events = true\n")


def _read_back(answers: tuple[str, ...]) -> tuple[tuple[bool | None, str], list[tuple[str, ...]]]:
    host = _ConfigHost(answers)
    observer = Observer(cast(Host, host), cast(AgentApi, None), "n")
    return observer.runtime_events(THIRD), host.ran


def test_the_agent_reads_back_a_third_profiles_setting_with_its_commands_and_check_name() -> None:
    assert _read_back(("thirdrun", "config")) == (
        (True, "thirdrun config"),
        [("thirdrun", "status"), ("thirdrun", "config")],
    )
    assert _read_back(("crio", "status", "config"))[0] == (None, "thirdrun status")  # not CRI-O's commands

    expect = Expectation.enabled(THIRD)
    obs = Observation(window_seconds=60, healthz=True, runtime_events=False, runtime_source="thirdrun config")
    result = evaluate(parse_version("v1.34.1"), expect, obs, min_window=30)
    check = result.check("thirdrunEvents")
    assert check is not None and check.ok is False
    assert check.render() == "FAIL: enable_pod_events = false (thirdrun config)"
    assert result.outcome is Outcome.FAIL
