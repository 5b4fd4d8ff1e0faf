"""The host check (core.node.phases.hostcheckphase) on simulated hosts: per kubeletConfig mode, the very
verdict
an apply turning Evented PLEG on reaches on an identical host (the real apply phase, run beside it), published
as eventedpleg.io/host-check; nothing on the host changes, an unchanged verdict is not written again within
the hour, and no check runs while an apply holds the node."""

from __future__ import annotations

import json
import logging
from datetime import timedelta

import pytest

from eventedpleg import protocol
from eventedpleg.agent import runner
from eventedpleg.agent.agent import Work, drive
from eventedpleg.agent.main import withdraw_host_check
from eventedpleg.core import hostcheck
from eventedpleg.core.agentoptions import AgentOptions
from eventedpleg.core.hostcheck import HostCheck
from eventedpleg.core.node.blocks.effects import PublishHostCheck, ReadHost, Report, is_act
from eventedpleg.core.node.phases.hostcheckphase import REFRESH
from eventedpleg.models.nodeconfig import KubeletConfigMode
from eventedpleg.protocol import NodeState
from eventedpleg_lab.sim import profiles
from tests.agent.conftest import NODE, Rig, RigFactory

MODES = tuple(KubeletConfigMode)
CLEAN = {mode.value: "" for mode in MODES}
SITE_DROPIN = "/etc/crio/crio.conf.d/99-zz-site.conf"  # sorts after our 99-eventedpleg.conf
SITE_TEXT = "# site policy\n[crio.runtime]\nenable_pod_events = false\n"


def host_check(rig: Rig) -> bool:
    return drive(rig.agent.host_check(), rig.clock.sleep)


def published(rig: Rig) -> HostCheck:
    check = hostcheck.parse(rig.annotations.get(protocol.ANN_HOST_CHECK))
    assert check is not None, rig.annotations
    return check


def apply_verdict(make_rig: RigFactory, profile: profiles.HostProfile, mode: KubeletConfigMode) -> str:
    """What the real apply phase reports on a fresh host of the same profile: the Skipped reason, or "" when
    it went ahead (whatever verification then found). Static pods allowed, as the host check allows them
    (the operator judges those from mirror pods)."""
    rig = make_rig(profile)
    rig.apply(mode=mode, options=AgentOptions(allow_static_pods=True))
    assert rig.state in (NodeState.SKIPPED, NodeState.DONE, NodeState.ROLLED_BACK), rig.annotations
    return rig.annotations[protocol.ANN_REASON] if rig.state == NodeState.SKIPPED else ""


def apply_verdicts(make_rig: RigFactory, profile: profiles.HostProfile) -> dict[str, str]:
    return {mode.value: apply_verdict(make_rig, profile, mode) for mode in MODES}


def test_a_clean_containerd_2_node_with_config_dir_would_go_ahead_in_both_modes(make_rig: RigFactory) -> None:
    profile = profiles.kubeadm_containerd()  # containerd 2.1, kubelet 1.33 with --config-dir
    rig = make_rig(profile)

    assert host_check(rig)

    check = published(rig)
    # decide: --config-dir is usable, so both modes write our drop-in there; containerd needs no file.
    assert dict(check.refusals) == CLEAN
    assert check.at == rig.clock.now().replace(microsecond=0)
    assert apply_verdicts(make_rig, profile) == CLEAN


def test_a_crio_site_drop_in_turning_pod_events_off_is_refused_as_apply_refuses_it(
    make_rig: RigFactory,
) -> None:
    profile = profiles.crio().with_(extra_files={SITE_DROPIN: SITE_TEXT})
    rig = make_rig(profile)

    host_check(rig)

    refusals = dict(published(rig).refusals)
    assert set(refusals) == set(CLEAN)
    for mode, refusal in refusals.items():
        assert "crio.conf.d/99-zz-site.conf sorts after 99-eventedpleg.conf" in refusal, mode
        assert "enable_pod_events = false" in refusal
    assert refusals == apply_verdicts(make_rig, profile)  # the Skipped reason, word for word


def test_a_default_kubeadm_node_gets_the_verdict_apply_gives(make_rig: RigFactory) -> None:
    profile = profiles.kubeadm_default()
    rig = make_rig(profile)

    host_check(rig)

    refusals = dict(published(rig).refusals)
    # DropInOnly: our kubelet.service drop-in adds --config-dir; EditConfigFile: config.yaml is edited.
    assert refusals == CLEAN
    assert refusals == apply_verdicts(make_rig, profile)


