"""How the agent paces itself (the agent's command-line options). Pure data."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class AgentSettings:
    namespace: str  # where the rendered-config ConfigMaps live (the operator's namespace)
    # Verification looks this often: the node is out of service until it decides.
    poll_seconds: float = 2.0
    # How long verification watches the signals before it may PASS; capped at half the verify timeout. The
    # evidence needs no more (docs/compatibility.md, "How long verification watches"): the generic PLEG
    # relists every 1 s (genericPlegRelistPeriod, pkg/kubelet/kubelet.go), so 10 s without a relist is ten
    # missed periods (core.node.facts.verify.relist_mode); a runtime that cannot stream events makes the
    # kubelet
    # fall back at its start, after eventedPlegMaxStreamRetries = 5 failed GetContainerEvents calls made
    # back to back (pkg/kubelet/pleg/evented.go, watchEventsChannel); a later fallback (the runtime restarted
    # under the kubelet, k8s#129827) is the after-Done check's, every check interval.
    min_window_seconds: float = 10.0
    check_interval_seconds: float = 60.0
    # The guard's look at a Done node (core.node.phases.guardphase): a wedge is seen within this of its first
    # line (detection within 15 s is the goal). 0 = no guard.
    guard_interval_seconds: float = 5.0
    # The pre-cordon host check (core.node.phases.hostcheckphase), at start and then this often while no apply
    # holds the node; it runs `kubelet --version` and `kubelet --help`, so not on every check.
    host_check_interval_seconds: float = 300.0
    max_heals_per_hour: int = 3
    # After Done on containerd 1.7 with kubelet <= 1.36, look this often for a second consumer of the
    # runtime's event stream (core.node.blocks.eventconsumers; 0 = never). Each look makes containerd dump its
    # goroutine stacks into its log, so not on every check; the first look is at the first check after Done.
    event_consumer_check_seconds: float = 3600.0
    # How long one look waits for the kubelet to receive the events it needs to judge by.
    event_consumer_wait_seconds: float = 30.0
    # The eventedpleg.io/benefit figures: relists and kubelet CPU over a window of at least this length
    # while the node still served (core.node.phases.servicephase), and over one of this length once Done
    # (0 = do not measure).
    benefit_window_seconds: float = 30.0
