"""The compatibility matrix as data, and the pure verdict for one node.

Every row cites where its rule comes from: the upstream change, and the section of docs/compatibility.md
that explains it.
Levels: Supported nodes are rolled out; Risky nodes only when the NodeConfig sets `allowRisky: true`;
Unsupported nodes are never touched. The gate is Alpha in every release, so "Supported" means "the
combination we recommend", not "GA". A row may be Supported only with the guard on (`unguarded`: why it is
Risky with `spec.guard.enabled: false`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from functools import lru_cache
from typing import TYPE_CHECKING

from eventedpleg import constants as c
from eventedpleg.core import runtimes
from eventedpleg.core.versions import (
    RuntimeKind,
    RuntimeVersion,
    Version,
    VersionError,
    parse_runtime,
    parse_version,
)

if TYPE_CHECKING:
    from eventedpleg.models.nodeconfig import NodeConfigSpec

Triple = tuple[int, int, int]
INFINITY: Triple = (999, 0, 0)


class Level(StrEnum):
    SUPPORTED = "Supported"
    RISKY = "Risky"
    UNSUPPORTED = "Unsupported"

    @property
    def rank(self) -> int:
        return {Level.SUPPORTED: 0, Level.RISKY: 1, Level.UNSUPPORTED: 2}[self]


@dataclass(frozen=True)
class Row:
    """Versions in [low, high) of one component get `level` for `reason`."""

    component: str
    low: Triple
    high: Triple
    level: Level
    reason: str
    source: str
    one_event_consumer: bool = (
        False  # each container event goes to one consumer only (core.node.blocks.eventconsumers)
    )
    # Known bugs that do not change the level but an administrator should know of (preflight notes).
    advisories: tuple[str, ...] = ()
    # Not "" where the level holds only with the guard on (spec.guard): the Risky reason with it off.
    unguarded: str = ""

    def matches(self, version: Version) -> bool:
        triple = (version.major, version.minor, version.patch)
        return self.low <= triple < self.high


# Open kubelet bugs of the <=1.36 evented path, fixed by nothing but 1.37's redesign (k8s#139262), which no
# longer builds pod statuses from events. Neither loses a container exit nor touches the runtime.
KUBELET_136_ADVISORY = (
    "kubelet <= 1.36 with EventedPLEG has open bugs with no fix on its branch: a relist whose runtime "
    "calls time out leaves a nil cache entry that the evented path dereferences, so the kubelet panics "
    "and restarts (k8s#128654); pods with sidecar (restartable init) containers can stay Pending until "
    "the next relist, up to 300 s (k8s#133371); 1.37 (k8s#139262) no longer has either code path"
)

# Read at v1.36.4 and seen on this project's real-node rig (docs/compatibility.md "kubelet-pleg-wedge",
# bench/podstart.py); no upstream report found. Users feel it as a node that starts no pod: a note, as the
# level speaks of runtimes crashing and exits lost, and a restart of the kubelet brings it back.
KUBELET_136_WEDGE_ADVISORY = (
    "kubelet <= 1.36 with EventedPLEG can stop starting and stopping pods until it is restarted: when a "
    "burst of pod churn fills its PLEG channel (1000 events), the EventedPLEG health check fails, and "
    "the sync loop, which skips every pass while a health check fails, never drains the channel again "
    "('Skipping pod synchronization ... EventedPLEG is not healthy' every 5 s; pkg/kubelet/pleg/evented.go "
    "Healthy, kubelet.go syncLoop, v1.36.4); `systemctl restart kubelet` recovers it; 1.37 has no such check"
)

# What users feel, measured by bench/podstart.py and bench/enablecost.py (docs/benchmarks.md §2), so that
# preflight says it where the README's first screen does. The restarts' cause: docs/compatibility.md
# "kubelet-136-missed-restarts".
KUBELET_136_FEEL_ADVISORY = (
    "measured with the gate on under kubelet 1.36.4 (docs/benchmarks.md §2): deleting pods takes about 3 to "
    "5 times longer (k8s#124704); a container restarted after it was killed was often not shown Running "
    "again within 2 minutes on containerd 2.2 (never with the gate off): when the GC removes an old sandbox "
    "of a running pod, the evented path drops the pod's whole cached status, so the kubelet remakes the "
    "pod's sandbox and containers, or shows the pod waiting while its container runs until the next full "
    "relist, up to 300 s (pleg/evented.go processCRIEvents, v1.36.4); a burst of 100 pods on CRI-O 1.36 "
    "reached Running about 1.5 times slower; a container's exit reaches the pod's status 3 to 7 times sooner"
)

# The wedge stops a node's pods from syncing until the kubelet restarts, and a NotReady node has its pods
# evicted after 300 s: only the guard (the agent's watch after Done, core/node/phases) bounds how long.
KUBELET_136_UNGUARDED = (
    "kubelet {v} with EventedPLEG can stop syncing pods until it is restarted (the PLEG channel wedge) and "
    "spec.guard.enabled is false, so a wedged node is neither healed nor rolled back (it stays so until "
    "someone restarts its kubelet; NotReady past 300 s, its pods are evicted); set spec.guard.enabled: true "
    "(the default) to have it Supported"
)

# With the guard on, preflight says what it does and what turning it off would make of the node.
KUBELET_136_GUARDED = (
    "kubelet {v} is Supported only with the guard on (spec.guard.enabled, the default): after Done its "
    "agent watches the node for the PLEG channel wedge, restarts the kubelet within seconds and proves it "
    "syncs pods again, and rolls the node back to generic PLEG after spec.guard.incidentsBeforeRollback "
    "incidents (2) within spec.guard.windowSeconds (24 h); with the guard off it is Risky"
)

KUBELET_ROWS: tuple[Row, ...] = (
    Row(
        "kubelet",
        (0, 0, 0),
        (1, 26, 0),
        Level.UNSUPPORTED,
        "kubelet {v} does not know the EventedPLEG gate: writing it makes the kubelet exit with "
        "'unrecognized feature gate: EventedPLEG' and the node goes NotReady",
        "feature_gate.go unsafeSetFromMap; gate added in 1.26 by k8s#111384; docs/compatibility.md §1",
    ),
    Row(
        "kubelet",
        (1, 26, 0),
        (1, 27, 0),
        Level.UNSUPPORTED,
        "kubelet 1.26 starts duplicate containers with EventedPLEG (k8s#121003); the fix k8s#120942 was "
        "never backported to 1.26",
        "k8s#121003, k8s#120942 (1.26 cherry-pick k8s#121355 unmerged); docs/compatibility.md §5",
    ),
    Row(
        "kubelet",
        (1, 27, 0),
        (1, 27, 10),
        Level.UNSUPPORTED,
        "kubelet {v} is a beta-era EventedPLEG build (k8s#115967) with the static-pod duplicate-container "
        "bug that caused the revert (k8s#121349, #122697); upgrade to 1.27.10 or later",
        "revert k8s#122697, backport k8s#122720 (first Alpha 1.27 patch likely 1.27.10, not confirmed); "
        "docs/compatibility.md §1",
    ),
    Row(
        "kubelet",
        (1, 27, 10),
        (1, 28, 0),
        Level.RISKY,
        "kubelet {v}: alpha EventedPLEG after the revert, but without the later static-pod and "
        "nanosecond-timestamp mitigations (k8s#124297, #127195)",
        "k8s#122720, k8s#124297, k8s#127195; docs/compatibility.md §1, §5",
    ),
    Row(
        "kubelet",
        (1, 28, 0),
        (1, 28, 6),
        Level.UNSUPPORTED,
        "kubelet {v} is a beta-era EventedPLEG build (k8s#115967); upgrade to 1.28.6 or later",
        "revert k8s#122697, backport k8s#122719; docs/compatibility.md §1",
    ),
    Row(
        "kubelet",
        (1, 28, 6),
        (1, 29, 0),
        Level.RISKY,
        "kubelet {v}: alpha EventedPLEG without the later static-pod and timestamp mitigations "
        "(k8s#124297, #127195)",
        "k8s#122719, k8s#124297, k8s#127195; docs/compatibility.md §1, §5",
    ),
    Row(
        "kubelet",
        (1, 29, 0),
        (1, 29, 1),
        Level.UNSUPPORTED,
        "kubelet 1.29.0 is a beta-era EventedPLEG build (k8s#115967); upgrade to 1.29.1 or later",
        "backport k8s#122718 (CHANGELOG-1.29, v1.29.1); docs/compatibility.md §1",
    ),
    Row(
        "kubelet",
        (1, 29, 1),
        (1, 32, 0),
        Level.RISKY,
        "kubelet {v}: alpha; lacks the nanosecond PodSandboxStatus timestamp fix (k8s#127195, ~1.32), so "
        "stale cache timestamps are possible (k8s#127814)",
        "k8s#127195, k8s#127814; docs/compatibility.md §5",
    ),
    Row(
        "kubelet",
        (1, 32, 0),
        (1, 37, 0),
        Level.SUPPORTED,
        "kubelet {v}: alpha gate; while the event stream is healthy the generic relist slows from 1 s to "
        "300 s, which is where the CPU saving comes from",
        "kubelet.go eventedPlegRelistPeriod = 300s (v1.36.4); docs/compatibility.md §4",
        advisories=(KUBELET_136_ADVISORY, KUBELET_136_WEDGE_ADVISORY, KUBELET_136_FEEL_ADVISORY),
        unguarded=KUBELET_136_UNGUARDED,
    ),
    Row(
        "kubelet",
        (1, 37, 0),
        (1, 38, 0),
        Level.SUPPORTED,
        "kubelet {v}: narrowed design (k8s#139262): the generic relist stays at 1 s and alone writes the "
        "pod cache; a container-stopped event only asks for an early relist of its pod (v1.37.2 asks on "
        "every stop, clean exits included), so there is NO steady-state CPU saving, only faster "
        "detection of container exits",
        "k8s#139262; evented.go processCRIEvents and evented_test.go 'stopped clean exit requests relist' "
        "(v1.37.2); enhancements#6311; docs/compatibility.md §1",
    ),
    Row(
        "kubelet",
        (1, 38, 0),
        INFINITY,
        Level.RISKY,
        "kubelet {v} is newer than this matrix (checked up to 1.37.2, where the gate is still registered); "
        "no merged change removes the gate: the one removal attempt (k8s#129567) was closed, and k8s#140849 "
        "removes leftover code of the old design, not the gate; the agent checks `kubelet --help` for the "
        "gate before writing it",
        "kube_features.go EventedPLEG (v1.37.2); k8s#129567 (closed unmerged); k8s#140849 (open, clean-up); "
        "docs/compatibility.md §1 (re-check each release)",
    ),
)

# KEP-4033: kubelets get the cgroup driver from the runtime's RuntimeConfig (GA and locked in 1.34); the
# fallback to the kubelet's own cgroupDriver, still in v1.37.2 (cmd/kubelet/app/server.go), is planned to
# go in 1.38 (enhancements#6087; k8s#136731). containerd 1.7 has no RuntimeConfig (added in 2.0.0).
KUBELET_WITHOUT_CGROUP_FALLBACK = (1, 38)
KUBELET_138_CONTAINERD_17 = (
    "containerd 1.7 has no RuntimeConfig (added in containerd 2.0.0): KEP-4033 plans to drop the "
    "kubelet's cgroupDriver fallback in 1.38 (enhancements#6087; removal k8s#136731), after which a "
    "kubelet >= 1.38 does not start on this runtime at all; upgrade containerd to 2.0.9 or later first"
)

# A container whose exit comes while containerd restarts (its CRI plugin reloading containers) can stay
# Running for ever (containerd#10390): the exit monitor started before the container was in the store.
# The agent restarts containerd to apply Evented PLEG, so this is exactly the moment it brings about.
RESTART_LOSES_EXITS = (
    "a container exiting while containerd restarts (the agent restarts it) can be reported Running for "
    "ever (containerd#10390; fixed by containerd#11579 in 2.1.0, backported in 2.0.9 and 1.7.34)"
)

CONTAINERD_ROWS: tuple[Row, ...] = (
    Row(
        "containerd",
        (0, 0, 0),
        (1, 7, 0),
        Level.UNSUPPORTED,
        "containerd {v} answers GetContainerEvents with Unimplemented: the kubelet would silently fall "
        "back to polling",
        "containerd v1.6.39 pkg/cri/server/container_events.go; docs/compatibility.md §2",
    ),
    Row(
        "containerd",
        (1, 7, 0),
        (1, 7, 34),
        Level.RISKY,
        "containerd {v} has a single event subscriber: any other consumer (e.g. `crictl events`) takes "
        f"events away from the kubelet (containerd#7318); and {RESTART_LOSES_EXITS}; upgrade to 2.0.9 "
        "or later",
        "containerd#7318, containerd#10390, backport containerd#11634 (v1.7.34); "
        "docs/compatibility.md §2, §5",
        one_event_consumer=True,
    ),
    Row(
        "containerd",
        (1, 7, 34),
        (2, 0, 0),
        Level.RISKY,
        "containerd {v} has a single event subscriber: any other consumer (e.g. `crictl events`) takes "
        "events away from the kubelet (containerd#7318); upgrade to 2.0.9 or later",
        "containerd#7318; docs/compatibility.md §2, §5",
        one_event_consumer=True,
    ),
    Row(
        "containerd",
        (2, 0, 0),
        (2, 0, 3),
        Level.UNSUPPORTED,
        "containerd {v} has the PodSandboxStatus timestamp regression that breaks Evented PLEG "
        "(containerd#11312, k8s#129818); upgrade to 2.0.9 or later",
        "containerd#11312, fixed by containerd#11323 / #11403; docs/compatibility.md §2",
    ),
    Row(
        "containerd",
        (2, 0, 3),
        (2, 0, 9),
        Level.RISKY,
        f"containerd {{v}}: {RESTART_LOSES_EXITS}; upgrade to 2.0.9 or later",
        "containerd#10390, backport containerd#11633 (v2.0.9); docs/compatibility.md §2, §5",
    ),
    Row(
        "containerd",
        (2, 0, 9),
        INFINITY,
        Level.SUPPORTED,
        "containerd {v} always emits container events to several subscribers; nothing to configure",
        "containerd#9661, containerd#11579 (v2.1.0, v2.0.9); docs/compatibility.md §2",
    ),
)

CRIO_ROWS: tuple[Row, ...] = (
    Row(
        "cri-o",
        (0, 0, 0),
        (1, 26, 0),
        Level.UNSUPPORTED,
        "CRI-O {v} cannot emit container events (enable_pod_events arrived in 1.26, cri-o#6404)",
        "cri-o#6404; docs/compatibility.md §2",
    ),
    Row(
        "cri-o",
        (1, 26, 0),
        (1, 28, 0),
        Level.RISKY,
        "CRI-O {v} delivers events to one consumer only (broadcast since 1.28, cri-o#6838)",
        "cri-o#6838; docs/compatibility.md §2, §5",
        one_event_consumer=True,
    ),
    Row(
        "cri-o",
        (1, 28, 0),
        (1, 33, 0),
        Level.RISKY,
        "CRI-O {v} can panic in GetContainerEvents ('sync: negative WaitGroup counter') when an event "
        "client goes away while events flow, as the kubelet does when the agent restarts it (cri-o#9004); "
        "fixed in 1.33.0 (cri-o#9014), not backported to 1.32 or older",
        "cri-o#9004, fix cri-o#9014 (32854c9d, first in v1.33.0); docs/compatibility.md §2, §5",
    ),
    Row(
        "cri-o",
        (1, 33, 0),
        (1, 35, 0),
        Level.SUPPORTED,
        "CRI-O {v}: enable_pod_events in a crio.conf.d drop-in, then restart crio and the kubelet; "
        "under kubelets <= 1.36 Risky instead (empty container statuses in events, cri-o#9663)",
        "cri-o#9014, cri-o#9663 (29b33f11, first in v1.35.0); docs/compatibility.md §2, §5",
    ),
    Row(
        "cri-o",
        (1, 35, 0),
        INFINITY,
        Level.SUPPORTED,
        "CRI-O {v}: enable_pod_events in a crio.conf.d drop-in, then restart crio and the kubelet",
        "cri-o#6838, cri-o#9014, cri-o#9663, crio.conf.d(5); docs/compatibility.md §2",
    ),
)

# The matrix of each runtime kind with an events API (core.runtimes has one profile per such kind).
RUNTIME_ROWS: Mapping[RuntimeKind, tuple[Row, ...]] = {
    RuntimeKind.CONTAINERD: CONTAINERD_ROWS,
    RuntimeKind.CRIO: CRIO_ROWS,
}

# CRI-O 1.31.0 to 1.34.x fill a ContainerEventResponse's container statuses by index and leave a nil where
# a container went away between ListContainers and ContainerStatus (server/server.go getContainerStatuses,
# v1.34.0); on the wire it arrives as an empty ContainerStatus whose Image is nil, which the <= 1.36 evented
# path dereferences (GeneratePodStatus -> convertToKubeContainerStatus) and the kubelet panics. Fixed in
# 1.35.0 by cri-o#9663, not backported; 1.37 kubelets no longer build statuses from events (k8s#139262).
CRIO_NIL_STATUS = ((1, 31, 0), (1, 35, 0))
KUBELET_BUILDS_STATUS_FROM_EVENTS_BELOW = (1, 37)


def crio_sends_nil_statuses(version: Version) -> bool:
    triple = (version.major, version.minor, version.patch)
    return CRIO_NIL_STATUS[0] <= triple < CRIO_NIL_STATUS[1]


# CRI-O switched PodSandboxStatus timestamps to nanoseconds in these patch levels (cri-o#8582); the kubelet
# expects nanoseconds from ~1.32 (k8s#127195). A mismatch gives bogus cache timestamps (k8s#127814).
CRIO_NANOSECOND_FIRST: Mapping[tuple[int, int], int] = {(1, 29): 9, (1, 30): 6, (1, 31): 1}
KUBELET_NANOSECOND_MINOR = (1, 32)


def crio_uses_nanoseconds(version: Version) -> bool:
    first_patch = CRIO_NANOSECOND_FIRST.get(version.minor_pair)
    if first_patch is not None:
        return version.patch >= first_patch
    return version.minor_pair >= (1, 32)


@dataclass(frozen=True)
class NodeFacts:
    """What the operator can see of a node through the API (status.nodeInfo, labels, taints, pods)."""

    name: str
    kubelet_version: str
    runtime_version: str
    operating_system: str = "linux"
    os_image: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    taint_keys: tuple[str, ...] = ()
    has_mirror_pods: bool = False
    created: datetime | None = None  # metadata.creationTimestamp (spec.rollout.order: OldestFirst)


@dataclass(frozen=True)
class Policy:
    """The parts of NodeConfig.spec that change a verdict."""

    include_control_plane: bool = False
    allow_risky: bool = False
    runtime: str = "auto"  # auto | containerd | cri-o
    guard: bool = True  # spec.guard.enabled, or nothing to guard (eventedPleg: false turns the gate off)

    @classmethod
    def of(cls, spec: NodeConfigSpec) -> Policy:
        return cls(
            spec.include_control_plane,
            spec.allow_risky,
            spec.runtime.value,
            guard=spec.guard.enabled or not spec.evented_pleg,
        )


@dataclass(frozen=True)
class RenderTargets:
    """What a node of this kind gets written (the plan says so explicitly, also when it is nothing)."""

    kubelet_dropin: bool
    runtime_dropin: bool  # the runtime gets a drop-in of its profile (CRI-O)
    runtime_note: str


@dataclass(frozen=True)
class Verdict:
    level: Level
    reasons: tuple[str, ...]
    kubelet: Version | None
    runtime: RuntimeVersion | None
    targets: RenderTargets | None
    notes: tuple[str, ...] = ()  # the reasons below the level, then the advisories
    advisories: tuple[str, ...] = ()  # known bugs that do not change the level (preflight prints them)

    def eligible(self, policy: Policy) -> bool:
        return self.level is Level.SUPPORTED or (self.level is Level.RISKY and policy.allow_risky)

    @property
    def summary(self) -> str:
        return "; ".join(self.reasons)


def _row_for(rows: tuple[Row, ...], version: Version) -> Row:
    for row in rows:
        if row.matches(version):
            return row
    raise AssertionError(f"matrix has a gap at {version}")  # rows cover 0.0.0 to infinity


def one_event_consumer(runtime: RuntimeVersion | None) -> bool:
    """Whether the matrix's row for this runtime says each container event goes to one consumer only."""
    rows = None if runtime is None else RUNTIME_ROWS.get(runtime.kind)
    if rows is None or runtime is None or runtime.version is None:
        return False
    return _row_for(rows, runtime.version).one_event_consumer


