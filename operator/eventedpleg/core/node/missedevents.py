"""After Done: does the kubelet miss container events another consumer took? A phase. Pure.

containerd 1.7 and CRI-O 1.26-1.27 hand each container event to one consumer only (containerd#7318,
cri-o#6838): with a second consumer of the CRI event stream on the node (`crictl events`, a monitoring
agent), the kubelet misses some events. On kubelet <= 1.36 Evented PLEG then feeds its pod cache, so a pod
that started or ended is seen only at the next relist, up to 300 s late (docs/compatibility.md §5, measured
in tests/lab/test_lab_kubeadm.py). On 1.37 the relist stays at 1 s (k8s#139262): nothing is late.

The kubelet's `kubelet_running_containers{container_state="running"}` moves with each event it receives
(pkg/kubelet/pleg/evented.go, updateRunningContainerMetric) and is set from the runtime's list only at the
relist (generic.go, updateRunningPodAndContainerMetrics); the runtime's own list (`crictl ps --state
running`) is the truth. Two samples `settle` seconds apart: a container running in both has run that long
and every event about it has had that long to arrive; one that started or stopped in between may or may not
be counted yet. A count outside [running in both, running in either] is an event the kubelet never got.
"""

from __future__ import annotations

from dataclasses import dataclass

from eventedpleg.core.node.effects import Phase, Run, Scrape, Wait, act, ask, ask_maybe
from eventedpleg.core.node.host import CommandResult
from eventedpleg.core.node.promtext import Metrics
from eventedpleg.core.versions import RuntimeKind, RuntimeVersion, Version

RUNNING_GAUGE = "kubelet_running_containers"
# The kubelet's default --container-runtime-endpoint (kubelet config defaults, 1.27+).
DEFAULT_ENDPOINT = "unix:///run/containerd/containerd.sock"
SETTLE_SECONDS = 10.0


def one_consumer(runtime: RuntimeVersion | None) -> bool:
    """Runtimes that give each container event to one consumer only (docs/compatibility.md §2, §5)."""
    if runtime is None or runtime.version is None:
        return False
    v = runtime.version
    if runtime.kind is RuntimeKind.CONTAINERD:
        return (1, 7) <= v.minor_pair < (2, 0)  # containerd#7318; 2.0 broadcasts (containerd#9661)
    if runtime.kind is RuntimeKind.CRIO:
        return (1, 26) <= v.minor_pair < (1, 28)  # cri-o#6838
    return False


def applies(kubelet: Version, runtime: RuntimeVersion | None) -> bool:
    """Worth checking: events can be taken away, and a missed one makes pods late (kubelet <= 1.36)."""
    return kubelet.minor_pair < (1, 37) and one_consumer(runtime)


@dataclass(frozen=True)
class Counts:
    kubelet_running: int  # the kubelet's count of its running containers
    running: frozenset[str]  # the runtime's running container IDs


def crictl_ids(stdout: str) -> frozenset[str]:
    """`crictl ps -q` prints one container ID per line."""
    return frozenset(line.strip() for line in stdout.splitlines() if line.strip())


def missed(first: Counts, second: Counts, *, settle: float) -> str | None:
    """Why the kubelet's count cannot be right, or None."""
    steady = first.running & second.running
    either = first.running | second.running
    count = second.kubelet_running
    if len(steady) <= count <= len(either):
        return None
    runtime = (
        f"the runtime runs {len(second.running)} (`crictl ps`), {len(steady)} of them for {settle:.0f} s+"
    )
    return f"the kubelet counts {count} running containers (kubelet_running_containers) where {runtime}"


def sample(endpoint: str) -> Phase[Counts | None]:
    """The kubelet's count, then the runtime's list (in that order: see `missed`'s bounds)."""
    metrics = yield from ask_maybe(Scrape(frozenset({RUNNING_GAUGE})), Metrics)
    value = None if metrics is None else metrics.value(RUNNING_GAUGE, container_state="running")
    if value is None:
        return None
    argv = ("crictl", "--runtime-endpoint", endpoint, "ps", "-q", "--state", "running")
    result = yield from ask(Run(argv, timeout=30), CommandResult)
    if not result.ok:
        return None  # no crictl on this host, or the runtime did not answer: nothing to compare
    return Counts(int(value), crictl_ids(result.stdout))


def check(endpoint: str, *, settle: float = SETTLE_SECONDS) -> Phase[str | None]:
    """Two samples `settle` s apart: why the kubelet missed events, or None (also when it cannot tell)."""
    first = yield from sample(endpoint)
    if first is None:
        return None
    yield from act(Wait(settle))
    second = yield from sample(endpoint)
    return None if second is None else missed(first, second, settle=settle)
