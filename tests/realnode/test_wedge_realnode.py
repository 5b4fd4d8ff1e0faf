"""The PLEG-channel wedge made on demand on a REAL kubelet (eventedpleg_lab.realnode.wedge; `realnode`).

kubelet v1.36.4 with the gate meets the trigger and stops syncing pods: its "Skipping pod synchronization
... EventedPLEG is not healthy" line, the discard counter, and a `kubelet_pleg_last_seen_seconds` that no
longer follows the sync loop; a kubelet restart clears it and a new pod starts. v1.37.2 meets the same
trigger, logs no such line and starts the new pod (it registers no EventedPLEG health check).
"""

from __future__ import annotations

import pytest

from eventedpleg_lab.realnode import config as cfg
from eventedpleg_lab.realnode import layout as lay
from eventedpleg_lab.realnode import rig as rn
from eventedpleg_lab.realnode import wedge as wg

pytestmark = [pytest.mark.realnode, pytest.mark.slow]

PODS = 2
# A healthy sync loop runs its health checks at least once a second (syncTicker), each refreshing the
# gauge; a wedged one refreshes it only with the last relist, every 300 s with the gate on.
STALE_SECONDS = 10.0


def _new_pod_starts(node: rn.RealNode) -> None:
    """One more static pod, up to a running container: only a sync loop that runs starts it (bounded)."""
    name = f"{cfg.idle_pod_name(PODS)}-{cfg.NODE_NAME}"  # a static pod's name ends with its node's
    node.set_pods(PODS + 1)

    def running() -> bool:
        return any(ctr.get("labels", {}).get("io.kubernetes.pod.name") == name for ctr in node.containers())

    node.wait(running, 180, f"{name} running")


def test_136_wedges_on_demand_and_a_kubelet_restart_clears_it(node: rn.RealNode) -> None:
    node.up(rn.RigSpec(kubelet="1.36", gate=True, pods=PODS))
    try:
        fired = wg.fire(node)
        assert fired.wedged, f"no wedge line within {wg.WATCH_SECONDS:.0f}s:\n{node.tail()}"
        assert wg.SKIP_LINE in fired.line and wg.FULL_LINE in fired.line

        # The metrics say so too: the channel overflowed, and the last healthy PLEG check stays behind.
        def stale() -> bool:
            pleg = wg.PlegMetrics.poll(node)
            return pleg is not None and pleg.last_seen_age_s > STALE_SECONDS

        node.wait(stale, 60, "a stale PLEG last-seen")
        wedged = wg.PlegMetrics.read(node)
        assert wedged.discards > 0
        assert len(wg.wedge_lines(node, fired.offset)) >= 2  # still skipping: nothing drained the channel

        # Only a restart brings it back, once the burst's cause is gone (restarted over the same 1100
        # exited containers, before its container GC removed them, it wedged again), and then the sync
        # loop starts pods again.
        wg.clear(node)
        healed_from = node.layout.at(lay.KUBELET_LOG).stat().st_size
        node.restart_kubelet()
        _new_pod_starts(node)
        assert not wg.wedge_lines(node, healed_from)
        assert wg.PlegMetrics.read(node).last_seen_age_s < STALE_SECONDS
    finally:
        wg.clear(node)


def test_137_meets_the_same_trigger_and_keeps_syncing_pods(node: rn.RealNode) -> None:
    node.up(rn.RigSpec(kubelet="1.37", gate=True, pods=PODS))
    try:
        fired = wg.fire(node, watch=0)

        # The same replay reached it: 4 CRI events per container (created, started, stopped, removed),
        # of which the few sent while the old subscription was closing may be lost.
        def replayed() -> bool:
            pleg = wg.PlegMetrics.poll(node)
            return pleg is not None and pleg.events_seen >= 3 * fired.containers

        node.wait(replayed, 120, "the replayed events")
        _new_pod_starts(node)
        lines = wg.lines_since(node, fired.offset)
        assert not [ln for ln in lines if wg.SKIP_LINE in ln]
        assert wg.PlegMetrics.read(node).last_seen_age_s < STALE_SECONDS
    finally:
        wg.clear(node)