CONTROL_PLANE_KEYS = (c.LABEL_CONTROL_PLANE, c.LABEL_MASTER_LEGACY)


def _is_control_plane(facts: NodeFacts) -> bool:
    # Asked for every node on every pass: no sets built here (they showed in the 5000-node profile).
    labels = facts.labels
    return any(key in labels for key in CONTROL_PLANE_KEYS) or any(
        key in CONTROL_PLANE_KEYS for key in facts.taint_keys
    )


def _targets(runtime: RuntimeVersion) -> RenderTargets:
    found = runtimes.profile_of(runtime)
    if found is None:
        raise ValueError(f"no runtime profile for {runtime.raw!r}")
    return RenderTargets(True, found.dropin is not None, found.note)


def verdict(facts: NodeFacts, policy: Policy) -> Verdict:
    """Supported / Risky / Unsupported for one node, with every reason that applies (worst level wins).

    Memoised on what decides it: a fleet has a handful of distinct version combinations, and the planner
    asks for every node on every pass (5000 nodes at ~25 us each would be 125 ms a pass).
    """
    key = _Key(
        facts.kubelet_version,
        facts.runtime_version,
        facts.operating_system,
        _is_control_plane(facts),
        facts.has_mirror_pods,
    )
    return _verdict(key, policy)