@pytest.mark.parametrize("name", sorted(profiles.PROFILES))
def test_every_simulated_layout_gets_the_verdict_apply_gives(make_rig: RigFactory, name: str) -> None:
    profile = profiles.PROFILES[name]
    rig = make_rig(profile)
    host_check(rig)
    assert dict(published(rig).refusals) == apply_verdicts(make_rig, profile)


def test_the_check_changes_nothing_on_the_host(make_rig: RigFactory) -> None:
    rig = make_rig(profiles.crio().with_(extra_files={SITE_DROPIN: SITE_TEXT}))
    before = rig.snapshot()  # every file, the agent's own state directory included

    host_check(rig)

    assert rig.snapshot() == before
    assert [type(e) for e in rig.trace if is_act(e)] == [PublishHostCheck]  # its one write, to the API
    assert rig.host.commands == [("/usr/bin/kubelet", "--version"), ("/usr/bin/kubelet", "--help")]
    assert rig.api.events == []


def test_an_unchanged_verdict_is_written_again_only_after_an_hour(make_rig: RigFactory) -> None:
    assert timedelta(hours=1) == REFRESH
    rig = make_rig(profiles.kubeadm_containerd())
    host_check(rig)
    first = published(rig)
    assert len(rig.api.patches) == 1

    rig.clock.advance(REFRESH.total_seconds() - 1)
    host_check(rig)
    assert len(rig.api.patches) == 1  # the annotation already says so: no API write
    assert published(rig) == first
    assert sum(isinstance(e, ReadHost) for e in rig.trace) == 2  # it did look

    rig.clock.advance(1)
    host_check(rig)
    assert rig.api.patches[1:] == [(NODE, {protocol.ANN_HOST_CHECK: published(rig).to_json()})]
    assert published(rig).at - first.at == REFRESH
    assert published(rig).refusals == first.refusals


def test_a_changed_verdict_is_written_at_once(make_rig: RigFactory) -> None:
    rig = make_rig(profiles.crio())
    host_check(rig)
    assert dict(published(rig).refusals) == CLEAN

    rig.path(SITE_DROPIN).write_text(SITE_TEXT)  # someone adds a site policy
    rig.clock.advance(60)
    host_check(rig)

    assert len(rig.api.patches) == 2
    assert all("99-zz-site.conf" in why for why in published(rig).refusals.values())


def test_an_annotation_from_elsewhere_is_replaced(make_rig: RigFactory) -> None:
    """A time in the future, or without a zone, is no proof of a recent check: ours replaces it."""
    rig = make_rig(profiles.kubeadm_containerd())
    for at in ("2030-01-01T00:00:00+00:00", "2026-01-01T12:00:00"):
        rig.api.annotate(NODE, {protocol.ANN_HOST_CHECK: json.dumps({"at": at, "refusals": CLEAN})})
        host_check(rig)
        assert published(rig).at == rig.clock.now().replace(microsecond=0)


@pytest.mark.parametrize("state", [NodeState.APPLYING, NodeState.VERIFYING])
def test_no_check_while_an_apply_holds_the_node(make_rig: RigFactory, state: NodeState) -> None:
    rig = make_rig(profiles.kubeadm_containerd())
    rig.api.annotate(NODE, {protocol.ANN_DESIRED: rig.publish(enabled=True), protocol.ANN_STATE: state.value})

    assert not host_check(rig)

    assert rig.trace == [] and rig.host.commands == []
    assert protocol.ANN_HOST_CHECK not in rig.annotations


@pytest.mark.parametrize(
    "state", [None, NodeState.DRAINING, NodeState.DONE, NodeState.SKIPPED, NodeState.FAILED]
)
def test_the_check_runs_in_every_other_state(make_rig: RigFactory, state: NodeState | None) -> None:
    rig = make_rig(profiles.kubeadm_containerd())
    if state is not None:
        rig.api.annotate(
            NODE, {protocol.ANN_DESIRED: rig.publish(enabled=True), protocol.ANN_STATE: state.value}
        )
    assert host_check(rig)
    assert dict(published(rig).refusals) == CLEAN


# --- in the agent's loop (agent.runner) ---------------------------------------------------------------


def test_the_loop_checks_at_start(make_rig: RigFactory) -> None:
    rig = make_rig(profiles.kubeadm_containerd())
    runner.run(rig.agent, stop=lambda: False, once=True)
    assert dict(published(rig).refusals) == CLEAN


