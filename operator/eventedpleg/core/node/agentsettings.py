"""How the agent paces itself (the agent's command-line options). Pure data."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class AgentSettings:
    namespace: str  # where the rendered-config ConfigMaps live (the operator's namespace)
    poll_seconds: float = 5.0
    # How long verification watches the signals before it may PASS (the 300 s vs 1 s relist contrast is
    # visible within seconds; 30 s leaves room for a late fallback). Capped at half the verify timeout.
    min_window_seconds: float = 30.0
    check_interval_seconds: float = 60.0
    # The pre-cordon host check (core.node.hostcheckphase), at start and then this often while no apply
    # holds the node; it runs `kubelet --version` and `kubelet --help`, so not on every check.
    host_check_interval_seconds: float = 300.0
    max_heals_per_hour: int = 3
    # The eventedpleg.io/benefit figures: relists and kubelet CPU over a window of this length before the
    # change (steady kubelet) and again once verification passed (0 = do not measure).
    benefit_window_seconds: float = 30.0