IN_PLACE_STATIC_PODS = (
    "static pods: a kubelet restarted under them starts their containers twice (k8s#123087)"
)


def in_place_refusal(facts: NodeFacts, found: Verdict) -> str:
    """Why the node must be drained first although spec.drain.mode is InPlace ("" when it need not be).

    In place, the kubelet restarts under running pods with the gate newly on (or off). Known bugs make
    that unsafe on static-pod nodes (a restarted kubelet starts their containers twice: k8s#123087, still
    open; k8s#121349) and on the versions the matrix does not call Supported: kubelets before 1.32 lack
    the timestamp fix (k8s#127195), 1.26-1.28 the duplicate-container fix (k8s#120942, k8s#121003), and
    Risky runtimes have their own (containerd 1.7: one event subscriber, containerd#7318; containerd before
    2.0.9 loses exits across the very restart an in-place update makes, containerd#10390).
    """
    if _is_control_plane(facts) or facts.has_mirror_pods:
        return IN_PLACE_STATIC_PODS
    if found.level is not Level.SUPPORTED:
        return f"only Supported nodes are updated in place; this one is {found.level.value}: {found.summary}"
    return ""


@dataclass(frozen=True)
class _Key:
    kubelet_version: str
    runtime_version: str
    operating_system: str
    control_plane: bool
    has_mirror_pods: bool


