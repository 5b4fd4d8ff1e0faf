"""The compatibility matrix: one case per row of docs/compatibility.md §0, plus malformed input."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from eventedpleg.core import compat
from eventedpleg.core.compat import Level, NodeFacts, Policy
from eventedpleg.core.versions import RuntimeKind, Version, VersionError, parse_runtime, parse_version
from eventedpleg.models.nodeconfig import NodeConfigSpec

GOOD_RUNTIME = "containerd://2.1.4"
GOOD_KUBELET = "v1.34.2"
S, R, U = Level.SUPPORTED, Level.RISKY, Level.UNSUPPORTED


def node(kubelet: str = GOOD_KUBELET, runtime: str = GOOD_RUNTIME, **kw: object) -> NodeFacts:
    return NodeFacts(name="n1", kubelet_version=kubelet, runtime_version=runtime, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kubelet", "level", "needle"),
    [
        ("v1.24.17", U, "unrecognized feature gate"),
        ("v1.25.16", U, "unrecognized feature gate"),
        ("v1.26.0", U, "121003"),
        ("v1.26.15", U, "121003"),
        ("v1.27.0", U, "beta-era"),
        ("v1.27.9", U, "beta-era"),  # the backport most likely missed 1.27.9 (docs/compatibility.md §1)
        ("v1.27.10", R, "alpha EventedPLEG after the revert"),
        ("v1.28.0", U, "beta-era"),
        ("v1.28.5", U, "beta-era"),
        ("v1.28.6", R, "alpha EventedPLEG"),
        ("v1.29.0", U, "beta-era"),
        ("v1.29.1", R, "nanosecond"),
        ("v1.30.14", R, "nanosecond"),
        ("v1.31.9", R, "nanosecond"),
        ("v1.32.0", S, "300 s"),
        ("v1.36.4", S, "300 s"),
        ("v1.37.2", S, "NO steady-state CPU saving"),
        ("v1.38.0", R, "newer than this matrix"),
        ("v1.40.1", R, "newer than this matrix"),
    ],
)
def test_kubelet_rows(kubelet: str, level: Level, needle: str) -> None:
    v = compat.verdict(node(kubelet=kubelet), Policy())
    assert v.level is level, v.reasons
    assert needle in v.summary


@pytest.mark.parametrize(
    ("runtime", "level", "needle"),
    [
        ("containerd://1.6.39", U, "Unimplemented"),
        ("containerd://1.7.0", R, "single event subscriber"),
        ("containerd://1.7.13", R, "containerd#10390"),  # exits lost across a containerd restart
        ("containerd://1.7.33", R, "containerd#10390"),
        ("containerd://1.7.34", R, "containerd#7318"),  # backport containerd#11634
        ("containerd://1.7.35", R, "single event subscriber"),
        ("containerd://2.0.0", U, "timestamp regression"),
        ("containerd://2.0.2", U, "containerd#11312"),
        ("containerd://2.0.3", R, "containerd#10390"),
        ("containerd://2.0.8", R, "reported Running for ever"),
        ("containerd://2.0.9", S, "several subscribers"),  # backport containerd#11633
        ("containerd://2.1.0", S, "several subscribers"),  # containerd#11579
        ("containerd://2.2.7", S, "several subscribers"),
        ("cri-o://1.25.4", U, "enable_pod_events arrived in 1.26"),
        ("cri-o://1.26.0", R, "one consumer"),
        ("cri-o://1.27.9", R, "one consumer"),
        ("cri-o://1.28.0", R, "cri-o#9004"),  # GetContainerEvents WaitGroup panic
        ("cri-o://1.32.13", R, "negative WaitGroup counter"),
        ("cri-o://1.33.0", R, "cri-o#9663"),  # fixed cri-o#9004, but nil statuses under kubelet 1.34
        ("cri-o://1.34.11", R, "cri-o#9663"),
        ("cri-o://1.35.0", S, "enable_pod_events"),
        ("cri-o://1.36.3", S, "enable_pod_events"),
        ("docker://24.0.7", U, "only containerd and CRI-O"),
    ],
)
def test_runtime_rows(runtime: str, level: Level, needle: str) -> None:
    v = compat.verdict(node(runtime=runtime), Policy())
    assert v.level is level, v.reasons
    assert needle in v.summary


@pytest.mark.parametrize(
    ("kubelet", "crio", "mismatch"),
    [
        ("v1.34.2", "cri-o://1.34.1", False),  # both nanoseconds
        ("v1.32.0", "cri-o://1.31.1", False),  # first nanosecond 1.31 patch
        ("v1.32.0", "cri-o://1.31.0", True),  # kubelet ns, CRI-O seconds (k8s#127814)
        ("v1.33.1", "cri-o://1.29.8", True),
        ("v1.33.1", "cri-o://1.29.9", False),
        ("v1.33.1", "cri-o://1.30.6", False),
        ("v1.33.1", "cri-o://1.28.4", True),
        ("v1.31.9", "cri-o://1.28.4", False),  # both seconds
    ],
)
def test_crio_timestamp_units_must_match_the_kubelet(kubelet: str, crio: str, mismatch: bool) -> None:
    v = compat.verdict(node(kubelet=kubelet, runtime=crio), Policy())
    said = [text for text in v.reasons + v.notes if "timestamp units" in text]
    assert bool(said) is mismatch, v
    if mismatch:
        assert v.level is not S


@pytest.mark.parametrize(
    ("kubelet", "crio", "level"),
    [
        # cri-o#9663: CRI-O 1.31.0-1.34.x may send nil container statuses; kubelets <= 1.36 dereference them.
        ("v1.36.4", "cri-o://1.34.0", R),
        ("v1.36.4", "cri-o://1.33.0", R),
        ("v1.32.0", "cri-o://1.34.11", R),
        ("v1.36.4", "cri-o://1.35.0", S),  # first release with cri-o#9663
        ("v1.36.4", "cri-o://1.36.3", S),
        ("v1.37.0", "cri-o://1.34.0", S),  # 1.37 no longer builds statuses from events (k8s#139262)
        ("v1.37.2", "cri-o://1.33.0", S),
        ("v1.37.2", "cri-o://1.32.13", R),  # but cri-o#9004 (the crash in CRI-O) stays
    ],
)
def test_crio_nil_container_statuses_under_old_kubelets(kubelet: str, crio: str, level: Level) -> None:
    v = compat.verdict(node(kubelet=kubelet, runtime=crio), Policy())
    assert v.level is level, v.reasons
    blamed = any("dereferences and panics" in text for text in v.reasons)
    assert blamed is (level is R and crio != "cri-o://1.32.13"), v.reasons


@pytest.mark.parametrize(
    ("kubelet", "runtime", "advised"),
    [
        ("v1.38.0", "containerd://1.7.35", True),  # KEP-4033: no cgroupDriver fallback planned in 1.38
        ("v1.39.2", "containerd://1.7.0", True),
        ("v1.37.2", "containerd://1.7.35", False),  # the fallback is still in v1.37.2
        ("v1.38.0", "containerd://2.0.9", False),  # RuntimeConfig since containerd 2.0.0
        ("v1.38.0", "cri-o://1.36.3", False),
    ],
)
def test_kubelet_138_on_containerd_17_is_noted(kubelet: str, runtime: str, advised: bool) -> None:
    v = compat.verdict(node(kubelet=kubelet, runtime=runtime), Policy())
    noted = [text for text in v.advisories if "KEP-4033" in text]
    assert bool(noted) is advised, v.advisories
    assert all(text in v.notes for text in v.advisories)


@pytest.mark.parametrize(
    ("kubelet", "advised"),
    [("v1.31.9", False), ("v1.32.0", True), ("v1.36.4", True), ("v1.37.0", False), ("v1.37.2", False)],
)
def test_open_kubelet_bugs_before_137_are_advisories_not_levels(kubelet: str, advised: bool) -> None:
    v = compat.verdict(node(kubelet=kubelet), Policy())
    noted = [text for text in v.advisories if "k8s#128654" in text and "k8s#133371" in text]
    assert bool(noted) is advised, v.advisories
    wedged = [text for text in v.advisories if "EventedPLEG is not healthy" in text and "restart" in text]
    assert bool(wedged) is advised, v.advisories
    felt = [text for text in v.advisories if "k8s#124704" in text and "docs/benchmarks.md" in text]
    assert bool(felt) is advised, v.advisories
    if advised:
        assert v.level is S  # no lost exit, no runtime crash: the verdict names them, it does not drop


@pytest.mark.parametrize(
    ("kubelet", "guarded"),
    [
        ("v1.31.9", False),  # Risky anyway, for its own reason
        ("v1.32.0", True),
        ("v1.36.4", True),
        ("v1.37.0", False),  # no wedge: the 1.37 redesign has no EventedPLEG health check
        ("v1.37.2", False),
    ],
)
def test_kubelets_that_can_wedge_are_supported_only_with_the_guard(kubelet: str, guarded: bool) -> None:
    on = compat.verdict(node(kubelet=kubelet), Policy())
    off = compat.verdict(node(kubelet=kubelet), Policy(guard=False))
    if not guarded:
        assert off == on  # the guard changes nothing here
        assert not [text for text in on.notes if "spec.guard" in text]
        return
    assert on.level is S, on.reasons
    assert on.eligible(Policy())
    said = [text for text in on.advisories if "Supported only with the guard on" in text]
    assert len(said) == 1 and "spec.guard.enabled" in said[0] and "rolls the node back" in said[0], said
    assert off.level is R, off.reasons
    assert not off.eligible(Policy(guard=False))
    assert off.eligible(Policy(guard=False, allow_risky=True))
    assert "spec.guard.enabled: true" in off.summary and kubelet.lstrip("v") in off.summary
    assert not any("Supported only with the guard on" in text for text in off.notes)


def test_the_guard_off_makes_risky_worse_never_better() -> None:
    """An Unsupported node stays Unsupported without the guard; a Risky runtime keeps its reason too."""
    unsupported = compat.verdict(node(kubelet="v1.36.4", runtime="containerd://1.6.39"), Policy(guard=False))
    assert unsupported.level is U
    risky = compat.verdict(node(kubelet="v1.36.4", runtime="containerd://1.7.13"), Policy(guard=False))
    assert risky.level is R
    assert "containerd#10390" in risky.summary and "spec.guard.enabled" in risky.summary


@pytest.mark.parametrize(
    ("spec", "guard"),
    [
        ({"eventedPleg": True}, True),
        ({"eventedPleg": True, "guard": {"enabled": False}}, False),
        # Turning the gate off needs no guard: the nodes are taken back to generic PLEG whatever it says.
        ({"eventedPleg": False, "guard": {"enabled": False}}, True),
    ],
)
def test_policy_of_the_spec_carries_the_guard(spec: dict[str, Any], guard: bool) -> None:
    policy = Policy.of(NodeConfigSpec.model_validate({**spec, "allowRisky": True, "runtime": "cri-o"}))
    assert policy == Policy(allow_risky=True, runtime="cri-o", guard=guard)


@pytest.mark.parametrize(
    ("kubelet", "expected"),
    [
        ("v1.30.2-eks-abc123", Version(1, 30, 2)),
        ("v1.31.0+k3s1", Version(1, 31, 0)),
        ("1.33.4", Version(1, 33, 4)),
        ("v1.37.0-rc.1", Version(1, 37, 0, "rc.1")),
        ("v1.34", Version(1, 34, 0)),
    ],
)
def test_distro_version_strings_parse(kubelet: str, expected: Version) -> None:
    assert parse_version(kubelet) == expected


@pytest.mark.parametrize("garbage", ["", "   ", "latest", "vX.Y.Z", "v.1.30", "kubelet"])
def test_malformed_kubelet_version_is_a_clear_unsupported(garbage: str) -> None:
    with pytest.raises(VersionError):
        parse_version(garbage)
    v = compat.verdict(node(kubelet=garbage), Policy())
    assert v.level is U
    assert "kubeletVersion: cannot read a version" in v.summary
    assert v.targets is None


@pytest.mark.parametrize("garbage", ["", "containerd", "containerd://", "cri-o://next"])
def test_malformed_runtime_version_is_a_clear_unsupported(garbage: str) -> None:
    v = compat.verdict(node(runtime=garbage), Policy())
    assert v.level is U
    assert "containerRuntimeVersion" in v.summary


def test_runtime_parse() -> None:
    assert parse_runtime("containerd://1.7.13-0ubuntu1").version == Version(1, 7, 13)
    assert parse_runtime("cri-o://1.30.4").kind is RuntimeKind.CRIO
    assert parse_runtime("docker://24.0.7").kind is RuntimeKind.OTHER


def test_pre_release_kubelet_is_risky_at_best() -> None:
    assert compat.verdict(node(kubelet="v1.36.0-rc.0"), Policy()).level is R


@pytest.mark.parametrize(
    "facts",
    [
        {"labels": {"node-role.kubernetes.io/control-plane": ""}},
        {"labels": {"node-role.kubernetes.io/master": ""}},
        {"taint_keys": ("node-role.kubernetes.io/control-plane",)},
        {"has_mirror_pods": True},
    ],
)
def test_control_plane_and_static_pod_nodes_are_excluded_unless_opted_in(facts: dict[str, Any]) -> None:
    excluded = compat.verdict(node(**facts), Policy())
    assert excluded.level is U
    assert "includeControlPlane" in excluded.summary
    included = compat.verdict(node(**facts), Policy(include_control_plane=True))
    assert included.level is S
    assert "123087" in included.summary


def test_windows_nodes_are_unsupported() -> None:
    assert compat.verdict(node(operating_system="windows"), Policy()).level is U


def test_spec_runtime_must_match_the_node() -> None:
    v = compat.verdict(node(runtime="cri-o://1.36.3"), Policy(runtime="containerd"))
    assert v.level is U
    assert "spec.runtime is containerd" in v.summary
    assert compat.verdict(node(runtime="cri-o://1.36.3"), Policy(runtime="cri-o")).level is S


def test_risky_nodes_need_the_opt_in() -> None:
    v = compat.verdict(node(runtime="containerd://1.7.13"), Policy())
    assert not v.eligible(Policy())
    assert v.eligible(Policy(allow_risky=True))
    unsupported = compat.verdict(node(kubelet="v1.25.0"), Policy())
    assert not unsupported.eligible(Policy(allow_risky=True))


def test_render_targets_say_what_each_runtime_gets() -> None:
    crio = compat.verdict(node(runtime="cri-o://1.36.3"), Policy()).targets
    containerd = compat.verdict(node(), Policy()).targets
    assert crio is not None and crio.runtime_dropin and crio.kubelet_dropin
    assert containerd is not None and not containerd.runtime_dropin
    assert "nothing to write" in containerd.runtime_note


def test_worst_reason_leads() -> None:
    v = compat.verdict(node(kubelet="v1.25.0", runtime="containerd://1.7.1"), Policy())
    assert v.level is U
    assert "unrecognized feature gate" in v.reasons[0]


def test_rows_cover_every_version_without_gaps_or_overlaps() -> None:
    for rows in (compat.KUBELET_ROWS, compat.CONTAINERD_ROWS, compat.CRIO_ROWS):
        assert rows[0].low == (0, 0, 0)
        assert rows[-1].high == compat.INFINITY
        for before, after in itertools.pairwise(rows):
            assert before.high == after.low
        assert all(row.source for row in rows)


def test_in_place_only_on_supported_nodes_without_static_pods() -> None:
    policy = compat.Policy(allow_risky=True, include_control_plane=True)

    def refusal(kubelet: str, runtime: str, **facts: Any) -> str:
        node = compat.NodeFacts("n", kubelet, runtime, **facts)
        return compat.in_place_refusal(node, compat.verdict(node, policy))

    assert refusal("v1.36.4", "containerd://2.2.9") == ""
    assert refusal("v1.37.2", "cri-o://1.34.1") == ""
    assert "Risky" in refusal("v1.36.4", "containerd://1.7.35")  # one event subscriber (containerd#7318)
    assert "Risky" in refusal("v1.31.4", "containerd://2.2.9")  # no timestamp fix (k8s#127195)
    assert "Risky" in refusal("v1.36.4", "containerd://2.0.8")  # exits lost across a restart (#10390)
    assert "Risky" in refusal("v1.36.4", "cri-o://1.34.0")  # nil container statuses (cri-o#9663)
    assert "k8s#123087" in refusal("v1.36.4", "containerd://2.2.9", has_mirror_pods=True)
    assert "k8s#123087" in refusal(
        "v1.36.4", "containerd://2.2.9", labels={"node-role.kubernetes.io/control-plane": ""}
    )