def test_at_start_a_waiting_apply_goes_first_and_the_check_follows_it(make_rig: RigFactory) -> None:
    rig = make_rig(profiles.kubeadm_containerd())
    rig.request(rig.publish(enabled=True))  # Applying when the agent starts

    runner.run(rig.agent, stop=lambda: False, once=True)

    assert rig.state == NodeState.DONE
    looks = [i for i, e in enumerate(rig.trace) if isinstance(e, ReadHost)]
    done = next(i for i, e in enumerate(rig.trace) if isinstance(e, Report) and e.state is NodeState.DONE)
    assert len(looks) == 2 and looks[0] < done < looks[1]  # the apply's own look, then the check's
    assert published(rig).refusals


def test_a_check_held_back_by_an_apply_runs_as_soon_as_it_lets_go(make_rig: RigFactory) -> None:
    rig = make_rig(profiles.kubeadm_containerd())
    checks = runner.HostChecks(rig.agent, rig.clock.sleep)
    rig.request(rig.publish(enabled=True))
    checks.when_due()
    assert protocol.ANN_HOST_CHECK not in rig.annotations

    rig.step()  # the apply
    assert rig.state == NodeState.DONE
    checks.when_due()  # the next look between steps, not an interval later

    assert published(rig).at == rig.clock.now().replace(microsecond=0)


def test_the_loop_checks_every_interval_and_not_more_often(make_rig: RigFactory) -> None:
    rig = make_rig(profiles.kubeadm_containerd(), host_check_interval_seconds=300)
    passes = 0

    def stop() -> bool:  # asked once per pass of the loop (the watch sees no change): 60 s each
        nonlocal passes
        passes += 1
        rig.clock.advance(60)
        return passes > 11

    runner.run(rig.agent, stop=stop)

    assert sum(isinstance(e, ReadHost) for e in rig.trace) == 3  # at the first pass, 300 s and 600 s later
    assert len(rig.api.patches) == 1  # the same verdict each time, within the hour


def test_a_failing_check_never_stops_the_loop_or_an_apply(
    make_rig: RigFactory, caplog: pytest.LogCaptureFixture
) -> None:
    rig = make_rig(profiles.kubeadm_containerd())
    calls = 0

    def broken() -> Work[bool]:
        nonlocal calls
        calls += 1
        yield from ()  # a generator, as Agent.host_check is
        raise RuntimeError("host check broke")

    rig.agent.host_check = broken  # type: ignore[method-assign]
    rig.request(rig.publish(enabled=True))
    with caplog.at_level(logging.ERROR):
        runner.run(rig.agent, stop=lambda: False, once=True)

    assert calls == 1  # it ran first, and failed
    assert rig.state == NodeState.DONE  # the apply went on
    assert "host check failed; next in 300s" in caplog.text


def test_an_agent_on_its_way_out_marks_its_host_check_stopped(make_rig: RigFactory) -> None:
    """helm upgrade replaces the pod, helm uninstall deletes the DaemonSet: each agent marks its check
    stopped, keeping its verdict, so the operator knows at once; an agent started again publishes anew."""
    rig = make_rig(profiles.kubeadm_containerd())
    assert host_check(rig)
    before = hostcheck.parse(rig.annotations[protocol.ANN_HOST_CHECK])
    withdraw_host_check(rig.agent)
    after = hostcheck.parse(rig.annotations[protocol.ANN_HOST_CHECK])
    assert before is not None and after is not None and after.stopped is not None
    assert after.refusals == before.refusals and hostcheck.absence(
        rig.annotations[protocol.ANN_HOST_CHECK], after.stopped
    )
    assert host_check(rig)  # the next agent's check is news: it replaces the stopped one
    again = hostcheck.parse(rig.annotations[protocol.ANN_HOST_CHECK])
    assert again is not None and again.stopped is None


def test_withdrawing_never_raises_when_the_api_is_gone(
    make_rig: RigFactory, caplog: pytest.LogCaptureFixture
) -> None:
    rig = make_rig(profiles.kubeadm_containerd())

    def gone(*args: object, **kwargs: object) -> None:
        raise OSError("connection refused")

    rig.agent.api.patch_node_annotations = gone  # type: ignore[method-assign]
    with caplog.at_level(logging.WARNING):
        withdraw_host_check(rig.agent)
    assert "could not mark eventedpleg.io/host-check stopped: connection refused" in caplog.text