Findings = tuple[list[tuple[Level, str]], list[str]]  # (level, reason) findings, advisories


def _crio_pair(kubelet: Version, runtime: Version) -> Findings:
    findings: list[tuple[Level, str]] = []
    if crio_sends_nil_statuses(runtime) and kubelet.minor_pair < KUBELET_BUILDS_STATUS_FROM_EVENTS_BELOW:
        findings.append(
            (
                Level.RISKY,
                f"CRI-O {runtime} can send container events with an empty container status, which "
                f"kubelet {kubelet} dereferences and panics on (cri-o#9663, fixed in CRI-O 1.35.0, "
                "not backported; 1.37 kubelets are not affected)",
            )
        )
    if (kubelet.minor_pair >= KUBELET_NANOSECOND_MINOR) != crio_uses_nanoseconds(runtime):
        findings.append(
            (
                Level.RISKY,
                f"kubelet {kubelet} and CRI-O {runtime} disagree on PodSandboxStatus timestamp "
                "units (k8s#127195, cri-o#8582): stuck pod statuses are possible (k8s#127814)",
            )
        )
    return findings, []


def _containerd_pair(kubelet: Version, runtime: Version) -> Findings:
    if runtime.minor_pair == (1, 7) and kubelet.minor_pair >= KUBELET_WITHOUT_CGROUP_FALLBACK:
        return [], [KUBELET_138_CONTAINERD_17]
    return [], []


# What a kubelet and a runtime version of each kind do wrong together (beside RUNTIME_ROWS).
PAIR_RULES: Mapping[RuntimeKind, Callable[[Version, Version], Findings]] = {
    RuntimeKind.CONTAINERD: _containerd_pair,
    RuntimeKind.CRIO: _crio_pair,
}


def _pair(kubelet: Version, kind: RuntimeKind, runtime: Version) -> Findings:
    """What this kubelet and this runtime version do wrong together (findings, advisories)."""
    rule = PAIR_RULES.get(kind)
    return rule(kubelet, runtime) if rule is not None else ([], [])


def _kubelet(text: str, policy: Policy) -> tuple[Version | None, Findings]:
    """The kubelet's version and what its row (and the guard, spec.guard) say of it."""
    try:
        kubelet = parse_version(text)
    except VersionError as exc:
        return None, ([(Level.UNSUPPORTED, f"kubeletVersion: {exc}")], [])
    row = _row_for(KUBELET_ROWS, kubelet)
    findings = [(row.level, row.reason.format(v=kubelet))]
    advisories = list(row.advisories)
    if row.unguarded and not policy.guard:
        findings.append((Level.RISKY, row.unguarded.format(v=kubelet)))
    elif row.unguarded:
        advisories.append(KUBELET_136_GUARDED.format(v=kubelet))
    if kubelet.prerelease:
        findings.append((Level.RISKY, f"kubelet {kubelet} is a pre-release build"))
    return kubelet, (findings, advisories)


@lru_cache(maxsize=4096)
def _verdict(facts: _Key, policy: Policy) -> Verdict:
    findings: list[tuple[Level, str]] = []

    def bad(level: Level, reason: str) -> None:
        findings.append((level, reason))

    if facts.operating_system and facts.operating_system.lower() != "linux":
        bad(
            Level.UNSUPPORTED, f"operating system {facts.operating_system!r}: Evented PLEG is Linux-only here"
        )

    kubelet, (kubelet_findings, advisories) = _kubelet(facts.kubelet_version, policy)
    findings += kubelet_findings

    runtime: RuntimeVersion | None = None
    try:
        runtime = parse_runtime(facts.runtime_version)
    except VersionError as exc:
        bad(Level.UNSUPPORTED, f"containerRuntimeVersion: {exc}")
    if runtime is not None:
        rows = RUNTIME_ROWS.get(runtime.kind)
        if rows is None or runtime.version is None:
            bad(
                Level.UNSUPPORTED,
                f"runtime {runtime.raw!r}: only {runtimes.names()} implement the events API",
            )
        else:
            row = _row_for(rows, runtime.version)
            findings.append((row.level, row.reason.format(v=runtime.version)))
            advisories += row.advisories
            if policy.runtime not in ("auto", runtime.kind.value):
                bad(
                    Level.UNSUPPORTED,
                    f"spec.runtime is {policy.runtime} but the node reports {runtime.raw}",
                )
        if runtime.version is not None and kubelet is not None:
            pair_findings, pair_advisories = _pair(kubelet, runtime.kind, runtime.version)
            findings += pair_findings
            advisories += pair_advisories

    if facts.control_plane or facts.has_mirror_pods:
        what = "control-plane node" if facts.control_plane else "node runs static (mirror) pods"
        if policy.include_control_plane:
            findings.append((Level.SUPPORTED, f"{what}: included by includeControlPlane (k8s#123087 risk)"))
        else:
            bad(
                Level.UNSUPPORTED,
                f"{what}: static pods get duplicate containers with EventedPLEG (k8s#121349, #123087); "
                "set includeControlPlane: true to opt in",
            )

    level = max((level for level, _ in findings), key=lambda lv: lv.rank, default=Level.UNSUPPORTED)
    # What decides the level are the reasons; the rest are notes (shown by preflight, not in status).
    reasons = tuple(reason for lv, reason in findings if lv is level)
    notes = tuple(reason for lv, reason in findings if lv is not level) + tuple(advisories)
    usable_runtime = runtime if runtimes.profile_of(runtime) is not None else None
    targets = (
        _targets(usable_runtime) if usable_runtime is not None and level is not Level.UNSUPPORTED else None
    )
    return Verdict(level, reasons, kubelet, runtime, targets, notes, tuple(advisories))
